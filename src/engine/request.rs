//! What a caller asks of an engine and what a launch answers. The console's engine thread
//! (`handle`), the rank group (`ranks`) and the lifecycle all name these types, so they
//! live apart from the three, and none of them imports another to reach them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::finding::Finding;
use crate::spec::LaunchSpec;

/// The preflight rule set the engine runs in its preflight phase (`preflight::check_spec`).
pub type PreflightFn = Arc<dyn Fn(&LaunchSpec) -> Vec<Finding> + Send + Sync>;

/// Set by whoever shuts the engine down; a running generation asks it once per step
/// (`stops_here`) and stops there, so a shutdown (a signal, `q`) acts within one step instead
/// of at the end of the request. Clones share the flag; once set it stays set.
///
/// The ranks of a tensor-parallel group must all stop at the same step, or one waits in a
/// collective for a rank that has stopped. `for_ranks` gives each rank its own count of the
/// steps it has asked about; the first rank to see the flag names the furthest step any rank
/// will ask about next as the group's last, and each rank stops when it reaches it.
#[derive(Clone, Debug)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
    steps: Arc<Mutex<Steps>>,
    rank: usize,
}

#[derive(Debug)]
struct Steps {
    /// Per rank: the index of the next step it will ask about.
    next: Vec<u64>,
    /// The step every rank stops at, once one has seen the flag.
    stop_at: Option<u64>,
}

impl Steps {
    fn new(ranks: usize) -> Arc<Mutex<Steps>> {
        Arc::new(Mutex::new(Steps { next: vec![0; ranks], stop_at: None }))
    }
}

impl Default for Cancel {
    /// For an engine that runs alone.
    fn default() -> Cancel {
        Cancel { flag: Arc::default(), steps: Steps::new(1), rank: 0 }
    }
}

impl Cancel {
    pub fn set(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }

    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// The same flag for each of `world` ranks that generate in lockstep.
    pub fn for_ranks(&self, world: usize) -> Vec<Cancel> {
        let steps = Steps::new(world);
        (0..world).map(|rank| Cancel { flag: self.flag.clone(), steps: steps.clone(), rank }).collect()
    }

    /// Asked once before each step: true when the generation ends here.
    pub fn stops_here(&self) -> bool {
        // A rank that panicked while holding the lock leaves the counts as they were.
        let mut steps = self.steps.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let step = steps.next[self.rank];
        steps.next[self.rank] += 1;
        if steps.stop_at.is_none() && self.flag.load(Ordering::SeqCst) {
            // No rank has asked about a step past its own `next` yet, so each can reach this.
            let furthest = steps.next.iter().enumerate().map(|(r, &n)| if r == self.rank { step } else { n }).max();
            steps.stop_at = furthest;
        }
        steps.stop_at.is_some_and(|at| step >= at)
    }
}

/// One prompt to serve.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateRequest {
    pub prompt: String,
    pub max_new_tokens: usize,
    /// Apply the tokenizer's chat template to the prompt.
    pub chat: bool,
    /// 0 = greedy.
    pub temperature: f32,
    pub seed: u64,
}

/// How a launch ended: ready (and whether a relaunch kept the target resident), or the
/// finding that stopped it.
#[derive(Clone, Debug, PartialEq)]
pub enum LaunchOutcome {
    Ready { elapsed_s: f64, reused_target: bool },
    Failed(Finding),
}
