//! A tensor-parallel rank's NCCL communicator, below the backend that all-reduces through
//! it; the group that opens one per rank is above the backend (`tp.rs`).

use std::sync::Mutex;

use cudarc::nccl::{Comm, Id, ReduceOp};

use super::gpu::Gpu;
use crate::backend::BackendError;

/// A rank's NCCL communicator. NCCL communicators must not be used by two threads at
/// once; the mutex makes that so, and a rank's backend is driven by one thread anyway.
pub struct NcclComm(Mutex<SendComm>);

struct SendComm(Comm);
// SAFETY: the communicator is only ever touched under the mutex above, one call at a time.
unsafe impl Send for SendComm {}

/// The id every rank of a new group joins with.
pub fn group_id() -> Result<Id, BackendError> {
    Id::new().map_err(|e| BackendError::Device(format!("NCCL unique id: {e:?}")))
}

impl NcclComm {
    /// Join group `id` as `rank` of `world` on `gpu`'s stream. Collective: every rank must
    /// call it at once, each from its own thread.
    pub fn join(gpu: &Gpu, rank: usize, world: usize, id: Id) -> Result<NcclComm, BackendError> {
        let comm = Comm::from_rank(gpu.stream.clone(), rank, world, id)
            .map_err(|e| BackendError::Device(format!("GPU {rank}: NCCL init of rank {rank}/{world}: {e:?}")))?;
        Ok(NcclComm(Mutex::new(SendComm(comm))))
    }

    /// Sum the first `len` values of `buf` over all ranks, in place, on the rank's stream.
    pub fn all_reduce_sum(&self, gpu: &Gpu, buf: &mut cudarc::driver::CudaSlice<f32>, len: usize) {
        let comm = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut view = buf.slice_mut(0..len);
        if let Err(e) = comm.0.all_reduce_in_place(&mut view, &ReduceOp::Sum) {
            gpu.record(|| format!("NCCL all-reduce of {len} values: {e:?}"));
        }
    }
}
