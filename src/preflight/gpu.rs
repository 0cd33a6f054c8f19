//! The GPU inventory the parallel and memory rules judge against.
//!
//! GPU count and memory come from NVML when a driver is present (filtered by
//! `CUDA_VISIBLE_DEVICES`, from the pasted command line or this process). `--gpu-memory-gib`
//! sets the memory to budget for (it wins over NVML, so a launch meant for another machine
//! can be checked here). Without NVML the count is unknown, and rules say so rather than
//! guess. `SPECDECK_NVML=off` ignores this machine's GPUs altogether, and a `--device cpu`
//! launch has no GPU budget.

use std::sync::OnceLock;

use crate::backend::nvml::Inventory;
use crate::knobs::Knobs;
use crate::spec::{Device, LaunchSpec};

pub const GIB: f64 = (1u64 << 30) as f64;

/// One GPU as NVML reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Gpu {
    pub name: String,
    pub memory_bytes: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GpuInventory {
    /// GPUs the launch can use; None when unknown (no NVML).
    pub count: Option<u32>,
    /// Memory per GPU for the budget; None when neither NVML nor `--gpu-memory-gib` says.
    pub memory_bytes: Option<u64>,
    /// Where the figures come from, for messages.
    pub source: String,
}

impl GpuInventory {
    /// No NVML and no flag: nothing known.
    pub fn unknown(reason: &str) -> GpuInventory {
        GpuInventory { count: None, memory_bytes: None, source: reason.to_string() }
    }
}

/// This machine's inventory for a launch (none for a `--device cpu` launch: it uses no GPU).
pub fn inventory(spec: &LaunchSpec) -> GpuInventory {
    if spec.device == Device::Cpu {
        return GpuInventory::unknown("--device cpu: no GPU is used");
    }
    let visible = spec.env.get("CUDA_VISIBLE_DEVICES").cloned().or_else(|| std::env::var("CUDA_VISIBLE_DEVICES").ok());
    from_probe(spec, nvml_gpus(), visible.as_deref())
}

/// NVML's GPUs, probed once per process (initialising NVML costs milliseconds).
fn nvml_gpus() -> &'static Result<Vec<Gpu>, String> {
    static PROBE: OnceLock<Result<Vec<Gpu>, String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        if !Knobs::get().nvml {
            return Err("NVML is switched off (SPECDECK_NVML=off)".into());
        }
        let gpus = Inventory::open().and_then(|nvml| nvml.gpus()).map_err(|e| e.to_string())?;
        Ok(gpus.into_iter().map(|g| Gpu { name: g.name, memory_bytes: g.memory_total_bytes }).collect())
    })
}

/// The GPUs `CUDA_VISIBLE_DEVICES` leaves visible: numeric indices select; other entries
/// (UUIDs, MIG ids) count in order; CUDA stops at the first invalid index.
fn visible_gpus(all: &[Gpu], visible: Option<&str>) -> Vec<Gpu> {
    let Some(list) = visible else { return all.to_vec() };
    let mut out = Vec::new();
    for (pos, entry) in list.split(',').map(str::trim).filter(|e| !e.is_empty()).enumerate() {
        let gpu = match entry.parse::<i64>() {
            Ok(i) if i >= 0 => all.get(i as usize),
            Ok(_) => None,
            Err(_) => all.get(pos),
        };
        match gpu {
            Some(g) => out.push(g.clone()),
            None => break,
        }
    }
    out
}

/// The inventory from a probe result (pure: the tests give it GPUs).
pub fn from_probe(spec: &LaunchSpec, probe: &Result<Vec<Gpu>, String>, visible: Option<&str>) -> GpuInventory {
    let flag_memory = spec.gpu_memory_gib.filter(|g| g.is_finite() && *g > 0.0).map(|g| (g * GIB) as u64);
    let flag_note = spec.gpu_memory_gib.map(|g| format!("--gpu-memory-gib {g}"));
    match probe {
        Err(reason) => GpuInventory {
            count: None,
            memory_bytes: flag_memory,
            source: match flag_note {
                Some(flag) => format!("{flag}; GPU count unknown: {reason}"),
                None => format!("GPU count and memory unknown: {reason}"),
            },
        },
        Ok(all) => {
            let gpus = visible_gpus(all, visible);
            let used = gpus.iter().take(usize::try_from(spec.gpus_needed()).unwrap_or(usize::MAX));
            let nvml_memory = used.map(|g| g.memory_bytes).min();
            let names = describe(&gpus);
            let filter = visible.map(|v| format!(" (CUDA_VISIBLE_DEVICES={v})")).unwrap_or_default();
            GpuInventory {
                count: Some(gpus.len() as u32),
                memory_bytes: flag_memory.or(nvml_memory),
                source: match flag_note {
                    Some(flag) => format!("{flag}; NVML: {names}{filter}"),
                    None => format!("NVML: {names}{filter}"),
                },
            }
        }
    }
}

fn describe(gpus: &[Gpu]) -> String {
    match gpus.first() {
        None => "no GPU visible".into(),
        Some(first) if gpus.iter().all(|g| g.name == first.name && g.memory_bytes == first.memory_bytes) => {
            format!("{} × {} ({:.1} GiB)", gpus.len(), first.name, first.memory_bytes as f64 / GIB)
        }
        Some(_) => {
            let each: Vec<String> = gpus.iter().map(|g| format!("{} ({:.1} GiB)", g.name, g.memory_bytes as f64 / GIB)).collect();
            format!("{} GPUs: {}", gpus.len(), each.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200s(n: usize) -> Result<Vec<Gpu>, String> {
        Ok(vec![Gpu { name: "NVIDIA H200".into(), memory_bytes: 150_754_820_096 }; n])
    }

    #[test]
    fn visible_devices_filter_the_count() {
        let spec = LaunchSpec::default();
        assert_eq!(from_probe(&spec, &h200s(8), None).count, Some(8));
        assert_eq!(from_probe(&spec, &h200s(8), Some("0,1")).count, Some(2));
        assert_eq!(from_probe(&spec, &h200s(8), Some("")).count, Some(0));
        assert_eq!(from_probe(&spec, &h200s(2), Some("1,5,0")).count, Some(1));
        let inv = from_probe(&spec, &h200s(2), Some("0,1"));
        assert_eq!(inv.source, "NVML: 2 × NVIDIA H200 (140.4 GiB) (CUDA_VISIBLE_DEVICES=0,1)");
    }

    #[test]
    fn a_cpu_launch_has_no_gpu_budget() {
        let spec = LaunchSpec { device: Device::Cpu, gpu_memory_gib: Some(80.0), ..LaunchSpec::default() };
        assert_eq!(inventory(&spec), GpuInventory::unknown("--device cpu: no GPU is used"));
    }

    #[test]
    fn the_flag_sets_memory_and_nvml_absence_leaves_the_count_unknown() {
        let spec = LaunchSpec { gpu_memory_gib: Some(80.0), ..LaunchSpec::default() };
        let inv = from_probe(&spec, &Err("NVML is not available (x)".into()), None);
        assert_eq!((inv.count, inv.memory_bytes), (None, Some(80 << 30)));
        assert_eq!(inv.source, "--gpu-memory-gib 80; GPU count unknown: NVML is not available (x)");
        let inv = from_probe(&spec, &h200s(1), None);
        assert_eq!((inv.count, inv.memory_bytes), (Some(1), Some(80 << 30)));
        let inv = from_probe(&LaunchSpec::default(), &Err("off".into()), None);
        assert_eq!(inv, GpuInventory::unknown("GPU count and memory unknown: off"));
    }
}
