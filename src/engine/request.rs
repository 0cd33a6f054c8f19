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
pub struct Cancel {
    own: Arc<AtomicBool>,
    /// The flag of `either`'s other side: one request's cancel beside the engine's.
    also: Option<Arc<AtomicBool>>,
}

impl Cancel {
    pub fn set(&self) {
        self.own.store(true, Ordering::Relaxed);
    }

    pub fn is_set(&self) -> bool {
        self.own.load(Ordering::Relaxed) || self.also.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
    }

    /// Set when either `self` or `other` is: a request that its client can cancel on an
    /// engine that its owner can shut down. Setting the result sets `self` only.
    pub fn either(&self, other: &Cancel) -> Cancel {
        Cancel { own: self.own.clone(), also: Some(other.own.clone()) }
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
