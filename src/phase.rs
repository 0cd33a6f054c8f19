//! The phases a launch runs (start-up, then serving), by the names every producer of events and findings
//! shares (a live launch, a replayed log, `check`).

use serde::{Deserialize, Serialize};

/// Phases, in the order a launch runs them: start-up, then serving. The names are shared by every producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PhaseId {
    Preflight,
    KernelCompile,
    TargetLoad,
    KvAlloc,
    TargetGraphCapture,
    DrafterLoad,
    DrafterInit,
    DraftGraphCapture,
    Warmup,
    Ready,
    /// After ready: requests, prefill and decode batches (and the crashes among them).
    Serving,
}

impl PhaseId {
    /// The start-up timeline, up to ready (what the console's phase pane lists).
    pub const STARTUP: [PhaseId; 10] = [
        PhaseId::Preflight,
        PhaseId::KernelCompile,
        PhaseId::TargetLoad,
        PhaseId::KvAlloc,
        PhaseId::TargetGraphCapture,
        PhaseId::DrafterLoad,
        PhaseId::DrafterInit,
        PhaseId::DraftGraphCapture,
        PhaseId::Warmup,
        PhaseId::Ready,
    ];

    pub const ALL: [PhaseId; 11] = {
        let mut all = [PhaseId::Serving; 11];
        let mut i = 0;
        while i < 10 {
            all[i] = PhaseId::STARTUP[i];
            i += 1;
        }
        all
    };

    /// The stable kebab-case name (the JSON form).
    pub fn name(self) -> &'static str {
        match self {
            PhaseId::Preflight => "preflight",
            PhaseId::KernelCompile => "kernel-compile",
            PhaseId::TargetLoad => "target-load",
            PhaseId::KvAlloc => "kv-alloc",
            PhaseId::TargetGraphCapture => "target-graph-capture",
            PhaseId::DrafterLoad => "drafter-load",
            PhaseId::DrafterInit => "drafter-init",
            PhaseId::DraftGraphCapture => "draft-graph-capture",
            PhaseId::Warmup => "warmup",
            PhaseId::Ready => "ready",
            PhaseId::Serving => "serving",
        }
    }

    pub fn from_name(name: &str) -> Option<PhaseId> {
        PhaseId::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl std::fmt::Display for PhaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_names_round_trip() {
        for p in PhaseId::ALL {
            assert_eq!(PhaseId::from_name(p.name()), Some(p));
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.name()));
        }
        assert_eq!(PhaseId::from_name("graph-capture"), None);
    }
}
