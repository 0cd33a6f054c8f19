//! Finding out, without panicking, whether CUDA can run here.
//!
//! cudarc loads its libraries lazily and panics on first use when one is missing, so every
//! library is probed with its `is_culib_present` before anything touches it. The engine
//! decides `--device` on the result (`engine::device`): `auto` takes CUDA when usable, else
//! the CPU reference, said out loud; `cuda` on a machine without CUDA is a clear error.

use std::fmt;

/// The shared libraries the backend loads, in the order they are needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaLibrary {
    Driver,
    Nvrtc,
    Cublas,
    CublasLt,
    Nccl,
}

impl CudaLibrary {
    /// The libraries every CUDA launch needs (NCCL only for `--tp-size` > 1).
    pub const REQUIRED: [CudaLibrary; 4] = [CudaLibrary::Driver, CudaLibrary::Nvrtc, CudaLibrary::Cublas, CudaLibrary::CublasLt];

    pub fn file_name(self) -> &'static str {
        match self {
            CudaLibrary::Driver => "libcuda.so.1",
            CudaLibrary::Nvrtc => "libnvrtc.so.13",
            CudaLibrary::Cublas => "libcublas.so.13",
            CudaLibrary::CublasLt => "libcublasLt.so.13",
            CudaLibrary::Nccl => "libnccl.so.2",
        }
    }

    /// Whether the dynamic loader finds it, the way cudarc will look for it.
    pub fn is_present(self) -> bool {
        // SAFETY: each call only tries `dlopen` on cudarc's candidate names.
        unsafe {
            match self {
                CudaLibrary::Driver => cudarc::driver::sys::is_culib_present(),
                CudaLibrary::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
                CudaLibrary::Cublas => cudarc::cublas::sys::is_culib_present(),
                CudaLibrary::CublasLt => cudarc::cublaslt::sys::is_culib_present(),
                CudaLibrary::Nccl => cudarc::nccl::sys::is_culib_present(),
            }
        }
    }
}

/// One GPU as the driver reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub total_memory_bytes: u64,
}

impl GpuInfo {
    /// The NVRTC target for this GPU, e.g. `sm_90`.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.compute_capability.0, self.compute_capability.1)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct CudaInventory {
    pub gpus: Vec<GpuInfo>,
    pub nccl_present: bool,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ProbeError {
    #[error("{} was not found by the dynamic loader (searched LD_LIBRARY_PATH and the ldconfig cache){}", .library.file_name(), hint(*.library))]
    MissingLibrary { library: CudaLibrary },
    #[error("the CUDA driver failed to start: {0}")]
    DriverInit(String),
    #[error("the CUDA driver sees no GPU (CUDA_VISIBLE_DEVICES={0:?})")]
    NoGpu(Option<String>),
    #[error("GPU {ordinal}: {message}")]
    Device { ordinal: usize, message: String },
}

fn hint(library: CudaLibrary) -> &'static str {
    match library {
        CudaLibrary::Driver => ": no NVIDIA driver is installed on this machine",
        CudaLibrary::Nccl => ": install NCCL, or run with --tp-size 1",
        _ => ": install the CUDA 13 toolkit libraries, or add their folder to LD_LIBRARY_PATH",
    }
}

/// Probe with the real dynamic loader and driver.
pub fn probe() -> Result<CudaInventory, ProbeError> {
    probe_with(&|lib: CudaLibrary| lib.is_present(), &query_driver)
}

/// The probe's logic, with the library check and the driver query passed in so the
/// decisions can be tested on a machine with or without CUDA.
pub fn probe_with(
    present: &dyn Fn(CudaLibrary) -> bool,
    driver: &dyn Fn() -> Result<Vec<GpuInfo>, ProbeError>,
) -> Result<CudaInventory, ProbeError> {
    if let Some(library) = CudaLibrary::REQUIRED.into_iter().find(|l| !present(*l)) {
        return Err(ProbeError::MissingLibrary { library });
    }
    let gpus = driver()?;
    if gpus.is_empty() {
        return Err(ProbeError::NoGpu(std::env::var("CUDA_VISIBLE_DEVICES").ok()));
    }
    Ok(CudaInventory { gpus, nccl_present: present(CudaLibrary::Nccl) })
}

/// Ask the driver for its GPUs. Only called once libcuda is known to load.
fn query_driver() -> Result<Vec<GpuInfo>, ProbeError> {
    use cudarc::driver::result;
    use cudarc::driver::sys::CUdevice_attribute as Attr;
    result::init().map_err(|e| ProbeError::DriverInit(e.to_string()))?;
    let count = result::device::get_count().map_err(|e| ProbeError::DriverInit(e.to_string()))?;
    (0..count.max(0) as usize)
        .map(|ordinal| {
            let err = |e: cudarc::driver::DriverError| ProbeError::Device { ordinal, message: e.to_string() };
            let dev = result::device::get(ordinal as i32).map_err(err)?;
            // SAFETY: `dev` is a valid device handle returned by the driver just above.
            unsafe {
                let major = result::device::get_attribute(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(err)?;
                let minor = result::device::get_attribute(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(err)?;
                let total = result::device::total_mem(dev).map_err(err)?;
                let name = result::device::get_name(dev).map_err(err)?;
                Ok(GpuInfo { ordinal, name, compute_capability: (major, minor), total_memory_bytes: total as u64 })
            }
        })
        .collect()
}

impl fmt::Display for CudaLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.file_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_without_gpus_is_an_error_not_a_cuda_choice() {
        let probed = probe_with(&|_| true, &|| Ok(vec![]));
        assert!(matches!(probed, Err(ProbeError::NoGpu(_))));
    }

    /// The real probe on this machine: without libcuda it must return the missing-library
    /// error (never panic); with it, it must list at least one GPU or say why not.
    #[test]
    fn real_probe_never_panics_and_agrees_with_the_loader() {
        let result = probe();
        if CudaLibrary::Driver.is_present() {
            eprintln!("libcuda is present here; probe said: {result:?}");
            assert!(!matches!(result, Err(ProbeError::MissingLibrary { library: CudaLibrary::Driver })));
        } else {
            assert_eq!(result, Err(ProbeError::MissingLibrary { library: CudaLibrary::Driver }));
        }
    }
}
