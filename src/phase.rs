//! The start-up phases a launch runs, by the names every producer of events and findings
//! shares (a live launch, a replayed log, `check`).

use serde::{Deserialize, Serialize};

/// Start-up phases, in the order a launch runs them. The names are shared by every producer.
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
}

impl PhaseId {
    pub const ALL: [PhaseId; 10] = [
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
