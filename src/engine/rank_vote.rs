//! The agreement of a tensor-parallel group's ranks on whether every one of them launched:
//! each rank's lifecycle votes before the warmup's collectives, which need every rank.

use std::sync::{Condvar, Mutex};

/// A barrier that also tells every rank whether all of them succeeded.
pub struct RankVote {
    world: usize,
    round: Mutex<Round>,
    done: Condvar,
}

struct Round {
    number: u64,
    arrived: usize,
    all_ok: bool,
    /// The verdict of the last finished round.
    verdict: bool,
}

impl RankVote {
    pub fn new(world: usize) -> RankVote {
        RankVote { world, round: Mutex::new(Round { number: 0, arrived: 0, all_ok: true, verdict: true }), done: Condvar::new() }
    }

    /// Wait for every rank's `ok`; true when all were.
    pub fn vote(&self, ok: bool) -> bool {
        let mut r = self.round.lock().unwrap_or_else(|p| p.into_inner());
        let number = r.number;
        r.arrived += 1;
        r.all_ok &= ok;
        if r.arrived == self.world {
            r.verdict = r.all_ok;
            r.number += 1;
            r.arrived = 0;
            r.all_ok = true;
            self.done.notify_all();
            return r.verdict;
        }
        while r.number == number {
            r = self.done.wait(r).unwrap_or_else(|p| p.into_inner());
        }
        r.verdict
    }
}
