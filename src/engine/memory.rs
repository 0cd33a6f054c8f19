//! `memory-budget` findings for a device that ran out of memory during a launch, with
//! the numbers the backend reports and a remedy on the key that decides that memory.

use crate::backend::BackendError;
use crate::engine::graph_sizes::DEFAULT_MAX_BS;
use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::phase::PhaseId;
use crate::spec::LaunchSpec;
use crate::spec::SpecChange;

pub const MEMORY_BUDGET: &str = "memory-budget";

/// A `memory-budget` finding for an allocation that failed in `phase`, with the remedy
/// that frees that kind of memory: more ranks for weights, a shorter context for the KV
/// cache, fewer captured batch sizes for CUDA graphs.
pub fn memory_finding(err: &BackendError, phase: PhaseId, spec: &LaunchSpec) -> Option<Finding> {
    let BackendError::OutOfMemory { bytes, what } = err else { return None };
    let mut f =
        Finding::new(MEMORY_BUDGET, Severity::Error, phase, format!("out of GPU memory in {phase}: {bytes} more bytes needed for {what}"))
            .with_evidence(Evidence::new(Side::Launch, "GPU memory", "requested bytes", *bytes))
            .with_evidence(Evidence::new(Side::Launch, "GPU memory", "allocation", what.clone()));
    let set = |flag: &str, value: String| vec![SpecChange::SetFlag { flag: flag.into(), value }];
    match phase {
        PhaseId::KvAlloc | PhaseId::DrafterInit => {
            if let Some(ctx) = spec.context_length {
                let half = (ctx / 2).max(1);
                f = f.with_evidence(Evidence::new(Side::Launch, "--context-length", "--context-length", ctx)).with_remedy(Remedy::new(
                    "reduce-context-length",
                    "--context-length",
                    format!("halve the context to {half}"),
                    set("--context-length", half.to_string()),
                ));
            }
        }
        PhaseId::TargetGraphCapture | PhaseId::DraftGraphCapture => {
            let bs = spec.cuda_graph_max_bs.unwrap_or(DEFAULT_MAX_BS);
            let lower = (bs / 2).max(1);
            f = f.with_evidence(Evidence::new(Side::Launch, "--cuda-graph-max-bs", "--cuda-graph-max-bs", bs)).with_remedy(Remedy::new(
                "reduce-cuda-graph-max-bs",
                "--cuda-graph-max-bs",
                format!("capture graphs up to batch size {lower} only"),
                set("--cuda-graph-max-bs", lower.to_string()),
            ));
        }
        _ => {
            let tp = spec.tp_size.unwrap_or(1);
            f = f.with_remedy(Remedy::new(
                "increase-tp-size",
                "--tp-size",
                format!("shard the weights over {} GPUs", tp * 2),
                set("--tp-size", (tp * 2).to_string()),
            ));
        }
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oom() -> BackendError {
        BackendError::OutOfMemory {
            bytes: 4 << 30,
            what: "KV cache on GPU 0 (1.00 GiB free of 139.80 GiB; 130.00 GiB held by specdeck)".into(),
        }
    }

    #[test]
    fn kv_oom_halves_the_context() {
        let spec = LaunchSpec { context_length: Some(131072), ..Default::default() };
        let f = memory_finding(&oom(), PhaseId::KvAlloc, &spec).unwrap();
        assert_eq!(f.id, MEMORY_BUDGET);
        assert_eq!(f.phase, PhaseId::KvAlloc);
        assert_eq!(f.message, "out of GPU memory in kv-alloc: 4294967296 more bytes needed for KV cache on GPU 0 (1.00 GiB free of 139.80 GiB; 130.00 GiB held by specdeck)");
        let r = f.remedy("reduce-context-length").unwrap();
        assert_eq!(r.changes, vec![SpecChange::SetFlag { flag: "--context-length".into(), value: "65536".into() }]);
    }

    #[test]
    fn capture_oom_lowers_the_graph_batch_size() {
        let spec = LaunchSpec { cuda_graph_max_bs: Some(16), ..Default::default() };
        let f = memory_finding(&oom(), PhaseId::TargetGraphCapture, &spec).unwrap();
        assert_eq!(f.evidence[2].value, 16);
        let r = f.remedy("reduce-cuda-graph-max-bs").unwrap();
        assert_eq!(r.changes, vec![SpecChange::SetFlag { flag: "--cuda-graph-max-bs".into(), value: "8".into() }]);
    }

    #[test]
    fn load_oom_doubles_tp_and_other_errors_are_not_memory_findings() {
        let spec = LaunchSpec { tp_size: Some(2), ..Default::default() };
        let f = memory_finding(&oom(), PhaseId::TargetLoad, &spec).unwrap();
        assert_eq!(
            f.remedy("increase-tp-size").unwrap().changes,
            vec![SpecChange::SetFlag { flag: "--tp-size".into(), value: "4".into() }]
        );
        assert!(memory_finding(&BackendError::Device("x".into()), PhaseId::TargetLoad, &spec).is_none());
    }
}
