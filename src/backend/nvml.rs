//! The GPU inventory from NVML, opened here and nowhere else: the GPUs the driver lists and
//! each one's name, memory, utilization, temperature and power. Telemetry samples it,
//! preflight budgets against it, and `cuda-check` compares its memory figures before and
//! after; each says in its own words what a failure means.

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::error::NvmlError;

/// NVML, opened.
pub struct Inventory {
    nvml: nvml_wrapper::Nvml,
}

/// One GPU as NVML reads it now. Fields a GPU does not report (power on some boards)
/// read 0.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuReading {
    pub index: u32,
    pub name: String,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
    pub utilization_pct: u32,
    pub temperature_c: u32,
    pub power_w: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("NVML is not available ({0})")]
    Init(NvmlError),
    #[error("NVML cannot count GPUs ({0})")]
    Count(NvmlError),
    #[error("NVML cannot open GPU {index} ({error})")]
    Open { index: u32, error: NvmlError },
    #[error("NVML cannot read GPU {index} memory ({error})")]
    Memory { index: u32, error: NvmlError },
}

impl InventoryError {
    /// The cause in a few words: which library or driver is missing, else NVML's error.
    pub fn cause(&self) -> String {
        let (InventoryError::Init(e)
        | InventoryError::Count(e)
        | InventoryError::Open { error: e, .. }
        | InventoryError::Memory { error: e, .. }) = self;
        match e {
            NvmlError::LibloadingError(_) => "libnvidia-ml.so.1 not found".to_string(),
            NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_string(),
            other => format!("NVML: {other}"),
        }
    }
}

impl Inventory {
    pub fn open() -> Result<Inventory, InventoryError> {
        nvml_wrapper::Nvml::init().map(|nvml| Inventory { nvml }).map_err(InventoryError::Init)
    }

    pub fn count(&self) -> Result<u32, InventoryError> {
        self.nvml.device_count().map_err(InventoryError::Count)
    }

    /// GPU `index` now.
    pub fn reading(&self, index: u32) -> Result<GpuReading, InventoryError> {
        let d = self.nvml.device_by_index(index).map_err(|error| InventoryError::Open { index, error })?;
        let memory = d.memory_info().map_err(|error| InventoryError::Memory { index, error })?;
        Ok(GpuReading {
            index,
            name: d.name().unwrap_or_else(|_| format!("GPU {index}")),
            memory_used_bytes: memory.used,
            memory_total_bytes: memory.total,
            utilization_pct: d.utilization_rates().map(|u| u.gpu).unwrap_or(0),
            temperature_c: d.temperature(TemperatureSensor::Gpu).unwrap_or(0),
            power_w: d.power_usage().map(|mw| f64::from(mw) / 1000.0).unwrap_or(0.0),
        })
    }

    /// Every GPU now; the first that cannot be read fails the whole list.
    pub fn gpus(&self) -> Result<Vec<GpuReading>, InventoryError> {
        (0..self.count()?).map(|index| self.reading(index)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each user words a failure its own way: preflight by the step that failed, telemetry
    /// by its cause.
    #[test]
    fn failures_name_the_step_and_the_cause() {
        let e = InventoryError::Memory { index: 3, error: NvmlError::DriverNotLoaded };
        assert!(e.to_string().starts_with("NVML cannot read GPU 3 memory ("), "{e}");
        assert_eq!(e.cause(), "the NVIDIA driver is not loaded");
        assert_eq!(InventoryError::Count(NvmlError::Unknown).cause(), format!("NVML: {}", NvmlError::Unknown));
    }
}
