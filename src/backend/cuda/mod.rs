//! The CUDA backend, through cudarc with dynamic loading: the binary builds and runs on
//! machines without CUDA, and only touches a CUDA library after the probe found it.
//!
//! - `probe`: which libraries and GPUs are there; `--device auto|cuda|cpu`.
//! - `sources` + `compile`: `kernels/*.cu` compiled by NVRTC at start, PTX cached on disk.

pub mod compile;
pub mod probe;
pub mod sources;
