//! The bookkeeping of CUDA-graph steps, apart from CUDA so it can be tested anywhere: which
//! phase a step key is in (first run recorded, second captured, then replayed), the op
//! signatures each step must repeat, and where each op's per-step values go in the arena.

use std::collections::HashMap;
use std::sync::Arc;

/// What `begin` asks the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Begin {
    /// First sight of the key: run the step eagerly while it is recorded.
    Record,
    /// Start a stream capture: ops stage their values and launch reading them from the
    /// device arena.
    Capture,
    /// Stage values only; launch the graph at `end`.
    Replay,
}

/// What an op does with its kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpGate {
    /// Launch with plain arguments.
    Eager,
    /// Stage the values at this arena offset and launch reading them from there.
    Stage(usize),
    /// Stage the values at this arena offset and launch nothing.
    Skip(usize),
    /// The values do not fit the arena: the step fails at `end`.
    Overflow,
}

/// What `end` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    Nothing,
    Recorded,
    /// The capture repeated the recording: keep the graph, copy the first `used` staged
    /// values up and launch it.
    Captured {
        used: usize,
    },
    /// Copy the first `used` staged values up and launch the graph.
    Replay {
        used: usize,
    },
    /// The step is unusable; its recording is gone, so the key starts over.
    Failed(String),
}

#[derive(Debug)]
enum Mode {
    Eager,
    Recording {
        key: String,
        sigs: Vec<u64>,
        used: usize,
    },
    Capturing {
        key: String,
        sigs: Vec<u64>,
        used: usize,
    },
    /// `expected`: the recording's signatures, shared so ops need no map lookup.
    Replaying {
        key: String,
        expected: Arc<[u64]>,
        index: usize,
        used: usize,
        diverged: Option<usize>,
    },
}

#[derive(Debug)]
struct Recording {
    sigs: Arc<[u64]>,
    used: usize,
    captured: bool,
}

#[derive(Debug)]
pub struct GraphBook {
    arena_len: usize,
    mode: Mode,
    recordings: HashMap<String, Recording>,
}

impl GraphBook {
    pub fn new(arena_len: usize) -> GraphBook {
        GraphBook { arena_len, mode: Mode::Eager, recordings: HashMap::new() }
    }

    pub fn in_step(&self) -> bool {
        !matches!(self.mode, Mode::Eager)
    }

    pub fn begin(&mut self, key: &str) -> Result<Begin, String> {
        if let Mode::Recording { key: k, .. } | Mode::Capturing { key: k, .. } | Mode::Replaying { key: k, .. } = &self.mode {
            return Err(format!("graph step {key} begun inside step {k}"));
        }
        let (mode, begin) = match self.recordings.get(key) {
            None => (Mode::Recording { key: key.into(), sigs: Vec::new(), used: 0 }, Begin::Record),
            Some(r) if r.captured => {
                (Mode::Replaying { key: key.into(), expected: r.sigs.clone(), index: 0, used: 0, diverged: None }, Begin::Replay)
            }
            Some(_) => (Mode::Capturing { key: key.into(), sigs: Vec::new(), used: 0 }, Begin::Capture),
        };
        self.mode = mode;
        Ok(begin)
    }

    /// A capture that could not start: back to eager, and the key starts over.
    pub fn abandon(&mut self) {
        if let Mode::Capturing { key, .. } | Mode::Replaying { key, .. } | Mode::Recording { key, .. } =
            std::mem::replace(&mut self.mode, Mode::Eager)
        {
            self.recordings.remove(&key);
        }
    }

    /// An op with signature `sig` and `values` per-step values.
    pub fn gate(&mut self, sig: u64, values: usize) -> OpGate {
        let arena_len = self.arena_len;
        let take = |used: &mut usize| {
            let at = *used;
            *used += values;
            (*used <= arena_len).then_some(at)
        };
        match &mut self.mode {
            Mode::Eager => OpGate::Eager,
            Mode::Recording { sigs, used, .. } => {
                sigs.push(sig);
                *used += values;
                OpGate::Eager
            }
            Mode::Capturing { sigs, used, .. } => {
                sigs.push(sig);
                take(used).map_or(OpGate::Overflow, OpGate::Stage)
            }
            Mode::Replaying { expected, index, used, diverged, .. } => {
                if diverged.is_none() && expected.get(*index) != Some(&sig) {
                    *diverged = Some(*index);
                }
                *index += 1;
                take(used).map_or(OpGate::Overflow, OpGate::Skip)
            }
        }
    }

    /// End the step. `capture_ok` says whether the stream capture ended with a graph.
    pub fn end(&mut self, capture_ok: bool) -> End {
        match std::mem::replace(&mut self.mode, Mode::Eager) {
            Mode::Eager => End::Nothing,
            Mode::Recording { key, sigs, used } => {
                if used > self.arena_len {
                    return End::Failed(format!("{used} per-step values exceed the arena of {}", self.arena_len));
                }
                self.recordings.insert(key, Recording { sigs: sigs.into(), used, captured: false });
                End::Recorded
            }
            Mode::Capturing { key, sigs, used } => {
                let same = self.recordings.get(&key).is_some_and(|r| *r.sigs == *sigs && r.used == used);
                match (capture_ok, same) {
                    (true, true) => {
                        self.recordings.insert(key, Recording { sigs: sigs.into(), used, captured: true });
                        End::Captured { used }
                    }
                    (false, _) => {
                        self.recordings.remove(&key);
                        End::Failed("the capture failed".into())
                    }
                    (true, false) => {
                        self.recordings.remove(&key);
                        End::Failed("the captured step differs from its first run".into())
                    }
                }
            }
            Mode::Replaying { key, expected, index, used, diverged } => {
                let recorded_used = self.recordings.get(&key).map_or(0, |r| r.used);
                let problem = match diverged {
                    Some(i) => Some(format!("op {i} differs from the recording")),
                    None if index != expected.len() || used != recorded_used => Some(format!("{index} ops, recorded {}", expected.len())),
                    None => None,
                };
                match problem {
                    Some(p) => {
                        self.recordings.remove(&key);
                        End::Failed(format!("replay diverged: {p}; the step's work was not done"))
                    }
                    None => End::Replay { used },
                }
            }
        }
    }

    pub fn is_capturing(&self) -> bool {
        matches!(self.mode, Mode::Capturing { .. })
    }

    /// The key of the step under way.
    pub fn current_key(&self) -> Option<&str> {
        match &self.mode {
            Mode::Eager => None,
            Mode::Recording { key, .. } | Mode::Capturing { key, .. } | Mode::Replaying { key, .. } => Some(key),
        }
    }

    pub fn forget(&mut self, key: &str) {
        self.recordings.remove(key);
    }

    pub fn clear(&mut self) {
        self.recordings.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ops per step: `a` with 2 per-step values, `b` with none.
    fn step(book: &mut GraphBook, a_sig: u64) -> Vec<OpGate> {
        vec![book.gate(a_sig, 2), book.gate(7, 0)]
    }

    #[test]
    fn a_key_is_recorded_then_captured_then_replayed() {
        let mut b = GraphBook::new(16);
        assert_eq!(b.begin("decode/1"), Ok(Begin::Record));
        assert!(b.in_step());
        assert_eq!(step(&mut b, 1), vec![OpGate::Eager, OpGate::Eager]);
        assert_eq!(b.end(true), End::Recorded);
        assert!(!b.in_step());
        assert_eq!(b.begin("decode/1"), Ok(Begin::Capture));
        assert_eq!(step(&mut b, 1), vec![OpGate::Stage(0), OpGate::Stage(2)]);
        assert_eq!(b.end(true), End::Captured { used: 2 });
        for _ in 0..3 {
            assert_eq!(b.begin("decode/1"), Ok(Begin::Replay));
            assert_eq!(step(&mut b, 1), vec![OpGate::Skip(0), OpGate::Skip(2)]);
            assert_eq!(b.end(true), End::Replay { used: 2 });
        }
        assert_eq!(b.gate(1, 2), OpGate::Eager, "outside a step every op is eager");
    }

    #[test]
    fn a_diverging_replay_fails_and_the_key_starts_over() {
        let mut b = GraphBook::new(16);
        for _ in 0..2 {
            b.begin("verify/5").unwrap();
            step(&mut b, 1);
            b.end(true);
        }
        b.begin("verify/5").unwrap();
        step(&mut b, 99);
        assert_eq!(b.end(true), End::Failed("replay diverged: op 0 differs from the recording; the step's work was not done".into()));
        assert_eq!(b.begin("verify/5"), Ok(Begin::Record));
        step(&mut b, 1);
        assert_eq!(b.end(true), End::Recorded);
        b.begin("verify/5").unwrap();
        step(&mut b, 1);
        assert_eq!(b.end(true), End::Captured { used: 2 });
        // Fewer ops than recorded is a divergence too.
        b.begin("verify/5").unwrap();
        b.gate(1, 2);
        assert!(matches!(b.end(true), End::Failed(m) if m.contains("1 ops, recorded 2")));
    }

    #[test]
    fn captures_must_repeat_the_recording_and_succeed() {
        let mut b = GraphBook::new(16);
        b.begin("k").unwrap();
        step(&mut b, 1);
        b.end(true);
        b.begin("k").unwrap();
        step(&mut b, 2);
        assert_eq!(b.end(true), End::Failed("the captured step differs from its first run".into()));
        b.begin("k").unwrap();
        step(&mut b, 1);
        b.end(true);
        b.begin("k").unwrap();
        step(&mut b, 1);
        assert_eq!(b.end(false), End::Failed("the capture failed".into()));
        assert_eq!(b.begin("k"), Ok(Begin::Record));
    }

    #[test]
    fn nesting_and_overflow_are_errors() {
        let mut b = GraphBook::new(3);
        b.begin("outer").unwrap();
        assert_eq!(b.begin("inner"), Err("graph step inner begun inside step outer".into()));
        b.gate(1, 4);
        assert!(matches!(b.end(true), End::Failed(m) if m.contains("exceed the arena of 3")));
        b.begin("small").unwrap();
        b.gate(1, 2);
        b.end(true);
        b.begin("small").unwrap();
        assert_eq!(b.gate(1, 2), OpGate::Stage(0));
        b.abandon();
        assert!(!b.in_step());
        assert_eq!(b.begin("small"), Ok(Begin::Record));
    }
}
