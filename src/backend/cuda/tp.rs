//! Tensor parallelism in one process: one thread and one stream per GPU, NCCL between
//! them. `open_group` starts every rank's GPU on its own thread (NCCL's communicator set-up
//! is collective, so all ranks must join at once) and hands back one backend per rank,
//! each to be driven by its own thread running the same model code.

use super::backend::CudaBackend;
use super::compile::CompiledModule;
use super::gpu::Gpu;
use super::nccl::{group_id, NcclComm};
use super::peer;
use super::probe::CudaInventory;
use super::shard::RankInfo;
use crate::backend::BackendError;
use crate::knobs::Knobs;

/// Why a launch's ranks did not open.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// More ranks than visible GPUs (or none).
    #[error("--tp-size {tp} needs {tp} GPUs; {visible} visible")]
    RankCount { tp: usize, visible: usize },
    #[error("--tp-size {tp} needs NCCL (libnccl.so.2), which was not found")]
    NoNccl { tp: usize },
    #[error("opening GPUs 0..{tp}: {error}")]
    Open { tp: usize, error: BackendError },
}

/// Open GPUs `0 .. tp` for an engine, one bare backend per tensor-parallel rank (NCCL
/// joins them when `tp > 1`; each loads its kernels in its launch's `kernel-compile`
/// phase).
pub fn open_ranks(inventory: &CudaInventory, tp: usize) -> Result<Vec<CudaBackend>, StartError> {
    check_rank_count(inventory, tp)?;
    if tp > 1 && !inventory.nccl_present {
        return Err(StartError::NoNccl { tp });
    }
    open_group(None, tp).map_err(|error| StartError::Open { tp, error })
}

/// `--tp-size` must be between 1 and the number of visible GPUs.
pub fn check_rank_count(inventory: &CudaInventory, tp: usize) -> Result<(), StartError> {
    if tp == 0 || tp > inventory.gpus.len() {
        return Err(StartError::RankCount { tp, visible: inventory.gpus.len() });
    }
    Ok(())
}

/// Open GPUs `0 .. world` as one tensor-parallel group, with `modules` loaded, or bare for
/// an engine (each rank loads its kernels in its launch's `kernel-compile` phase). Small
/// all-reduces go through peer memory where every pair of GPUs reaches each other, unless
/// `SPECDECK_PEER_ALLREDUCE=0`.
pub fn open_group(modules: Option<&[CompiledModule]>, world: usize) -> Result<Vec<CudaBackend>, BackendError> {
    open_group_with(modules, world, Knobs::get().peer_allreduce)
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
    let id = group_id()?;
    let results: Vec<Result<CudaBackend, BackendError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let open = &open;
                s.spawn(move || {
                    let info = RankInfo { rank, world };
                    let gpu = open(rank)?;
                    let comm = NcclComm::join(&gpu, rank, world, id)?;
                    CudaBackend::from_gpu(gpu, info, Some(comm))
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
