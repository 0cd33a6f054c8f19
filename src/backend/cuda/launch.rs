//! Starting the CUDA backend for a launch: choose the device, open the GPU (its kernels
//! are compiled in the launch's `kernel-compile` phase), and turn failures into findings:
//! a GPU that runs out of memory becomes `memory-budget` with the numbers and a remedy on
//! the key that decides that memory.

use super::backend::CudaBackend;
use super::probe::{choose_device, probe, CudaInventory, DeviceChoice};
use super::tp::open_group;
use crate::backend::BackendError;
use crate::event::{EventSink, LogLevel};
use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::phase::PhaseId;
use crate::spec::{LaunchSpec, SpecChange};

pub const MEMORY_BUDGET: &str = "memory-budget";
pub const CUDA_START_FAILED: &str = "cuda-start-failed";

/// What `--device` gives a launch: `None` for the CPU reference (with a log line saying
/// why when `auto` fell back), or one CUDA backend per tensor-parallel rank, opened, its
/// kernels compiled in the launch's `kernel-compile` phase (`Backend::kernel_compile`).
/// `--device cuda` without a usable GPU is a `cuda-unavailable` finding.
pub fn backends_for(spec: &LaunchSpec, events: &EventSink) -> Result<Option<Vec<CudaBackend>>, Finding> {
    match choose_device(spec.device, probe())? {
        DeviceChoice::Cpu { fallback } => {
            let level = if fallback.is_some() { LogLevel::Warning } else { LogLevel::Info };
            events.log(level, "cuda", DeviceChoice::Cpu { fallback }.describe());
            Ok(None)
        }
        DeviceChoice::Cuda(inventory) => {
            events.log(LogLevel::Info, "cuda", DeviceChoice::Cuda(inventory.clone()).describe());
            let ranks = open_ranks(&inventory, spec.tp_size.unwrap_or(1) as usize)?;
            if ranks.len() > 1 {
                events.log(LogLevel::Info, "cuda", describe_links(&ranks));
            }
            Ok(Some(ranks))
        }
    }
}

/// Open GPUs `0 .. tp` for the engine, one backend per tensor-parallel rank (NCCL joins
/// them when `tp > 1`); more ranks than visible GPUs is a finding naming both counts.
fn open_ranks(inventory: &CudaInventory, tp: usize) -> Result<Vec<CudaBackend>, Finding> {
    let fail = |message: String| Finding::new(CUDA_START_FAILED, Severity::Error, PhaseId::KernelCompile, message);
    check_rank_count(inventory, tp)?;
    if tp > 1 && !inventory.nccl_present {
        return Err(fail(format!("--tp-size {tp} needs NCCL (libnccl.so.2), which was not found")).with_remedy(one_gpu()));
    }
    open_group(None, tp).map_err(|e| fail(format!("opening GPUs 0..{tp}: {e}")))
}

/// Which path the group's all-reduces take (`open_group` gives every rank the same).
fn describe_links(ranks: &[CudaBackend]) -> String {
    match ranks[0].peer_status() {
        Ok(()) => format!(
            "all-reduce over {} GPUs: up to {} values through peer memory, larger through NCCL",
            ranks.len(),
            super::peer::MAX_VALUES
        ),
        Err(why) => format!("all-reduce over {} GPUs through NCCL only: {why}", ranks.len()),
    }
}

/// `--tp-size` must be between 1 and the number of visible GPUs.
fn check_rank_count(inventory: &CudaInventory, tp: usize) -> Result<(), Finding> {
    if tp == 0 || tp > inventory.gpus.len() {
        let f = Finding::new(
            CUDA_START_FAILED,
            Severity::Error,
            PhaseId::KernelCompile,
            format!("--tp-size {tp} needs {tp} GPUs; {} visible", inventory.gpus.len()),
        )
        .with_evidence(Evidence::new(Side::Launch, "--tp-size", "--tp-size", tp as u64));
        return Err(if inventory.gpus.is_empty() { f } else { f.with_remedy(fit_gpus(inventory.gpus.len())) });
    }
    Ok(())
}

fn one_gpu() -> Remedy {
    Remedy::new("single-gpu", "--tp-size", "run on one GPU", vec![SpecChange::SetFlag { flag: "--tp-size".into(), value: "1".into() }])
}

/// The largest power of two up to the visible GPUs (head counts split by powers of two).
fn fit_gpus(visible: usize) -> Remedy {
    let tp = 1usize << visible.ilog2();
    Remedy::new(
        "fit-visible-gpus",
        "--tp-size",
        format!("shard over the {tp} visible GPU{}", if tp == 1 { "" } else { "s" }),
        vec![SpecChange::SetFlag { flag: "--tp-size".into(), value: tp.to_string() }],
    )
}

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
            let bs = spec.cuda_graph_max_bs.unwrap_or(super::graph::DEFAULT_MAX_BS);
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

    /// More ranks than GPUs names both counts and offers the GPUs there are; none of this
    /// touches a GPU.
    #[test]
    fn tp_size_must_fit_the_visible_gpus() {
        use super::super::probe::GpuInfo;
        let gpu = |ordinal| GpuInfo { ordinal, name: "NVIDIA H200".into(), compute_capability: (9, 0), total_memory_bytes: 150 << 30 };
        let inventory = |n: usize| CudaInventory { gpus: (0..n).map(gpu).collect(), nccl_present: true };
        let f = check_rank_count(&inventory(2), 8).unwrap_err();
        assert_eq!(f.id, CUDA_START_FAILED);
        assert_eq!(f.message, "--tp-size 8 needs 8 GPUs; 2 visible");
        assert_eq!(
            f.remedy("fit-visible-gpus").unwrap().changes,
            vec![SpecChange::SetFlag { flag: "--tp-size".into(), value: "2".into() }]
        );
        assert_eq!(
            check_rank_count(&inventory(6), 8).unwrap_err().remedy("fit-visible-gpus").unwrap().changes[0],
            SpecChange::SetFlag { flag: "--tp-size".into(), value: "4".into() }
        );
        assert_eq!(check_rank_count(&inventory(2), 0).unwrap_err().message, "--tp-size 0 needs 0 GPUs; 2 visible");
        for tp in [1, 2, 4, 8] {
            assert!(check_rank_count(&inventory(8), tp).is_ok());
        }
        let no_nccl = CudaInventory { nccl_present: false, ..inventory(2) };
        let f = open_ranks(&no_nccl, 2).err().unwrap();
        assert_eq!(f.message, "--tp-size 2 needs NCCL (libnccl.so.2), which was not found");
        assert!(f.remedy("single-gpu").is_some());
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

#[cfg(test)]
mod device_tests {
    use super::*;
    use crate::event::Event;
    use crate::spec::Device;

    /// On a machine without CUDA (CI, this repository's dev boxes): `auto` falls back to
    /// the CPU and says so in the log; `cuda` is a finding with the CPU remedy.
    #[test]
    fn without_cuda_auto_logs_the_fallback_and_cuda_is_a_finding() {
        if super::super::probe::CudaLibrary::Driver.is_present() {
            eprintln!("libcuda is present: this test covers machines without it; skipping its assertions");
            return;
        }
        let (sink, mut rx) = EventSink::channel();
        let auto = LaunchSpec { device: Device::Auto, ..Default::default() };
        assert!(backends_for(&auto, &sink).unwrap().is_none());
        let Event::Log { level, line, .. } = rx.try_recv().unwrap().event else { panic!("expected a log line") };
        assert_eq!(level, LogLevel::Warning);
        assert!(line.starts_with("device: cpu — CUDA unavailable, falling back to the CPU reference: libcuda.so.1"), "{line}");
        let cuda = LaunchSpec { device: Device::Cuda, ..Default::default() };
        let f = backends_for(&cuda, &sink).err().expect("--device cuda must fail here");
        assert_eq!(f.id, super::super::probe::CUDA_UNAVAILABLE);
        assert!(f.remedy("use-cpu-device").is_some());
    }
}
