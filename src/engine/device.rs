//! Which device runs a launch's engine: `--device` resolved against the CUDA probe, the
//! log lines that say what was chosen and why, and the findings when it cannot run there
//! (`cuda-unavailable` for `--device cuda` without CUDA, `cuda-start-failed` when the
//! ranks do not open). The set `SPECDECK_*` knobs are recorded here too, as the engine
//! starts.

use std::path::Path;

use crate::backend::cuda::peer::MAX_VALUES;
use crate::backend::cuda::probe::{probe, CudaInventory, ProbeError};
use crate::backend::cuda::tp::{open_ranks, StartError};
use crate::backend::cuda::CudaBackend;
use crate::event::{EventSink, LogLevel};
use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::knobs::Knobs;
use crate::model::config::ModelConfig;
use crate::model::deepseek::DeepseekConfig;
use crate::phase::PhaseId;
use crate::spec::SpecChange;
use crate::spec::{Device, LaunchSpec};

pub const CUDA_START_FAILED: &str = "cuda-start-failed";

/// What `--device` gives a launch: `None` for the CPU reference (with a log line saying
/// why when `auto` fell back), or one CUDA backend per tensor-parallel rank, opened, its
/// kernels compiled in the launch's `kernel-compile` phase (`Backend::kernel_compile`).
/// `--device cuda` without a usable GPU is a `cuda-unavailable` finding.
pub fn backends_for(spec: &LaunchSpec, events: &EventSink) -> Result<Option<Vec<CudaBackend>>, Finding> {
    record_knobs(Knobs::get(), events);
    if let Some(why) = cpu_only_target(spec).filter(|_| spec.device == Device::Auto) {
        events.log(LogLevel::Warning, "cuda", format!("device: cpu — {why}"));
        return Ok(None);
    }
    match choose_device(spec.device, probe())? {
        DeviceChoice::Cpu { fallback } => {
            let level = if fallback.is_some() { LogLevel::Warning } else { LogLevel::Info };
            events.log(level, "cuda", DeviceChoice::Cpu { fallback }.describe());
            Ok(None)
        }
        DeviceChoice::Cuda(inventory) => {
            events.log(LogLevel::Info, "cuda", DeviceChoice::Cuda(inventory.clone()).describe());
            let ranks = open_ranks(&inventory, spec.tp_size.unwrap_or(1) as usize).map_err(|e| start_finding(&e))?;
            if ranks.len() > 1 {
                events.log(LogLevel::Info, "cuda", describe_links(&ranks));
            }
            Ok(Some(ranks))
        }
    }
}

/// Why `--device auto` takes the CPU whatever the probe finds: a target of a family that only
/// the CPU reference runs (the DeepSeek-V3 family, `engine::target_model`).
fn cpu_only_target(spec: &LaunchSpec) -> Option<String> {
    let config = ModelConfig::load_dir(Path::new(spec.model_path.as_deref()?)).ok()?;
    DeepseekConfig::is_family(&config)
        .then(|| format!("{} is a DeepSeek-V3-family target, which this engine runs on the CPU reference", config.file_name()))
}

/// The `SPECDECK_*` knobs that are set, as one log line from source `knobs`, so the
/// recording of a launch says what it ran under; nothing when none is set.
fn record_knobs(knobs: &Knobs, events: &EventSink) {
    if let Some(set) = knobs.describe_set() {
        events.log(LogLevel::Info, "knobs", set);
    }
}

/// Which path the group's all-reduces take (`open_group` gives every rank the same).
fn describe_links(ranks: &[CudaBackend]) -> String {
    match ranks[0].peer_status() {
        Ok(()) => {
            format!("all-reduce over {} GPUs: up to {MAX_VALUES} values through peer memory, larger through NCCL", ranks.len())
        }
        Err(why) => format!("all-reduce over {} GPUs through NCCL only: {why}", ranks.len()),
    }
}

/// The `cuda-start-failed` finding for ranks that did not open, with the remedy that fits:
/// the GPUs there are for too many ranks, one GPU without NCCL.
fn start_finding(e: &StartError) -> Finding {
    let f = Finding::new(CUDA_START_FAILED, Severity::Error, PhaseId::KernelCompile, e.to_string());
    match *e {
        StartError::RankCount { tp, visible } => {
            let f = f.with_evidence(Evidence::new(Side::Launch, "--tp-size", "--tp-size", tp as u64));
            if visible == 0 {
                f
            } else {
                f.with_remedy(fit_gpus(visible))
            }
        }
        StartError::NoNccl { .. } => f.with_remedy(one_gpu()),
        StartError::Open { .. } => f,
    }
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

/// What `--device` resolved to.
#[derive(Clone, Debug, PartialEq)]
pub enum DeviceChoice {
    Cuda(CudaInventory),
    /// The CPU reference. `fallback` holds why CUDA was not used under `--device auto`, so
    /// the log and the GPU pane can say so.
    Cpu {
        fallback: Option<String>,
    },
}

impl DeviceChoice {
    /// One line for the log: which device runs the engine, and why.
    pub fn describe(&self) -> String {
        match self {
            DeviceChoice::Cuda(inv) => {
                let names: Vec<String> = inv.gpus.iter().map(|g| format!("{} ({})", g.name, g.arch())).collect();
                format!("device: cuda, {} GPU(s): {}", inv.gpus.len(), names.join(", "))
            }
            DeviceChoice::Cpu { fallback: None } => "device: cpu (--device cpu)".to_string(),
            DeviceChoice::Cpu { fallback: Some(why) } => {
                format!("device: cpu — CUDA unavailable, falling back to the CPU reference: {why}")
            }
        }
    }
}

/// The finding id for `--device cuda` on a machine where CUDA cannot run.
pub const CUDA_UNAVAILABLE: &str = "cuda-unavailable";

/// Resolve `--device` against a probe result. `--device cuda` without CUDA is an error
/// finding whose remedy switches to the CPU reference; `auto` falls back quietly but says
/// why.
pub fn choose_device(device: Device, probed: Result<CudaInventory, ProbeError>) -> Result<DeviceChoice, Finding> {
    match (device, probed) {
        (Device::Cpu, _) => Ok(DeviceChoice::Cpu { fallback: None }),
        (Device::Auto | Device::Cuda, Ok(inv)) => Ok(DeviceChoice::Cuda(inv)),
        (Device::Auto, Err(e)) => Ok(DeviceChoice::Cpu { fallback: Some(e.to_string()) }),
        (Device::Cuda, Err(e)) => Err(unavailable_finding(&e)),
    }
}

fn unavailable_finding(e: &ProbeError) -> Finding {
    let (key, value) = match e {
        ProbeError::MissingLibrary { library } => ("library", library.file_name().to_string()),
        ProbeError::DriverInit(m) | ProbeError::Device { message: m, .. } => ("driver", m.clone()),
        ProbeError::NoGpu(v) => ("CUDA_VISIBLE_DEVICES", v.clone().unwrap_or_else(|| "(unset)".into())),
    };
    Finding::new(CUDA_UNAVAILABLE, Severity::Error, PhaseId::Preflight, format!("--device cuda, but {e}"))
        .with_evidence(Evidence::new(Side::Launch, "--device", "--device", "cuda"))
        .with_evidence(Evidence::new(Side::Launch, "cuda probe", key, value))
        .with_remedy(Remedy::new(
            "use-cpu-device",
            "--device",
            "run on the CPU reference backend instead",
            vec![SpecChange::SetFlag { flag: "--device".into(), value: "cpu".into() }],
        ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::probe::{probe_with, CudaLibrary, GpuInfo};
    use crate::backend::cuda::tp::check_rank_count;
    use crate::event::Event;

    fn h200() -> Vec<GpuInfo> {
        vec![GpuInfo { ordinal: 0, name: "NVIDIA H200".into(), compute_capability: (9, 0), total_memory_bytes: 150_754_820_096 }]
    }

    #[test]
    fn missing_driver_is_named_and_cuda_device_gets_a_cpu_remedy() {
        let probed = probe_with(&|lib| lib != CudaLibrary::Driver, &|| panic!("driver must not be queried"));
        assert_eq!(probed, Err(ProbeError::MissingLibrary { library: CudaLibrary::Driver }));
        let finding = choose_device(Device::Cuda, probed).unwrap_err();
        assert_eq!(finding.id, CUDA_UNAVAILABLE);
        assert!(finding.message.starts_with("--device cuda, but libcuda.so.1 was not found"), "{}", finding.message);
        assert!(finding.message.contains("no NVIDIA driver"), "{}", finding.message);
        assert_eq!(finding.evidence[1].value, "libcuda.so.1");
        let remedy = finding.remedy("use-cpu-device").unwrap();
        assert_eq!(remedy.changes, vec![SpecChange::SetFlag { flag: "--device".into(), value: "cpu".into() }]);
    }

    #[test]
    fn auto_falls_back_to_cpu_and_says_why() {
        let probed = probe_with(&|lib| lib != CudaLibrary::Cublas, &|| Ok(h200()));
        let choice = choose_device(Device::Auto, probed).unwrap();
        assert_eq!(
            choice.describe(),
            "device: cpu — CUDA unavailable, falling back to the CPU reference: libcublas.so.13 was not found by \
             the dynamic loader (searched LD_LIBRARY_PATH and the ldconfig cache): install the CUDA 13 toolkit \
             libraries, or add their folder to LD_LIBRARY_PATH"
        );
    }

    #[test]
    fn present_gpus_are_chosen_with_their_arch() {
        let choice = choose_device(Device::Auto, probe_with(&|_| true, &|| Ok(h200()))).unwrap();
        assert_eq!(choice.describe(), "device: cuda, 1 GPU(s): NVIDIA H200 (sm_90)");
        assert_eq!(choose_device(Device::Cpu, probe_with(&|_| true, &|| Ok(h200()))).unwrap().describe(), "device: cpu (--device cpu)");
    }

    /// More ranks than GPUs names both counts and offers the GPUs there are; none of this
    /// touches a GPU.
    #[test]
    fn tp_size_must_fit_the_visible_gpus() {
        let gpu = |ordinal| GpuInfo { ordinal, name: "NVIDIA H200".into(), compute_capability: (9, 0), total_memory_bytes: 150 << 30 };
        let inventory = |n: usize| CudaInventory { gpus: (0..n).map(gpu).collect(), nccl_present: true };
        let f = start_finding(&check_rank_count(&inventory(2), 8).unwrap_err());
        assert_eq!(f.id, CUDA_START_FAILED);
        assert_eq!(f.message, "--tp-size 8 needs 8 GPUs; 2 visible");
        assert_eq!(
            f.remedy("fit-visible-gpus").unwrap().changes,
            vec![SpecChange::SetFlag { flag: "--tp-size".into(), value: "2".into() }]
        );
        assert_eq!(
            start_finding(&check_rank_count(&inventory(6), 8).unwrap_err()).remedy("fit-visible-gpus").unwrap().changes[0],
            SpecChange::SetFlag { flag: "--tp-size".into(), value: "4".into() }
        );
        assert_eq!(start_finding(&check_rank_count(&inventory(2), 0).unwrap_err()).message, "--tp-size 0 needs 0 GPUs; 2 visible");
        for tp in [1, 2, 4, 8] {
            assert!(check_rank_count(&inventory(8), tp).is_ok());
        }
        let no_nccl = CudaInventory { nccl_present: false, ..inventory(2) };
        let f = start_finding(&open_ranks(&no_nccl, 2).err().unwrap());
        assert_eq!(f.message, "--tp-size 2 needs NCCL (libnccl.so.2), which was not found");
        assert!(f.remedy("single-gpu").is_some());
    }

    #[test]
    fn set_knobs_are_one_log_line_and_unset_ones_none() {
        let (sink, mut rx) = EventSink::channel();
        record_knobs(&Knobs::from_lookup(|_| None), &sink);
        let knobs = Knobs::from_lookup(|name| (name == "SPECDECK_PDL" || name == "SPECDECK_GEMV").then(|| "0".into()));
        record_knobs(&knobs, &sink);
        let Event::Log { level, source, line } = rx.try_recv().unwrap().event else { panic!("expected a log line") };
        assert_eq!((level, source.as_str(), line.as_str()), (LogLevel::Info, "knobs", "SPECDECK_PDL=0 SPECDECK_GEMV=0"));
        assert!(rx.try_recv().is_err());
    }

    /// On a machine without CUDA (CI, this repository's dev boxes): `auto` falls back to
    /// the CPU and says so in the log; `cuda` is a finding with the CPU remedy.
    #[test]
    fn without_cuda_auto_logs_the_fallback_and_cuda_is_a_finding() {
        if CudaLibrary::Driver.is_present() {
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
        assert_eq!(f.id, CUDA_UNAVAILABLE);
        assert!(f.remedy("use-cpu-device").is_some());
    }
}
