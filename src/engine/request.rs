//! What a caller asks of an engine and what a launch answers. The console's engine thread
//! (`handle`), the rank group (`ranks`) and the lifecycle all name these types, so they
//! live apart from the three, and none of them imports another to reach them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::finding::Finding;
use crate::spec::LaunchSpec;

/// The preflight rule set the engine runs in its preflight phase (`preflight::check_spec`).
pub type PreflightFn = Arc<dyn Fn(&LaunchSpec) -> Vec<Finding> + Send + Sync>;

/// Set by whoever shuts the engine down; a running generation reads it once per step and
/// stops there, so a shutdown (a signal, `q`) acts within one step instead of at the end of
/// the request. Clones share the flag; once set it stays set.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
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
