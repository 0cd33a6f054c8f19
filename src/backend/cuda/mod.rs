//! The CUDA backend, through cudarc with dynamic loading: the binary builds and runs on
//! machines without CUDA, and only touches a CUDA library after the probe found it.
//!
//! - `probe`: which libraries and GPUs are there (the engine resolves `--device` on it).
//! - `sources` + `compile`: `kernels/*.cu` compiled by NVRTC at start (the `kernel-compile`
//!   phase), PTX cached on disk by source hash and architecture.
//! - `gpu`: one GPU (context, stream, kernels, memory ledger); `gemm`: matmuls;
//!   `chunked`: how argmax, softmax and top-k cut a vocabulary row over blocks.
//! - `backend`: the backend seam on one GPU; `graph` + `graph_book`: CUDA graphs for
//!   repeating steps; `shard`: column/row sharding at load; `nccl`: a rank's communicator;
//!   `peer`: small all-reduces through peer memory.
//! - `tp`: a tensor-parallel group of backends, opened together, and a launch's ranks.
//!
//! The GPU self-checks (`specdeck cuda-check`) are in `cudacheck`, above the engine.

pub(crate) mod backend;
pub(crate) mod chunked;
pub(crate) mod compile;
pub(crate) mod gemm;
pub(crate) mod gpu;
pub(crate) mod graph;
pub(crate) mod graph_book;
mod latent_ops;
pub(crate) mod nccl;
pub(crate) mod peer;
pub mod probe;
pub(crate) mod shard;
pub(crate) mod sources;
mod stored;
pub(crate) mod tp;

pub use backend::{CudaBackend, CudaIds, CudaTensor, CudaWeight};
