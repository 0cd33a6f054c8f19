//! `--version`: the crate's version, the commit when the build named it, and what GPU support
//! the binary can load. CUDA and NVML are both opened at run time (cudarc's dynamic loading,
//! nvml-wrapper), so one binary runs with or without a driver.

/// What the GPU libraries are to this build (Cargo.toml's cudarc and nvml-wrapper features).
const GPU_SUPPORT: &str = "\
CUDA: dynamic (driver API, NVRTC, cuBLAS, cuBLASLt, NCCL; loaded at run time, CUDA 13.0 API)
NVML: dynamic (libnvidia-ml loaded at run time; SPECDECK_NVML=off ignores this machine's GPUs)
Without a CUDA driver, --device auto runs the CPU reference engine.";

/// The text `specdeck --version` prints after the name. `SPECDECK_GIT_COMMIT`, set when
/// building, names the commit; without it none is claimed.
pub fn long() -> &'static str {
    let commit = option_env!("SPECDECK_GIT_COMMIT").map(|c| format!(" (commit {c})")).unwrap_or_default();
    // Built once per process, for clap, which keeps `'static` text.
    Box::leak(format!("{}{commit}\n{GPU_SUPPORT}", env!("CARGO_PKG_VERSION")).into_boxed_str())
}
