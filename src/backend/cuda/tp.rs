//! Tensor parallelism in one process: one thread and one stream per GPU, NCCL between
//! them. `open_group` starts every rank's GPU on its own thread (NCCL's communicator set-up
//! is collective, so all ranks must join at once) and hands back one backend per rank,
//! each to be driven by its own thread running the same model code.

use std::sync::Mutex;

use cudarc::nccl::{Comm, Id, ReduceOp};

use super::backend::CudaBackend;
use super::compile::CompiledModule;
use super::gpu::Gpu;
use super::peer;
use super::shard::RankInfo;
use crate::backend::BackendError;

/// A rank's NCCL communicator. NCCL communicators must not be used by two threads at
/// once; the mutex makes that so, and a rank's backend is driven by one thread anyway.
pub struct NcclComm(Mutex<SendComm>);

struct SendComm(Comm);
// SAFETY: the communicator is only ever touched under the mutex above, one call at a time.
unsafe impl Send for SendComm {}

impl NcclComm {
    /// Sum the first `len` values of `buf` over all ranks, in place, on the rank's stream.
    pub fn all_reduce_sum(&self, gpu: &Gpu, buf: &mut cudarc::driver::CudaSlice<f32>, len: usize) {
        let comm = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut view = buf.slice_mut(0..len);
        if let Err(e) = comm.0.all_reduce_in_place(&mut view, &ReduceOp::Sum) {
            gpu.record(|| format!("NCCL all-reduce of {len} values: {e:?}"));
        }
    }
}

/// Open GPUs `0 .. world` as one tensor-parallel group, with `modules` loaded, or bare for
/// an engine (each rank loads its kernels in its launch's `kernel-compile` phase). Small
/// all-reduces go through peer memory where every pair of GPUs reaches each other, unless
/// `SPECDECK_PEER_ALLREDUCE=0`.
pub fn open_group(modules: Option<&[CompiledModule]>, world: usize) -> Result<Vec<CudaBackend>, BackendError> {
    open_group_with(modules, world, peer::wanted())
}

/// `open_group`, with the peer all-reduce on or off (NCCL carries every all-reduce when off).
pub fn open_group_with(modules: Option<&[CompiledModule]>, world: usize, peer_reduce: bool) -> Result<Vec<CudaBackend>, BackendError> {
    let open = |rank: usize| match modules {
        Some(m) => Gpu::open(rank, m),
        None => Gpu::open_bare(rank),
    };
    if world == 1 {
        return Ok(vec![CudaBackend::from_gpu(open(0)?, RankInfo::single(), None)?]);
    }
    let id = Id::new().map_err(|e| BackendError::Device(format!("NCCL unique id: {e:?}")))?;
    let results: Vec<Result<CudaBackend, BackendError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let open = &open;
                s.spawn(move || {
                    let info = RankInfo { rank, world };
                    let gpu = open(rank)?;
                    let comm = Comm::from_rank(gpu.stream.clone(), rank, world, id)
                        .map_err(|e| BackendError::Device(format!("GPU {rank}: NCCL init of rank {rank}/{world}: {e:?}")))?;
                    CudaBackend::from_gpu(gpu, info, Some(NcclComm(Mutex::new(SendComm(comm)))))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(BackendError::Device("a rank's start-up thread panicked".into()))))
            .collect()
    });
    let mut group: Vec<CudaBackend> = results.into_iter().collect::<Result<_, _>>()?;
    let ends = if peer_reduce {
        peer::connect(&group.iter().map(|b| b.gpu()).collect::<Vec<_>>())
    } else {
        Err("SPECDECK_PEER_ALLREDUCE=0".to_string())
    };
    match ends {
        Ok(ends) => group.iter_mut().zip(ends).for_each(|(backend, end)| backend.set_peer(Ok(end))),
        Err(why) => group.iter_mut().for_each(|backend| backend.set_peer(Err(why.clone()))),
    }
    Ok(group)
}
