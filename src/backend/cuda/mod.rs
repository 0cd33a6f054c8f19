//! The CUDA backend, through cudarc with dynamic loading: the binary builds and runs on
//! machines without CUDA, and only touches a CUDA library after the probe found it.
//!
//! - `probe`: which libraries and GPUs are there; `--device auto|cuda|cpu`.
//! - `sources` + `compile`: `kernels/*.cu` compiled by NVRTC at start (the `kernel-compile`
//!   phase), PTX cached on disk by source hash and architecture.
//! - `gpu`: one GPU (context, stream, kernels, memory ledger); `gemm`: matmuls;
//!   `chunked`: how argmax, softmax and top-k cut a vocabulary row over blocks.
//! - `skinnycheck`: the skinny matmuls' bit-for-bit promises, checked on the GPU.
//! - `backend`: the backend seam on one GPU; `graph`: CUDA graphs for repeating steps;
//!   `shard` + `tp`: tensor parallelism (column/row sharding at load, NCCL all-reduce).
//! - `launch`: start-up for a launch and `memory-budget` findings.
//! - `selftest` (`specdeck cuda-check`), with `conformance` (every op against the CPU
//!   reference), `step` (a toy decode step for graphs), `modelcheck` (the engine's model
//!   code on CUDA) and `tpcheck` (a sharded MLP block).

pub mod backend;
pub mod chunked;
pub mod compile;
pub mod conformance;
pub mod gemm;
pub mod gpu;
pub mod graph;
pub mod graph_book;
pub mod launch;
pub mod modelcheck;
pub mod peer;
pub mod probe;
pub mod selftest;
pub mod shard;
pub mod skinnycheck;
pub mod sources;
pub mod step;
pub mod tp;
pub mod tpcheck;

pub use backend::{CudaBackend, CudaIds, CudaTensor, CudaWeight};
