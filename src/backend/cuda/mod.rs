//! The CUDA backend, through cudarc with dynamic loading: the binary builds and runs on
//! machines without CUDA, and only touches a CUDA library after the probe found it.
//!
//! - `probe`: which libraries and GPUs are there; `--device auto|cuda|cpu`.
//! - `sources` + `compile`: `kernels/*.cu` compiled by NVRTC at start, PTX cached on disk.
//! - `gpu`: one GPU (context, stream, kernels, memory ledger); `gemm`: matmuls.
//! - `backend`: the backend seam on one GPU; `shard` + `tp`: tensor parallelism.

pub mod compile;
pub mod probe;
pub mod sources;
pub mod backend;
pub mod gemm;
pub mod gpu;
pub mod shard;
pub mod tp;

pub use backend::{CudaBackend, CudaIds, CudaTensor, CudaWeight};
pub mod conformance;
pub mod launch;
pub mod graph;
pub mod step;
pub mod selftest;
pub mod modelcheck;
pub mod tpcheck;
