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

pub mod backend;
pub mod chunked;
pub mod compile;
pub mod gemm;
pub mod gpu;
pub mod graph;
pub mod graph_book;
pub mod nccl;
pub mod peer;
pub mod probe;
pub mod shard;
pub mod sources;
pub mod tp;

pub use backend::{CudaBackend, CudaIds, CudaTensor, CudaWeight};
