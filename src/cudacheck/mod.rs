//! `specdeck cuda-check`: the GPU self-checks, each against the CPU reference or against
//! the CUDA backend itself. They drive the backend, the engine and the test kit, so they
//! sit above the engine rather than inside the backend.
//!
//! - `selftest`: the sections, the report and the closing table (`Options`, `command`).
//! - `skinnycheck`: the skinny matmuls' bit-for-bit promises.
//! - `step`: a toy decode step for the graph checks.
//! - `modelcheck`: the engine's model code on CUDA.
//! - `deepseekcheck`: the DeepSeek-V3 family's forward on CUDA against the CPU reference.
//! - `tpcheck`: a sharded MLP block and the engine's rank threads over 2+ GPUs.
//!
//! The op-by-op comparison of two backends is backend-generic and lives beside the
//! backend trait (`backend::conformance`).

pub(crate) mod deepseekcheck;
pub(crate) mod modelcheck;
pub(crate) mod selftest;
pub(crate) mod skinnycheck;
pub(crate) mod step;
pub(crate) mod tpcheck;

pub use selftest::{command, Options};
