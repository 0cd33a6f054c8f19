//! The all-reduce of small vectors between the GPUs of one process through peer memory
//! (`kernels/allreduce.cu`): a decode or verify step's all-reduce moves a few KB, and
//! NCCL's protocol costs several times what NVLink takes to move them. Every rank owns an
//! inbox that the others write into directly; `connect` turns on peer access between
//! every pair and hands each rank a table of everyone's inbox. Larger vectors (prefill),
//! and every all-reduce of a group that cannot be joined this way, stay on NCCL.

use cudarc::driver::sys;

use super::gpu::{Arg, DeviceBuf, Gpu};
use crate::backend::BackendError;

/// Values per block of the kernel (`AR_CHUNK`) and blocks at most: vectors up to this many
/// values go through peer memory.
const CHUNK: usize = 1024;
const MAX_BLOCKS: usize = 64;
pub const MAX_VALUES: usize = CHUNK * MAX_BLOCKS;
/// `AR_MAX_WORLD` and `AR_THREADS` in the kernel.
const MAX_WORLD: usize = 8;
const THREADS: u32 = 256;

/// One rank's end of the peer all-reduce.
pub struct PeerReduce {
    rank: usize,
    world: usize,
    /// Written by the peers: two halves × `world` slots × `MAX_VALUES` words, each a value
    /// and the number of the call that sent it.
    inbox: DeviceBuf<u64>,
    /// How many calls each block has finished, on this rank.
    calls: DeviceBuf<u32>,
    /// Every rank's inbox address.
    table: DeviceBuf<u64>,
}

/// Whether a vector of `len` values goes through peer memory.
pub fn covers(len: usize) -> bool {
    len > 0 && len <= MAX_VALUES
}

/// The kernel's blocks for `len` values, one per chunk.
fn blocks(len: usize) -> u32 {
    len.div_ceil(CHUNK) as u32
}

impl PeerReduce {
    /// The kernel's launch: name, grid, block and arguments for summing `x[..len]` over
    /// the ranks, into `x`, or added to `h` when given.
    pub fn launch(&self, x: u64, h: Option<u64>, len: usize) -> (&'static str, (u32, u32), u32, [Arg; 8]) {
        let args = [
            Arg::Ptr(x),
            Arg::Ptr(h.unwrap_or(0)),
            Arg::I32(len as i32),
            Arg::I32(MAX_VALUES as i32),
            Arg::Ptr(self.table.ptr()),
            Arg::Ptr(self.calls.ptr()),
            Arg::I32(self.rank as i32),
            Arg::I32(self.world as i32),
        ];
        ("peer_all_reduce_f32", (blocks(len), 1), THREADS, args)
    }
}

/// Join the GPUs of a tensor-parallel group through peer memory, one end per rank; the
/// error says why NCCL has to carry every all-reduce instead.
pub fn connect(gpus: &[&Gpu]) -> Result<Vec<PeerReduce>, String> {
    let world = gpus.len();
    if !(2..=MAX_WORLD).contains(&world) {
        return Err(format!("{world} GPUs (peer all-reduce takes 2 to {MAX_WORLD})"));
    }
    if let Some((a, b)) = unreachable_pair(gpus).map_err(|e| e.to_string())? {
        return Err(format!("GPU {a} cannot access GPU {b}'s memory"));
    }
    for gpu in gpus {
        enable_peers(gpu, gpus).map_err(|e| e.to_string())?;
    }
    ends(gpus).map_err(|e| e.to_string())
}

/// Every rank's buffers, and on each rank the table of everyone's inbox.
fn ends(gpus: &[&Gpu]) -> Result<Vec<PeerReduce>, BackendError> {
    let world = gpus.len();
    let mut ends = Vec::with_capacity(world);
    for (rank, gpu) in gpus.iter().enumerate() {
        ends.push(PeerReduce {
            rank,
            world,
            inbox: gpu.alloc::<u64>(2 * world * MAX_VALUES, "peer all-reduce inbox")?,
            calls: gpu.alloc::<u32>(MAX_BLOCKS, "peer all-reduce call counters")?,
            table: gpu.alloc::<u64>(world, "peer all-reduce table")?,
        });
    }
    let addresses: Vec<u64> = ends.iter().map(|e| e.inbox.ptr()).collect();
    for (end, gpu) in ends.iter().zip(gpus) {
        gpu.upload(&addresses, end.table.ptr());
        gpu.sync()?;
    }
    Ok(ends)
}

/// The first pair (ordinals) where one GPU cannot access the other's memory.
fn unreachable_pair(gpus: &[&Gpu]) -> Result<Option<(usize, usize)>, BackendError> {
    for a in gpus {
        for b in gpus {
            if a.ordinal == b.ordinal {
                continue;
            }
            let mut can = 0;
            // SAFETY: an out-parameter and two device handles from live contexts.
            let status = unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.ctx.cu_device(), b.ctx.cu_device()) };
            if status != sys::CUresult::CUDA_SUCCESS {
                return Err(BackendError::Device(format!("GPU {}: asking whether GPU {} is reachable: {status:?}", a.ordinal, b.ordinal)));
            }
            if can == 0 {
                return Ok(Some((a.ordinal, b.ordinal)));
            }
        }
    }
    Ok(None)
}

/// Let `gpu`'s kernels read and write every other GPU's memory, and every other GPU's
/// kernels this GPU's buffers: they come from its default memory pool, which peer access
/// between contexts does not open (`cuMemPoolSetAccess` does).
fn enable_peers(gpu: &Gpu, all: &[&Gpu]) -> Result<(), BackendError> {
    let fail = |what: String, status: sys::CUresult| BackendError::Device(format!("GPU {}: {what}: {status:?}", gpu.ordinal));
    gpu.bind();
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: plain out-parameter; the device handle comes from the live context.
    let status = unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, gpu.ctx.cu_device()) };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(fail("its default memory pool".into(), status));
    }
    for peer in all.iter().filter(|p| p.ordinal != gpu.ordinal) {
        // SAFETY: this GPU's context is current on the thread; the peer's context is alive.
        let status = unsafe { sys::cuCtxEnablePeerAccess(peer.ctx.cu_ctx(), 0) };
        if !matches!(status, sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
            return Err(fail(format!("peer access to GPU {}", peer.ordinal), status));
        }
        let access = sys::CUmemAccessDesc {
            location: sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: peer.ordinal as i32 },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: `pool` is this device's default pool; one descriptor, passed by reference.
        let status = unsafe { sys::cuMemPoolSetAccess(pool, &access, 1) };
        if status != sys::CUresult::CUDA_SUCCESS {
            return Err(fail(format!("opening its memory pool to GPU {}", peer.ordinal), status));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of `#define NAME value` in the kernel source.
    fn kernel_define(name: &str) -> usize {
        let source = include_str!("../../../kernels/allreduce.cu");
        let prefix = format!("#define {name} ");
        let line = source.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("allreduce.cu has no {name}"));
        line[prefix.len()..].trim().parse().unwrap_or_else(|e| panic!("{name} in allreduce.cu: {e}"))
    }

    #[test]
    fn host_and_kernel_agree_on_chunk_threads_and_world() {
        assert_eq!(kernel_define("AR_CHUNK"), CHUNK);
        assert_eq!(kernel_define("AR_THREADS"), THREADS as usize);
        assert_eq!(kernel_define("AR_MAX_WORLD"), MAX_WORLD);
    }

    #[test]
    fn vectors_up_to_the_inbox_go_through_peer_memory_one_block_per_chunk() {
        assert!(!covers(0));
        assert!(covers(4096) && covers(MAX_VALUES));
        assert!(!covers(MAX_VALUES + 1), "prefill-sized vectors stay on NCCL");
        assert_eq!((blocks(1), blocks(4096), blocks(4097)), (1, 4, 5));
        assert_eq!(blocks(MAX_VALUES), MAX_BLOCKS as u32, "the largest vector uses every block's counter");
    }
}
