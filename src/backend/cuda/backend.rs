//! `CudaBackend`: the backend seam on one GPU (one tensor-parallel rank).
//!
//! Activations are f32 (`[rows, cols]` buffers, as on the CPU reference, so results compare
//! closely and no op needs a dtype), weights bf16, ids i32. Every op enqueues kernels on
//! the GPU's single stream and returns; the first failure is kept and reported by the next
//! call that returns a `Result` (`sync`, a readback, an allocation, a load).

use std::sync::Arc;

use half::bf16;

use super::chunked::{chunk_count, row_groups, MAX_CANDIDATES, MAX_CHUNKS, ROW_GROUP};
use super::compile::{compile_then, default_include_paths, nvrtc_version, CompileTarget, CompiledModule, PtxCache};
use super::gemm::{stacked, Input, Matmuls, RopeSplit, RopeStore, Segment};
use super::gpu::{row_block, stride_grid, Arg, DeviceBuf, Gpu, NULL};
use super::graph::{signature, Gate, Graphs};
use super::nccl::NcclComm;
use super::peer::{self, PeerReduce};
use super::shard::{contiguous_bf16, shard_weight, RankInfo};
use super::sources::{attention_kernel, heads_per_block, prefill_mma_kernel, step_mma_kernel, PREFILL_ATTENTION_KERNEL, SOURCES};
use crate::backend::kernels::{CompileProgress, KernelCompileError, KernelsReady};
use crate::backend::latent::{Experts, MlaGeometry, MoeScratch, Routing, SlotTable, StoredFormat};
use crate::backend::{
    paged_attention_per_seq, residual_through, AttnGeometry, AttnWindow, Backend, BackendError, KvDtype, KvStore, Mask, PagedBatch,
    PagedScratch, Projection, RopeStyle, RopeTable, Shard, StoredWeight, STEP_QUERIES_MAX,
};
use crate::knobs::Knobs;
use crate::model::checkpoint::TensorView;

/// Warps per attention block in decode, verify and draft steps; each warp walks a strided
/// share of the key slots (`ATTENTION_MAX_THREADS` in kernels/attention.cu allows up to 16).
const ATTENTION_WARPS: u32 = 16;
/// Warps per attention block in a forward of more than `STEP_QUERIES_MAX` queries (a
/// prefill chunk). Its (query, head) blocks are many and each sees few keys, so smaller
/// blocks leave fewer key slots of part-filled groups idle and fit four to an SM (a 16-warp
/// block takes an SM's registers): 16-warp blocks were most of a Qwen prefill's time.
const PREFILL_ATTENTION_WARPS: u32 = 4;
/// Most blocks one (query row, head) of a step's attention splits its keys over (a query
/// that sees V keys uses min(this, V / ATTENTION_SPLIT_KEYS)): 16 blocks of 16 warps give a
/// 32K-token decode of 32 heads four waves of the H200's 132 SMs.
const ATTENTION_SPLITS: usize = 16;
/// Fewest working blocks a step-attention launch must keep to take grouped heads (half
/// the H200's SMs; `CudaBackend::heads_per_block`).
const GROUPED_MIN_BLOCKS: usize = 64;
/// Keys per split, as kernels/attention.cu's ATTENTION_SPLIT_KEYS.
const ATTENTION_SPLIT_KEYS: usize = 2048;
/// (row, head) pairs whose split states the attention scratch holds at once; a launch
/// with splits covers at most this many (64 query rows of 64 heads).
const SPLIT_PAIRS: usize = 4096;
/// Floats of one split state: the max, the sum, and a head of up to 256 numerators.
const SPLIT_STATE: usize = 256 + 2;
/// kernels/attention.cu's tiled prefill: queries and keys a tile, warps a block, and the
/// largest head it takes (larger heads use the one-query-a-block kernel).
const PREFILL_TILE_Q: usize = 16;
const PREFILL_TILE_K: usize = 32;
const PREFILL_WARPS: u32 = 4;
const PREFILL_MAX_HEAD: usize = 128;
/// kernels/attention.cu's tensor-core paged step attention: keys a tile, warps a block, tiles
/// in flight.
const STEP_MMA_TILE_K: usize = 64;
const STEP_MMA_WARPS: u32 = 4;
const STEP_MMA_STAGES: usize = 3;
/// Fewest sequences a paged step takes the tensor-core attention for. Its blocks are one a
/// KV head, so a few sequences leave the GPU idle: on the H200 it made c1 and c8 slower
/// (199.6 -> 126.2 and 1206 -> 909 tok/s) and c32 and c64 faster (2658 -> 3153, 3458 ->
/// 4269; testdata/gpu/run-23/NOTES.md). Steps of fewer sequences, and every step under
/// `--enable-deterministic-inference`, take the CUDA-core kernel, so that a sequence's
/// bits depend on the batch only as the matmuls' do.
const MMA_MIN_SEQS: usize = 16;
/// kernels/attention.cu's tensor-core prefill: queries and keys a tile, warps a block.
const PREFILL_MMA_TILE_Q: usize = 64;
const PREFILL_MMA_TILE_K: usize = 32;
const PREFILL_MMA_WARPS: u32 = 4;
/// Threads per block of the chunked argmax, softmax and top-k.
const CHUNK_THREADS: u32 = 256;
/// Largest row list (`gather_rows`, `move_rows`, `sample` exclusions) per call.
const MAX_LIST: usize = 4096;

/// f32 activations, or a bf16 KV cache (`bf16`), whose values sit two to a slot of `buf`.
pub struct CudaTensor {
    pub(super) buf: DeviceBuf<f32>,
    rows: usize,
    pub(super) cols: usize,
    pub(super) bf16: bool,
}

impl CudaTensor {
    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Device address of row `row`.
    fn row_ptr(&self, row: usize) -> u64 {
        self.buf.ptr() + (row * self.words(1) * std::mem::size_of::<f32>()) as u64
    }

    /// Slots of `buf` that `rows` rows take (half the elements in a bf16 cache).
    fn words(&self, rows: usize) -> usize {
        if self.bf16 {
            rows * self.cols / 2
        } else {
            rows * self.cols
        }
    }
}

/// A weight's elements: an allocation of its own, or its rows of one it shares with the
/// weights loaded beside it (`Backend::load_stacked`), so that one cuBLAS launch can read
/// q, k and v, or gate and up, as a single matrix.
pub(super) struct WeightBuf {
    storage: Arc<DeviceBuf<bf16>>,
    offset: usize,
    len: usize,
}

impl WeightBuf {
    pub(super) fn whole(buf: DeviceBuf<bf16>) -> WeightBuf {
        let len = buf.len();
        WeightBuf { storage: Arc::new(buf), offset: 0, len }
    }

    pub(super) fn ptr(&self) -> u64 {
        self.storage.ptr_at(self.offset)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }
}

pub struct CudaWeight {
    pub(super) buf: WeightBuf,
    pub(super) shape: Vec<usize>,
    /// Columns of the unsharded tensor (a row-parallel shard keeps 1 / world of them):
    /// the skinny matmuls cut K by it.
    k_full: usize,
    /// The buffer holds the checkpoint's quantized bytes (FP8, packed INT4), two to a slot,
    /// for `moe_experts` only.
    pub(super) raw: bool,
    /// A dense linear kept as the checkpoint stores it (`stored.rs`): the buffer holds its
    /// bytes, two to a slot, and these are its scales.
    pub(super) stored: Option<StoredScales>,
}

/// A stored weight's scales (`stored.rs`), as `StoredFormat` lays them out.
pub(crate) struct StoredScales {
    pub(super) buf: DeviceBuf<f32>,
    pub(super) format: StoredFormat,
}

impl CudaWeight {
    pub(super) fn stored(buf: WeightBuf, [rows, cols]: [usize; 2], scales: StoredScales) -> CudaWeight {
        CudaWeight { buf, shape: vec![rows, cols], k_full: cols, raw: false, stored: Some(scales) }
    }
}

pub struct CudaIds {
    pub(super) buf: DeviceBuf<i32>,
}

/// Fields drop in this order, and it matters: the CUDA graphs go first, while the NCCL
/// communicator their all-reduce nodes belong to is still alive (destroying such a graph
/// after the communicator was aborted hangs the process at teardown), then the
/// communicator, then the GPU's memory and context.
pub struct CudaBackend {
    pub(crate) graphs: Graphs,
    nccl: Option<NcclComm>,
    /// Small all-reduces through peer memory (`peer.rs`), or why NCCL carries them all.
    peer: Result<PeerReduce, String>,
    pub(crate) gpu: Gpu,
    pub(crate) matmuls: Matmuls,
    rank: RankInfo,
    /// Embedding ids outside the vocabulary land here (checked at sync).
    bad_id: DeviceBuf<i32>,
    /// Host row lists copied up for one op at a time (stream order keeps them apart).
    list: DeviceBuf<i32>,
    picked: DeviceBuf<i32>,
    /// Per-chunk candidates of argmax and top-k (`chunked.rs`), for `ROW_GROUP` rows.
    chunk_values: DeviceBuf<f32>,
    chunk_ids: DeviceBuf<i32>,
    /// Each chunk's max and sum of exponentials (softmax), `ROW_GROUP` rows' worth.
    chunk_stats: DeviceBuf<f32>,
    /// Split attention's per-block states and per-(row, head) arrival counts (kernels/attention.cu).
    split_states: DeviceBuf<f32>,
    split_counters: DeviceBuf<i32>,
    /// The paged table of the batched forward under way (`PagedBatch`): every layer of the
    /// forward reads the same upload.
    paged_table: std::sync::Mutex<PagedTable>,
    /// The same for an MLA forward's `SlotTable`.
    slot_table: std::sync::Mutex<PagedTable>,
    /// Residual adds inside the row-parallel matmuls at tp = 1 (the default), or as
    /// launches of their own (`SPECDECK_FUSED_RESIDUAL=0`, for the A/B of what fusing buys).
    fused_residual: bool,
    /// The bf16 values of the largest stored weight (`stored.rs`), rewritten by each prefill
    /// matmul that needs them; sized as the weights load, before any graph is captured over it.
    pub(super) dequant_scratch: std::sync::Mutex<Option<DeviceBuf<bf16>>>,
}

impl CudaBackend {
    /// Open GPU `ordinal` with the compiled kernels, as rank `rank` of a tensor-parallel
    /// group (`RankInfo::single()` without tensor parallelism).
    pub fn open(ordinal: usize, modules: &[CompiledModule], rank: RankInfo, nccl: Option<NcclComm>) -> Result<CudaBackend, BackendError> {
        Self::from_gpu(Gpu::open(ordinal, modules)?, rank, nccl)
    }

    /// Open GPU `ordinal` for an engine: its kernels are compiled and loaded in the
    /// launch's `kernel-compile` phase (`Backend::kernel_compile`).
    pub fn open_for_launch(ordinal: usize) -> Result<CudaBackend, BackendError> {
        Self::from_gpu(Gpu::open_bare(ordinal)?, RankInfo::single(), None)
    }

    /// Wrap an opened GPU (tensor-parallel ranks open theirs on their own threads).
    pub fn from_gpu(gpu: Gpu, rank: RankInfo, nccl: Option<NcclComm>) -> Result<CudaBackend, BackendError> {
        let bad_id = gpu.alloc::<i32>(1, "error flag")?;
        let list = gpu.alloc::<i32>(MAX_LIST, "row lists")?;
        let picked = gpu.alloc::<i32>(1, "sample result")?;
        let chunk_values = gpu.alloc::<f32>(ROW_GROUP * MAX_CANDIDATES, "per-chunk values")?;
        let chunk_ids = gpu.alloc::<i32>(ROW_GROUP * MAX_CANDIDATES, "per-chunk ids")?;
        let chunk_stats = gpu.alloc::<f32>(ROW_GROUP * MAX_CHUNKS * 2, "per-chunk softmax stats")?;
        let split_states = gpu.alloc::<f32>(SPLIT_PAIRS * ATTENTION_SPLITS * SPLIT_STATE, "split attention states")?;
        let split_counters = gpu.alloc::<i32>(SPLIT_PAIRS, "split attention counters")?;
        let graphs = Graphs::new(&gpu)?;
        let fused_residual = Knobs::get().fused_residual;
        let b = CudaBackend {
            gpu,
            matmuls: Matmuls::new(),
            rank,
            nccl,
            peer: Err("one GPU".into()),
            graphs,
            bad_id,
            list,
            picked,
            chunk_values,
            chunk_ids,
            chunk_stats,
            split_states,
            split_counters,
            paged_table: Default::default(),
            slot_table: Default::default(),
            fused_residual,
            dequant_scratch: Default::default(),
        };
        b.reset_bad_id();
        Ok(b)
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    pub fn rank(&self) -> RankInfo {
        self.rank
    }

    pub fn set_peer(&mut self, peer: Result<PeerReduce, String>) {
        self.peer = peer;
    }

    /// Whether small all-reduces go through peer memory, or why not.
    pub fn peer_status(&self) -> Result<(), &str> {
        self.peer.as_ref().map(|_| ()).map_err(String::as_str)
    }

    /// Sum `x[:n]` over the ranks, into `x`, or added to `h` when given (then `x` keeps
    /// this rank's part). Peer memory carries it when it fits, else NCCL.
    fn reduce(&self, x: &mut CudaTensor, h: Option<&mut CudaTensor>, n: usize) {
        let len = n * x.cols;
        match &self.peer {
            Ok(peer) if peer::covers(len) => {
                let (name, grid, block, mut args) = peer.launch(x.buf.ptr(), h.map(|h| h.buf.ptr()), len);
                self.kernel(name, grid, block, 0, &mut args, None);
            }
            _ => {
                let Some(comm) = &self.nccl else { return };
                let sig = signature("all_reduce", (n as u32, 1), 0, &[Arg::Ptr(x.buf.ptr())], &[]);
                if !matches!(self.graphs.gate(sig, &[]), Gate::Skip) {
                    comm.all_reduce_sum(&self.gpu, &mut x.buf.slice, len);
                }
                if let Some(h) = h {
                    self.add(h, x, n);
                }
            }
        }
    }

    /// The `k` best of each of the first `n` rows: each chunk's best, then a merge per row
    /// (`chunked.rs`). Argmax is `k` = 1 without values. `Ranked::Probabilities` writes each
    /// winner's softmax probability (temperature 1) as `values`, from the chunks' max and
    /// sum taken in the same launches.
    fn chunked_topk(&self, x: &CudaTensor, n: usize, k: usize, values: Option<&mut CudaTensor>, indices: &mut CudaIds, ranked: Ranked) {
        let chunks = chunk_count(x.cols, k);
        if chunks * k > MAX_CANDIDATES {
            self.gpu.record(|| format!("top-k of {k} exceeds the {MAX_CANDIDATES} this backend keeps"));
            return;
        }
        let (cand_v, cand_i, stats) = (self.chunk_values.ptr(), self.chunk_ids.ptr(), self.chunk_stats.ptr());
        let values = values.as_deref();
        let probabilities = ranked == Ranked::Probabilities;
        let (pass1_name, merge_name) =
            if probabilities { ("softmax_topk_chunks_f32", "softmax_topk_merge_f32") } else { ("topk_chunks_f32", "topk_merge_f32") };
        for (start, rows) in row_groups(n) {
            let mut pass1 = [
                Arg::Ptr(x.row_ptr(start)),
                Arg::I32(x.cols as i32),
                Arg::I32(k as i32),
                Arg::Ptr(cand_v),
                Arg::Ptr(cand_i),
                Arg::Ptr(stats),
            ];
            let used = if probabilities { pass1.len() } else { pass1.len() - 1 };
            self.kernel(pass1_name, (chunks as u32, rows as u32), CHUNK_THREADS, 0, &mut pass1[..used], None);
            // The softmax merge takes the stats between the candidates and the outputs.
            let mut merge = [NULL; 8];
            merge[..4].copy_from_slice(&[Arg::Ptr(cand_v), Arg::Ptr(cand_i), Arg::I32(chunks as i32), Arg::I32(k as i32)]);
            merge[4] = Arg::Ptr(stats);
            let outputs = 4 + usize::from(probabilities);
            merge[outputs..outputs + 3].copy_from_slice(&[
                values.map_or(NULL, |v| Arg::Ptr(v.row_ptr(start))),
                Arg::I32(values.map_or(0, |v| v.cols) as i32),
                Arg::Ptr(indices.buf.ptr() + (start * k * std::mem::size_of::<i32>()) as u64),
            ]);
            self.kernel(merge_name, (rows as u32, 1), CHUNK_THREADS, 0, &mut merge[..outputs + 3], None);
        }
    }

    fn reset_bad_id(&self) {
        self.gpu.upload(&[i32::MIN], self.bad_id.ptr());
    }

    /// Copy a host list into the shared list buffer and return its device address.
    fn upload_list(&self, values: &[i32]) -> Option<u64> {
        if values.len() > MAX_LIST {
            self.gpu.record(|| format!("a row list of {} entries exceeds {MAX_LIST}", values.len()));
            return None;
        }
        let list = self.list.ptr();
        self.gpu.upload(values, list);
        Some(list)
    }

    /// Causal attention of `queries` query rows from `row0` in tiles (kernels/attention.cu's
    /// prefill kernel): query i sees `visible0 + i` keys, or as `table` says for a sequence
    /// of a paged batch.
    #[allow(clippy::too_many_arguments)]
    fn prefill_attention(
        &self,
        q: &CudaTensor,
        kv: (&CudaTensor, &CudaTensor),
        out: &CudaTensor,
        g: &AttnGeometry,
        rows: (usize, usize),
        visible0: usize,
        table: Option<u64>,
    ) {
        let (row0, queries) = rows;
        let mut args = attention_args(
            q,
            kv,
            out,
            g,
            [Arg::I32(row0 as i32), Arg::I32(queries as i32), Arg::I32(visible0 as i32), table.map_or(NULL, Arg::Ptr)],
        );
        // Shared memory: the K and V tiles (the tensor-core kernel's are two stages of bf16
        // rows 8 values longer).
        let (kernel, tile_q, warps, shared) = match prefill_mma_kernel(g.head_dim) {
            Some(kernel) => (kernel, PREFILL_MMA_TILE_Q, PREFILL_MMA_WARPS, 2 * 2 * PREFILL_MMA_TILE_K * (g.head_dim + 8) * 2),
            None => (PREFILL_ATTENTION_KERNEL, PREFILL_TILE_Q, PREFILL_WARPS, 2 * PREFILL_TILE_K * g.head_dim * 4),
        };
        let grid = (g.heads as u32, queries.div_ceil(tile_q) as u32);
        self.kernel(kernel, grid, warps * 32, shared as u32, &mut args, None);
    }

    /// Whether `k` and `v` are bf16 KV caches (`kv_tensor`), as the attention kernels and
    /// the KV stores take them; else the op is an error of the step.
    fn bf16_kv(&self, op: &str, k: &CudaTensor, v: &CudaTensor) -> bool {
        let ok = k.bf16 && v.bf16;
        if !ok {
            self.gpu.record(|| format!("{op}: K and V must be bf16 KV caches (Backend::kv_tensor)"));
        }
        ok
    }

    /// Whether a forward of `queries` queries takes the tiled prefill kernel: a prompt chunk,
    /// causal, run eagerly (its key count is a plain argument).
    fn tiles_prefill(&self, queries: usize, causal: bool, g: &AttnGeometry) -> bool {
        queries > STEP_QUERIES_MAX && causal && g.head_dim <= PREFILL_MAX_HEAD && !self.graphs.in_step()
    }

    /// The device address of `batch`'s table, uploaded by the first layer of its forward.
    fn upload_paged_table(&self, batch: &PagedBatch<'_, Self>) -> Option<u64> {
        self.upload_table(&self.paged_table, batch.id, &batch.table)
    }

    /// Query heads one step-attention block of `rows` queries over up to `keys` keys takes:
    /// `sources::heads_per_block`'s where the grouped blocks are still many, else one (and
    /// one when the knob asks). Grouping reads each K and V row from L2 once for its heads,
    /// which pays for a batch or a long context, but a short batch-1 decode then runs on a
    /// few heavier blocks (4 heads a block made the 8B shape's decode 5 % slower:
    /// testdata/gpu/run-20/NOTES.md). Every count sums the same bits; a graph step whose
    /// count changes is recorded afresh.
    fn heads_per_block(&self, g: &AttnGeometry, rows: usize, keys: usize) -> usize {
        let grouped = heads_per_block(g.head_dim, g.heads, g.kv_heads);
        let splits = (keys / ATTENTION_SPLIT_KEYS).clamp(1, ATTENTION_SPLITS);
        let blocks = rows * g.heads / grouped * splits;
        if Knobs::get().grouped_attention && blocks >= GROUPED_MIN_BLOCKS {
            grouped
        } else {
            1
        }
    }

    /// A paged step-attention launch of `rows` query rows over up to `keys` keys, whose
    /// queries split up to `splits` ways: on the tensor cores where `mma` asks and the
    /// geometry has a kernel, else on the CUDA cores.
    fn paged_step_launch(&self, g: &AttnGeometry, rows: usize, keys: usize, splits: usize, mma: bool) -> StepLaunch {
        match step_mma_kernel(g.head_dim, g.heads, g.kv_heads).filter(|_| mma) {
            Some(kernel) => StepLaunch {
                kernel,
                blocks: (g.kv_heads * self.split_slots(rows * g.kv_heads, splits)) as u32,
                threads: STEP_MMA_WARPS * 32,
                shared: (STEP_MMA_STAGES * 2 * STEP_MMA_TILE_K * (g.head_dim + 8) * 2) as u32,
            },
            None => self.scalar_step_launch(g, rows, keys, splits, true, ATTENTION_WARPS),
        }
    }

    /// The CUDA-core step attention of `warps` warps a block (kernels/attention.cu's
    /// attention_f32_p*), with `heads_per_block`'s heads a block.
    fn scalar_step_launch(&self, g: &AttnGeometry, rows: usize, keys: usize, splits: usize, paged: bool, warps: u32) -> StepLaunch {
        let per_block = self.heads_per_block(g, rows, keys);
        StepLaunch {
            kernel: attention_kernel(g.head_dim, per_block, paged),
            blocks: (g.heads / per_block * self.split_slots(rows * g.heads / per_block, splits)) as u32,
            threads: warps * 32,
            shared: per_block as u32 * warps * (g.head_dim as u32 + 2) * 4,
        }
    }

    /// Split slots of a step-attention launch of `blocks` (row, head group) blocks whose
    /// queries split up to `splits` ways: enough to fill the GPU twice over, and no more,
    /// since a slot past a query's splits is an idle block (in a graph step of 64 rows at
    /// 16 slots, 15 of 16 blocks were). A slot takes several splits where they are fewer,
    /// which sums the same bits (kernels/attention.cu).
    fn split_slots(&self, blocks: usize, splits: usize) -> usize {
        (2 * self.gpu.sm_count as usize).div_ceil(blocks.max(1)).clamp(1, splits)
    }

    /// The device address of `batch`'s table when it is already there.
    fn uploaded_paged_table(&self, batch: &PagedBatch<'_, Self>) -> Option<u64> {
        uploaded_table(&self.paged_table, batch.id)
    }

    /// The device address of an MLA forward's slot table: in a graph step the one
    /// `prepare_slot_table` uploaded ahead (a capture copies nothing from the host), else
    /// uploaded by the forward's first layer.
    pub(super) fn slot_table_for(&self, table: &SlotTable) -> Option<u64> {
        if !self.graphs.in_step() {
            return self.upload_table(&self.slot_table, table.id, &table.table);
        }
        let uploaded = uploaded_table(&self.slot_table, table.id);
        if uploaded.is_none() {
            self.gpu.record(|| "an MLA graph step whose slot table was not uploaded ahead (Backend::prepare_slot_table)".into());
        }
        uploaded
    }

    fn upload_table(&self, cache: &std::sync::Mutex<PagedTable>, id: u64, table: &[i32]) -> Option<u64> {
        let mut t = cache.lock().unwrap_or_else(|e| e.into_inner());
        if t.batch != Some(id) {
            if t.buf.as_ref().is_none_or(|b| b.len() < table.len()) {
                t.buf = Some(
                    self.gpu
                        .alloc::<i32>(table.len().next_power_of_two(), "paged attention table")
                        .map_err(|e| self.gpu.record(|| e.to_string()))
                        .ok()?,
                );
            }
            self.gpu.upload(table, t.buf.as_ref()?.ptr());
            t.batch = Some(id);
        }
        t.buf.as_ref().map(|b| b.ptr())
    }

    /// Launch a kernel through the graph gate: in a replayed step it only stages its
    /// per-step values; in a captured one it reads them from the graph arena.
    pub(super) fn kernel(
        &self,
        name: &'static str,
        grid: (u32, u32),
        block: u32,
        shared: u32,
        args: &mut [Arg],
        dynamic: Option<Dynamic<'_>>,
    ) {
        let (values, skip): (&[i32], &[usize]) = match &dynamic {
            Some(d) => (d.values, d.value_args),
            None => (&[], &[]),
        };
        // The pointer argument is still NULL here in every mode, so it signs the same.
        let sig = signature(name, grid, block, args, skip);
        match (self.graphs.gate(sig, values), dynamic) {
            (Gate::Skip, _) => return,
            (Gate::Device(p), Some(d)) => args[d.ptr_arg] = Arg::Ptr(p),
            (Gate::Eager, Some(d)) if d.value_args.is_empty() => match self.upload_list(d.values) {
                Some(p) => args[d.ptr_arg] = Arg::Ptr(p),
                None => return,
            },
            _ => {}
        }
        self.gpu.launch(name, grid, block, shared, args);
    }

    fn launch_rows(&self, name: &'static str, rows: usize, cols: usize, args: &mut [Arg]) {
        if rows > 0 {
            self.kernel(name, (rows as u32, 1), row_block(cols), 0, args, None);
        }
    }

    fn launch_elems(&self, name: &'static str, len: usize, args: &mut [Arg], dynamic: Option<Dynamic<'_>>) {
        if len > 0 {
            self.kernel(name, stride_grid(len), 256, 0, args, dynamic);
        }
    }

    /// A matmul-family op through the graph gate: `None` when a replay skips it, else
    /// whether it runs eagerly (so a new shape may be timed).
    pub(super) fn matmul_gate(&self, name: &str, rows: usize, ptrs: &[u64]) -> Option<bool> {
        // On the stack: every matmul of a step passes here. q, k and v take ten pointers.
        let mut args = [NULL; 16];
        assert!(ptrs.len() <= args.len(), "{name}: {} pointers to sign", ptrs.len());
        args.iter_mut().zip(ptrs).for_each(|(a, &p)| *a = Arg::Ptr(p));
        match self.graphs.gate(signature(name, (rows as u32, 1), 0, &args[..ptrs.len()], &[]), &[]) {
            Gate::Skip => None,
            Gate::Eager => Some(true),
            Gate::Device(_) => Some(false),
        }
    }

    /// Reads wait for the stream, which a step being recorded or replayed must not do.
    fn readable(&self) -> Result<(), BackendError> {
        if self.graphs.in_step() {
            return Err(BackendError::Device("a read-back inside a graph step (call graph_end first)".into()));
        }
        Ok(())
    }
}

/// Where the last paged table went, and the batch it belongs to (`PagedBatch::id`).
#[derive(Default)]
struct PagedTable {
    buf: Option<DeviceBuf<i32>>,
    batch: Option<u64>,
}

/// The device address of the table `id` names, when it is the one `cache` holds.
fn uploaded_table(cache: &std::sync::Mutex<PagedTable>, id: u64) -> Option<u64> {
    let t = cache.lock().unwrap_or_else(|e| e.into_inner());
    t.buf.as_ref().filter(|_| t.batch == Some(id)).map(|b| b.ptr())
}

/// What a chunked top-k ranks and writes as values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ranked {
    /// The entries themselves.
    Logits,
    /// The entries, written as their probabilities under softmax of the row.
    Probabilities,
}

/// Per-step values of one launch: in eager mode they are the arguments at `value_args`
/// (or, when that is empty, a list uploaded and passed at `ptr_arg`); in a graph they are
/// read from the arena through the pointer argument at `ptr_arg`.
#[derive(Clone, Copy)]
pub(super) struct Dynamic<'a> {
    values: &'a [i32],
    value_args: &'a [usize],
    ptr_arg: usize,
}

/// The operand of a matmul by `w`: the first `n` rows of `x`.
fn input(x: &CudaTensor, n: usize, w: &CudaWeight) -> Input {
    Input { x: x.buf.ptr(), rows: n, k_in: x.cols, k_full: w.k_full }
}

/// `out = x · wᵀ (+ bias)` as a skinny-kernel segment, shapes checked.
fn segment(x: &CudaTensor, w: &CudaWeight, bias: Option<&CudaWeight>, out: &CudaTensor) -> Segment {
    assert!(!w.raw && w.stored.is_none(), "a quantized weight by the bf16 matmuls");
    let (n_out, k_in) = (w.shape[0], w.shape[1]);
    assert_eq!((x.cols, out.cols), (k_in, n_out), "matmul: x is [.., {}], w is [{n_out}, {k_in}], out is [.., {}]", x.cols, out.cols);
    Segment { w: w.buf.ptr(), bias: bias.map(|b| b.buf.ptr()), out: out.buf.ptr(), n_out, accumulate: false }
}

/// The arguments every attention kernel of kernels/attention.cu starts with (q, k, v, out
/// and the head geometry), then `rest`.
fn attention_args<const N: usize>(
    q: &CudaTensor,
    kv: (&CudaTensor, &CudaTensor),
    out: &CudaTensor,
    g: &AttnGeometry,
    rest: [Arg; N],
) -> Vec<Arg> {
    let head = [
        Arg::Ptr(q.buf.ptr()),
        Arg::Ptr(kv.0.buf.ptr()),
        Arg::Ptr(kv.1.buf.ptr()),
        Arg::Ptr(out.buf.ptr()),
        Arg::I32(g.heads as i32),
        Arg::I32(g.kv_heads as i32),
        Arg::I32(g.head_dim as i32),
        Arg::F32(g.scale),
    ];
    head.into_iter().chain(rest).collect()
}

/// What a step-attention launch takes besides its arguments (`CudaBackend::step_launch`).
struct StepLaunch {
    kernel: &'static str,
    /// The grid's width (the rows are its height).
    blocks: u32,
    threads: u32,
    shared: u32,
}

/// Whether a view's bytes are kept as the checkpoint stores them: FP8, or packed INT4 (U8).
fn raw_bytes(view: &TensorView<'_>) -> bool {
    matches!(view.dtype, safetensors::tensor::Dtype::F8_E4M3 | safetensors::tensor::Dtype::U8)
}

fn to_usize_ids(rows: &[usize]) -> Vec<i32> {
    rows.iter().map(|&r| r as i32).collect()
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Weight = CudaWeight;
    type Ids = CudaIds;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn tp_world(&self) -> usize {
        self.rank.world
    }

    fn tp_rank(&self) -> usize {
        self.rank.rank
    }

    fn gpu_ordinal(&self) -> Option<u32> {
        Some(self.gpu.ordinal as u32)
    }

    fn device_memory(&self) -> Option<(u64, u64)> {
        Some(self.gpu.mem_info())
    }

    fn slow_first_shapes(&self) -> bool {
        true
    }

    fn kernel_compile(&self, progress: &(dyn Fn(CompileProgress<'_>) + Sync)) -> Result<KernelsReady, KernelCompileError> {
        if self.gpu.kernels_loaded() {
            return Ok(KernelsReady::Skipped("kernels loaded by an earlier launch".to_string()));
        }
        let target = CompileTarget {
            arch: self.gpu.arch.clone(),
            include_paths: default_include_paths(),
            nvrtc_version: nvrtc_version().map_err(KernelCompileError::Compiler)?,
        };
        let cache = PtxCache::new(PtxCache::default_location());
        let load = |modules: &[CompiledModule]| self.gpu.load(modules).map_err(|e| e.to_string());
        compile_then(SOURCES, &target, Some(&cache), progress, load).map(|(_, summary)| KernelsReady::Compiled(summary))
    }

    fn tensor(&self, rows: usize, cols: usize) -> Result<CudaTensor, BackendError> {
        Ok(CudaTensor { buf: self.gpu.alloc(rows * cols, "activations")?, rows, cols, bf16: false })
    }

    /// Always bf16: the attention kernels read K and V as bf16 (kernels/attention.cu).
    fn kv_tensor(&self, rows: usize, cols: usize, dtype: KvDtype) -> Result<CudaTensor, BackendError> {
        if dtype != KvDtype::Bf16 || cols % 2 != 0 {
            return Err(BackendError::Device(format!(
                "a KV cache of {} rows {cols} wide: the CUDA backend keeps K and V as bf16 rows of an even width",
                dtype.name()
            )));
        }
        Ok(CudaTensor { buf: self.gpu.alloc(rows * cols / 2, "KV cache")?, rows, cols, bf16: true })
    }

    fn kv_dtype(&self) -> KvDtype {
        KvDtype::Bf16
    }

    fn tensor_from(&self, cols: usize, data: &[f32]) -> Result<CudaTensor, BackendError> {
        assert!(cols > 0 && data.len() % cols == 0, "tensor_from: {} values are not rows of {cols}", data.len());
        let buf = self.gpu.alloc(data.len(), "tables")?;
        self.gpu.upload(data, buf.ptr());
        Ok(CudaTensor { buf, rows: data.len() / cols, cols, bf16: false })
    }

    fn ids(&self, len: usize) -> Result<CudaIds, BackendError> {
        Ok(CudaIds { buf: self.gpu.alloc(len, "ids")? })
    }

    fn load_weight(&self, view: &TensorView<'_>, shard: Shard) -> Result<CudaWeight, BackendError> {
        let what = || format!("weight {}", view.name);
        if raw_bytes(view) {
            if shard != Shard::Replicated && self.rank.world > 1 {
                return Err(BackendError::Device(format!("{}: quantized weights are loaded whole, not sharded", view.name)));
            }
            let buf = self.gpu.alloc::<bf16>(view.data.len().div_ceil(2), &what())?;
            self.gpu.upload(view.data, buf.ptr());
            self.gpu.take_error()?;
            let cols = view.shape.get(1).copied().unwrap_or(1);
            return Ok(CudaWeight { buf: WeightBuf::whole(buf), shape: view.shape.to_vec(), k_full: cols, raw: true, stored: None });
        }
        self.load_stacked(std::slice::from_ref(view), shard).map(|mut w| w.remove(0))
    }

    fn load_stored(&self, w: &StoredWeight<'_>) -> Result<CudaWeight, BackendError> {
        self.keep_stored(w)
    }

    fn load_stacked(&self, views: &[TensorView<'_>], shard: Shard) -> Result<Vec<CudaWeight>, BackendError> {
        if views.iter().any(raw_bytes) {
            return views.iter().map(|v| self.load_weight(v, shard)).collect();
        }
        // Each tensor's shard as host bytes of bf16 (a view into the file where it is one
        // already), then one allocation holding them back to back.
        enum Host<'a> {
            File(&'a [u8]),
            Converted(Vec<bf16>),
        }
        let mut parts = Vec::with_capacity(views.len());
        for view in views {
            parts.push(match contiguous_bf16(view, shard, self.rank) {
                Some((range, shape)) => (Host::File(&view.data[range]), shape),
                None => {
                    let (data, shape) = shard_weight(view, shard, self.rank)?;
                    (Host::Converted(data), shape)
                }
            });
        }
        let elements = |h: &Host<'_>| match h {
            Host::File(bytes) => bytes.len() / 2,
            Host::Converted(values) => values.len(),
        };
        let names: Vec<&str> = views.iter().map(|v| v.name).collect();
        let total: usize = parts.iter().map(|(h, _)| elements(h)).sum();
        let storage = Arc::new(self.gpu.alloc::<bf16>(total, &format!("weight {}", names.join(", ")))?);
        let mut weights = Vec::with_capacity(parts.len());
        let mut offset = 0;
        for (host, shape) in parts {
            let len = elements(&host);
            match host {
                Host::File(bytes) => self.gpu.upload(bytes, storage.ptr_at(offset)),
                Host::Converted(values) => self.gpu.upload(&values, storage.ptr_at(offset)),
            }
            let cols = shape.get(1).copied().unwrap_or(1);
            let k_full = if shard == Shard::Row { cols * self.rank.world } else { cols };
            weights.push(CudaWeight { buf: WeightBuf { storage: storage.clone(), offset, len }, shape, k_full, raw: false, stored: None });
            offset += len;
        }
        self.gpu.take_error()?;
        Ok(weights)
    }

    fn weight_shape<'w>(&self, w: &'w CudaWeight) -> &'w [usize] {
        &w.shape
    }

    fn weight_bytes(&self, w: &CudaWeight) -> u64 {
        w.buf.len() as u64 * 2 + w.stored.as_ref().map_or(0, |s| s.buf.len() as u64 * 4)
    }

    fn write_ids(&self, dst: &mut CudaIds, src: &[i32]) {
        assert!(src.len() <= dst.buf.len(), "write_ids: {} values into {}", src.len(), dst.buf.len());
        let sig = signature("write_ids", (src.len() as u32, 1), 0, &[Arg::Ptr(dst.buf.ptr())], &[]);
        match self.graphs.gate(sig, src) {
            Gate::Eager => self.gpu.upload(src, dst.buf.ptr()),
            Gate::Device(staged) => {
                self.gpu.bind();
                // SAFETY: both ranges hold src.len() ints (the arena slot was sized for them).
                let r = unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        dst.buf.ptr(),
                        staged,
                        std::mem::size_of_val(src),
                        self.gpu.stream.cu_stream(),
                    )
                };
                if let Err(e) = r {
                    self.gpu.record(|| format!("staged id copy: {e}"));
                }
            }
            Gate::Skip => {}
        }
    }

    fn read_ids(&self, src: &CudaIds, len: usize) -> Result<Vec<i32>, BackendError> {
        self.readable()?;
        self.gpu.download(&src.buf, 0, len)
    }

    fn read_rows(&self, src: &CudaTensor, start: usize, n: usize) -> Result<Vec<f32>, BackendError> {
        self.readable()?;
        let words = self.gpu.download(&src.buf, src.words(start), src.words(n))?;
        if !src.bf16 {
            return Ok(words);
        }
        // Two bf16 values a slot, the lower-addressed one in the low half (little-endian).
        Ok(words.iter().flat_map(|w| [w.to_bits() as u16, (w.to_bits() >> 16) as u16]).map(|b| bf16::from_bits(b).to_f32()).collect())
    }

    fn read_elements(&self, src: &CudaTensor, coords: &[(usize, usize)]) -> Result<Vec<f32>, BackendError> {
        // Few coordinates, usually in a couple of rows: read the rows they span.
        let (Some(lo), Some(hi)) = (coords.iter().map(|c| c.0).min(), coords.iter().map(|c| c.0).max()) else {
            return Ok(Vec::new());
        };
        let rows = self.read_rows(src, lo, hi - lo + 1)?;
        Ok(coords.iter().map(|&(r, c)| rows[(r - lo) * src.cols + c]).collect())
    }

    fn sync(&self) -> Result<(), BackendError> {
        self.readable()?;
        self.gpu.sync()?;
        let bad = self.gpu.download(&self.bad_id, 0, 1)?[0];
        if bad != i32::MIN {
            self.reset_bad_id();
            return Err(BackendError::Device(format!("token id {bad} is outside the embedding table")));
        }
        Ok(())
    }

    fn embed(&self, table: &CudaWeight, ids: &CudaIds, n: usize, out: &mut CudaTensor) {
        let (vocab, hidden) = (table.shape[0], table.shape[1]);
        let mut args = [
            Arg::Ptr(ids.buf.ptr()),
            Arg::Ptr(table.buf.ptr()),
            Arg::Ptr(out.buf.ptr()),
            Arg::I32(hidden as i32),
            Arg::I32(vocab as i32),
            Arg::Ptr(self.bad_id.ptr()),
        ];
        self.launch_rows("embedding_f32", n, hidden, &mut args);
    }

    fn matmul(&self, x: &CudaTensor, w: &CudaWeight, bias: Option<&CudaWeight>, n: usize, out: &mut CudaTensor) {
        if let Some(stored) = &w.stored {
            if bias.is_some() {
                return self.gpu.record(|| "a stored weight with a bias".into());
            }
            return self.stored_matmul(x, w, stored, n, out, None);
        }
        let seg = segment(x, w, bias, out);
        if let Some(eager) = self.matmul_gate("matmul", n, &[x.buf.ptr(), seg.w, seg.bias.unwrap_or(0), seg.out]) {
            self.matmuls.run(&self.gpu, input(x, n, w), seg, eager);
        }
    }

    fn matmul_f32_inputs(&self, x: &CudaTensor, w: &CudaWeight, n: usize, out: &mut CudaTensor) {
        if w.stored.is_some() || !self.matmuls.takes_cublas(n) {
            return self.matmuls.precisely(|| self.matmul(x, w, None, n, out));
        }
        let seg = segment(x, w, None, out);
        if self.matmul_gate("matmul_f32_inputs", n, &[x.buf.ptr(), seg.w, seg.out]).is_some() {
            self.matmuls.run_split(&self.gpu, input(x, n, w), seg);
        }
    }

    fn matmul_many(&self, x: &CudaTensor, n: usize, projections: &mut [Projection<'_, Self>]) {
        let Some(first) = projections.first() else { return };
        if projections.iter().any(|p| p.w.stored.is_some()) {
            return projections.iter_mut().for_each(|p| self.matmul(x, p.w, p.bias, n, p.out));
        }
        let operand = input(x, n, first.w);
        let segs: Vec<Segment> = projections.iter_mut().map(|p| segment(x, p.w, p.bias, p.out)).collect();
        let ptrs: Vec<u64> = std::iter::once(x.buf.ptr()).chain(segs.iter().flat_map(|s| [s.w, s.bias.unwrap_or(0), s.out])).collect();
        if let Some(eager) = self.matmul_gate("matmul_many", n, &ptrs) {
            self.matmuls.run_many(&self.gpu, operand, &segs, eager);
        }
    }

    fn gate_up_silu(
        &self,
        x: &CudaTensor,
        gate: &CudaWeight,
        up: &CudaWeight,
        n: usize,
        gate_buf: &mut CudaTensor,
        up_buf: &mut CudaTensor,
        out: &mut CudaTensor,
    ) {
        if gate.stored.is_some() || up.stored.is_some() {
            self.matmul(x, gate, None, n, gate_buf);
            self.matmul(x, up, None, n, up_buf);
            return self.silu_mul(gate_buf, up_buf, n, out);
        }
        let seg = segment(x, gate, None, out);
        assert_eq!(up.shape, gate.shape, "gate_up_silu: gate is {:?}, up is {:?}", gate.shape, up.shape);
        assert!(gate_buf.cols == out.cols && up_buf.cols == out.cols, "gate_up_silu: scratch widths differ from the output");
        let bufs = (gate_buf.buf.ptr(), up_buf.buf.ptr());
        if let Some(eager) = self.matmul_gate("gate_up_silu", n, &[x.buf.ptr(), seg.w, up.buf.ptr(), seg.out, bufs.0, bufs.1]) {
            self.matmuls.gate_up(&self.gpu, input(x, n, gate), seg.w, up.buf.ptr(), seg.n_out, seg.out, bufs, eager);
        }
    }

    fn matmul_residual(&self, x: &CudaTensor, w: &CudaWeight, n: usize, delta: &mut CudaTensor, h: &mut CudaTensor) {
        if let (Some(stored), 1) = (&w.stored, self.rank.world) {
            return self.stored_matmul(x, w, stored, n, h, Some(delta));
        }
        if !self.fused_residual {
            return residual_through(self, x, w, n, delta, h);
        }
        // Over several ranks the partial products are summed, then added, in one kernel.
        if self.rank.world > 1 {
            self.matmul(x, w, None, n, delta);
            return self.reduce(delta, Some(h), n);
        }
        let seg = Segment { accumulate: true, ..segment(x, w, None, h) };
        if let Some(eager) = self.matmul_gate("matmul_residual", n, &[x.buf.ptr(), seg.w, seg.out]) {
            self.matmuls.run_residual(&self.gpu, input(x, n, w), seg, delta.buf.ptr(), eager);
        }
    }

    fn rope_store_kv(
        &self,
        q: &mut CudaTensor,
        k: &mut CudaTensor,
        v: &CudaTensor,
        table: &RopeTable<Self>,
        positions: &CudaIds,
        n: usize,
        cache: (&mut CudaTensor, &mut CudaTensor),
        slot: usize,
    ) {
        let hd = table.head_dim;
        let (heads, kv_heads) = (q.cols / hd, k.cols / hd);
        assert!(v.cols == k.cols && cache.0.cols == k.cols && cache.1.cols == k.cols, "rope_store_kv: k, v and cache widths differ");
        if n == 0 || !self.bf16_kv("rope_store_kv", cache.0, cache.1) {
            return;
        }
        let mut args = [
            Arg::Ptr(q.buf.ptr()),
            Arg::Ptr(k.buf.ptr()),
            Arg::Ptr(v.buf.ptr()),
            Arg::I32(heads as i32),
            Arg::I32(kv_heads as i32),
            Arg::I32(hd as i32),
            Arg::Ptr(table.cos.buf.ptr()),
            Arg::Ptr(table.sin.buf.ptr()),
            Arg::Ptr(positions.buf.ptr()),
            Arg::I32((table.style == RopeStyle::Interleaved) as i32),
            Arg::Ptr(cache.0.buf.ptr()),
            Arg::Ptr(cache.1.buf.ptr()),
            Arg::I32(slot as i32),
            NULL,
        ];
        let values = [slot as i32];
        let block = (hd / 2).next_power_of_two().clamp(32, 256) as u32;
        let dynamic = Dynamic { values: &values, value_args: &[12], ptr_arg: 13 };
        self.kernel("rope_store_kv_f32", (n as u32, (heads + kv_heads) as u32), block, 0, &mut args, Some(dynamic));
    }

    fn qkv_rope(&self, x: &CudaTensor, n: usize, qkv: &mut [Projection<'_, Self>; 3], table: &RopeTable<Self>, positions: &CudaIds) {
        let segs = qkv.each_ref().map(|p| segment(x, p.w, p.bias, p.out));
        let operand = input(x, n, qkv[0].w);
        if !self.matmuls.takes_cublas(n) || !stacked(&segs, operand.k_in) {
            self.matmul_many(x, n, qkv);
            let [q, k, _] = qkv;
            self.rope(q.out, table, positions, n);
            return self.rope(k.out, table, positions, n);
        }
        let ptrs = [x.buf.ptr(), segs[0].w, segs[0].out, segs[1].out, segs[2].out, table.cos.buf.ptr(), positions.buf.ptr()];
        if self.matmul_gate("qkv_rope", n, &ptrs).is_some() {
            let rope = RopeSplit {
                cos: table.cos.buf.ptr(),
                sin: table.sin.buf.ptr(),
                positions: positions.buf.ptr(),
                head_dim: table.head_dim,
                interleaved: table.style == RopeStyle::Interleaved,
            };
            self.matmuls.qkv_split(&self.gpu, operand, [&segs[0], &segs[1], &segs[2]], Some(&rope));
        }
    }

    fn reserve_matmuls(&self, rows: usize, widest_in: usize, widest_products: usize) -> Result<(), BackendError> {
        self.matmuls.reserve(&self.gpu, rows, widest_in, widest_products);
        self.gpu.take_error()
    }

    fn qkv_rope_store_kv(&self, x: &CudaTensor, n: usize, qkv: &mut [Projection<'_, Self>; 3], store: KvStore<'_, Self>) {
        let segs = qkv.each_ref().map(|p| segment(x, p.w, p.bias, p.out));
        let operand = input(x, n, qkv[0].w);
        let table = store.table;
        let Some(cut) = Matmuls::rope_cut(operand, &segs, table.head_dim).filter(|_| n > 0) else {
            self.matmul_many(x, n, qkv);
            let [q, k, v] = qkv;
            return self.rope_store_kv(q.out, k.out, v.out, table, store.positions, n, store.cache, store.slot);
        };
        if !self.bf16_kv("qkv_rope_store_kv", store.cache.0, store.cache.1) {
            return;
        }
        let (k_cache, v_cache) = (store.cache.0.buf.ptr(), store.cache.1.buf.ptr());
        assert!(
            store.cache.0.cols == segs[1].n_out && store.cache.1.cols == segs[2].n_out,
            "qkv_rope_store_kv: cache widths differ from k and v"
        );
        let ptrs =
            [x.buf.ptr(), segs[0].w, segs[0].out, segs[1].w, segs[2].w, table.cos.buf.ptr(), store.positions.buf.ptr(), k_cache, v_cache]
                .map(Arg::Ptr);
        // The slot moves from step to step: a graph reads it from the arena.
        let slot = store.slot as i32;
        let (eager, slot_dev) = match self.graphs.gate(signature("qkv_rope_store_kv", (n as u32, 1), 0, &ptrs, &[]), &[slot]) {
            Gate::Skip => return,
            Gate::Eager => (true, 0),
            Gate::Device(p) => (false, p),
        };
        let rope = RopeStore {
            cos: table.cos.buf.ptr(),
            sin: table.sin.buf.ptr(),
            positions: store.positions.buf.ptr(),
            head_dim: table.head_dim,
            interleaved: table.style == RopeStyle::Interleaved,
            k_cache,
            v_cache,
            slot: store.slot,
            slot_dev,
        };
        self.matmuls.qkv_rope(&self.gpu, operand, cut, &segs, rope, eager);
    }

    fn rms_norm(&self, x: &CudaTensor, w: &CudaWeight, eps: f32, n: usize, out: &mut CudaTensor) {
        let c = x.cols;
        // The norm feeds a matmul: one through cuBLAS reads the bf16 copy written here.
        let copy = self.matmuls.stage(&self.gpu, out.buf.ptr(), n, c).map_or(NULL, Arg::Ptr);
        let mut args = [Arg::Ptr(x.buf.ptr()), Arg::Ptr(w.buf.ptr()), Arg::Ptr(out.buf.ptr()), Arg::I32(c as i32), Arg::F32(eps), copy];
        self.launch_rows("rmsnorm_f32", n, c, &mut args);
    }

    fn head_rms_norm(&self, x: &mut CudaTensor, w: &CudaWeight, eps: f32, n: usize) {
        let hd = w.buf.len();
        let p = x.buf.ptr();
        let mut args = [Arg::Ptr(p), Arg::Ptr(w.buf.ptr()), Arg::Ptr(p), Arg::I32(hd as i32), Arg::F32(eps), NULL];
        self.launch_rows("rmsnorm_f32", n * x.cols / hd, hd, &mut args);
    }

    fn rope(&self, x: &mut CudaTensor, table: &RopeTable<Self>, positions: &CudaIds, n: usize) {
        let hd = table.head_dim;
        if n == 0 {
            return;
        }
        let block = (hd / 2).next_power_of_two().clamp(32, 256) as u32;
        let mut args = [
            Arg::Ptr(x.buf.ptr()),
            Arg::I32(x.cols as i32),
            Arg::I32(hd as i32),
            Arg::Ptr(table.cos.buf.ptr()),
            Arg::Ptr(table.sin.buf.ptr()),
            Arg::Ptr(positions.buf.ptr()),
            Arg::I32((table.style == RopeStyle::Interleaved) as i32),
        ];
        self.kernel("rope_f32", (n as u32, (x.cols / hd) as u32), block, 0, &mut args, None);
    }

    fn attention(
        &self,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        g: &AttnGeometry,
        window: AttnWindow,
        mask: Mask<'_, Self>,
        out: &mut CudaTensor,
    ) {
        if window.queries == 0 || !self.bf16_kv("attention", k, v) {
            return;
        }
        if g.head_dim > 256 {
            return self.gpu.record(|| format!("attention: head_dim {} is over the kernel's 256", g.head_dim));
        }
        if self.tiles_prefill(window.queries, matches!(mask, Mask::Causal), g) {
            let visible0 = window.prefix + window.region - window.queries + 1;
            return self.prefill_attention(q, (k, v), out, g, (0, window.queries), visible0, None);
        }
        let mask_ptr = match mask {
            Mask::Causal => NULL,
            Mask::Explicit(ids) => Arg::Ptr(ids.buf.ptr()),
        };
        // A step's queries may split their keys (by each query's own key count, so a graph
        // replays at any length); a prefill chunk's are many and do not need to.
        let step = window.queries <= STEP_QUERIES_MAX;
        let splits = if step && window.queries * g.heads <= SPLIT_PAIRS { ATTENTION_SPLITS } else { 1 };
        let mut args = attention_args(
            q,
            (k, v),
            out,
            g,
            [
                Arg::I32(window.prefix as i32),
                Arg::I32(window.region as i32),
                Arg::I32(window.queries as i32),
                NULL,
                mask_ptr,
                Arg::I32(splits as i32),
                Arg::Ptr(self.split_states.ptr()),
                Arg::Ptr(self.split_counters.ptr()),
            ],
        );
        let values = [window.prefix as i32, window.region as i32];
        let dynamic = Dynamic { values: &values, value_args: &[8, 9], ptr_arg: 11 };
        // By the query count alone, so that a verify tree sums as decode steps do and a
        // tensor-parallel rank (fewer heads) as the whole model does.
        let warps = if step { ATTENTION_WARPS } else { PREFILL_ATTENTION_WARPS };
        let launch = self.scalar_step_launch(g, window.queries, window.prefix + window.region, splits, false, warps);
        let grid = (launch.blocks, window.queries as u32);
        self.kernel(launch.kernel, grid, launch.threads, launch.shared, &mut args, Some(dynamic));
    }

    fn prepare_paged_batch(&self, batch: &PagedBatch<'_, Self>) {
        self.upload_paged_table(batch);
    }

    fn paged_attention_batch(
        &self,
        q: &CudaTensor,
        new_kv: (&CudaTensor, &CudaTensor),
        cache: (&mut CudaTensor, &mut CudaTensor),
        g: &AttnGeometry,
        batch: &PagedBatch<'_, Self>,
        scratch: &mut PagedScratch<Self>,
        out: &mut CudaTensor,
    ) {
        // Trees (explicit masks), and graph steps whose table was not uploaded ahead
        // (`prepare_paged_batch`), go one sequence at a time.
        if !self.bf16_kv("paged_attention_batch", cache.0, cache.1) {
            return;
        }
        let tree = batch.seqs.iter().any(|s| matches!(s.mask, Mask::Explicit(_)));
        let graph = self.graphs.in_step();
        let table = match graph {
            true => self.uploaded_paged_table(batch),
            false => self.upload_paged_table(batch),
        };
        let Some(table) = table.filter(|_| !tree && g.head_dim <= 256) else {
            return paged_attention_per_seq(self, q, new_kv, cache, g, batch, scratch, out);
        };
        let width = new_kv.0.cols;
        let mut store = [
            Arg::Ptr(new_kv.0.buf.ptr()),
            Arg::Ptr(new_kv.1.buf.ptr()),
            Arg::Ptr(cache.0.buf.ptr()),
            Arg::Ptr(cache.1.buf.ptr()),
            Arg::I32(width as i32),
            Arg::Ptr(table),
        ];
        self.kernel("store_kv_paged_f32", (batch.rows as u32, 1), row_block(width), 0, &mut store, None);
        // Prompt chunks in tiles; every other row as a decode step sums (ATTENTION_WARPS,
        // splits by its own key count), so that a sequence's steps do not depend on what it
        // is batched with. Step rows come in runs of adjacent sequences.
        let mut step_runs: Vec<(usize, usize)> = Vec::new();
        for s in batch.seqs {
            let (row, queries) = (s.seq.row, s.seq.queries);
            if self.tiles_prefill(queries, true, g) {
                self.prefill_attention(q, (&*cache.0, &*cache.1), out, g, (row, queries), 0, Some(table));
            } else if let Some(last) = step_runs.last_mut().filter(|(start, len)| start + len == row) {
                last.1 += queries;
            } else {
                step_runs.push((row, queries));
            }
        }
        // A query splits as its own keys call for; a graph replays at every length, so any
        // of its queries may take the most splits.
        let splits = if graph { ATTENTION_SPLITS } else { (batch.max_visible / ATTENTION_SPLIT_KEYS).clamp(1, ATTENTION_SPLITS) };
        let chunk = if splits > 1 { (SPLIT_PAIRS / g.heads).max(1) } else { batch.rows };
        let mma = !self.matmuls.deterministic() && Knobs::get().step_mma.unwrap_or(batch.seqs.len() >= MMA_MIN_SEQS);
        let launch = self.paged_step_launch(g, chunk.min(batch.rows), batch.max_visible, splits, mma);
        for (start, len) in step_runs {
            for row_base in (start..start + len).step_by(chunk) {
                let mut args = attention_args(
                    q,
                    (&*cache.0, &*cache.1),
                    out,
                    g,
                    [
                        Arg::Ptr(table),
                        Arg::I32(row_base as i32),
                        Arg::I32(ATTENTION_SPLITS as i32),
                        Arg::Ptr(self.split_states.ptr()),
                        Arg::Ptr(self.split_counters.ptr()),
                    ],
                );
                let grid = (launch.blocks, chunk.min(start + len - row_base) as u32);
                self.kernel(launch.kernel, grid, launch.threads, launch.shared, &mut args, None);
            }
        }
    }

    fn silu_mul(&self, gate: &CudaTensor, up: &CudaTensor, n: usize, out: &mut CudaTensor) {
        let len = n * out.cols;
        let mut args = [Arg::Ptr(gate.buf.ptr()), Arg::Ptr(up.buf.ptr()), Arg::Ptr(out.buf.ptr()), Arg::I64(len as i64)];
        self.launch_elems("silu_mul_f32", len, &mut args, None);
    }

    fn add(&self, dst: &mut CudaTensor, src: &CudaTensor, n: usize) {
        let len = n * dst.cols;
        self.launch_elems("add_f32", len, &mut [Arg::Ptr(dst.buf.ptr()), Arg::Ptr(src.buf.ptr()), Arg::I64(len as i64)], None);
    }

    fn all_reduce(&self, x: &mut CudaTensor, n: usize) {
        if self.rank.world > 1 {
            self.reduce(x, None, n);
        }
    }

    fn weight_dtype(&self) -> safetensors::tensor::Dtype {
        safetensors::tensor::Dtype::BF16
    }

    fn keeps_quantized(&self) -> bool {
        Knobs::get().stored_experts
    }

    fn head_matmul(&self, x: &CudaTensor, w: &CudaWeight, heads: usize, n: usize, out: &mut CudaTensor) {
        self.launch_head_matmul(x, w, heads, n, out);
    }

    fn mla_attention(
        &self,
        q_lat: &CudaTensor,
        q_pe: &CudaTensor,
        new: (&CudaTensor, &CudaTensor),
        cache: (&mut CudaTensor, &mut CudaTensor),
        geometry: &MlaGeometry,
        table: &SlotTable,
        out: &mut CudaTensor,
    ) {
        self.launch_mla_attention(q_lat, q_pe, new, cache, geometry, table, out);
    }

    fn prepare_slot_table(&self, table: &SlotTable) {
        self.upload_table(&self.slot_table, table.id, &table.table);
    }

    fn moe_route(
        &self,
        logits: &CudaTensor,
        bias: &CudaTensor,
        routing: &Routing,
        n: usize,
        experts: &mut CudaIds,
        weights: &mut CudaTensor,
    ) {
        self.launch_moe_route(logits, bias, routing, n, experts, weights);
    }

    fn moe_experts(
        &self,
        x: &CudaTensor,
        experts: &CudaIds,
        weights: &CudaTensor,
        per_token: usize,
        w: &Experts<'_, Self>,
        n: usize,
        scratch: &mut MoeScratch<Self>,
        out: &mut CudaTensor,
    ) {
        self.launch_moe_experts(x, experts, weights, per_token, w, n, scratch, out);
    }

    fn copy_rows(&self, src: &CudaTensor, src_start: usize, dst: &mut CudaTensor, dst_start: usize, n: usize) {
        assert_eq!(src.cols, dst.cols, "copy_rows: widths differ");
        // Into a bf16 cache the values are rounded; between caches the slots move as they are.
        let (kernel, cols) = match (src.bf16, dst.bf16) {
            (false, false) => ("copy_rows_f32", src.cols),
            (false, true) => ("copy_rows_to_bf16", src.cols),
            (true, true) => ("copy_rows_f32", src.words(1)),
            (true, false) => return self.gpu.record(|| "copy_rows: from a bf16 KV cache into f32 activations".to_string()),
        };
        let mut args = [
            Arg::Ptr(src.buf.ptr()),
            Arg::Ptr(dst.buf.ptr()),
            Arg::I32(cols as i32),
            Arg::I32(n as i32),
            Arg::I32(src_start as i32),
            Arg::I32(dst_start as i32),
            NULL,
        ];
        let values = [src_start as i32, dst_start as i32];
        self.launch_elems(kernel, n * cols, &mut args, Some(Dynamic { values: &values, value_args: &[4, 5], ptr_arg: 6 }));
    }

    fn copy_cols(&self, src: &CudaTensor, n: usize, dst: &mut CudaTensor, dst_col: usize) {
        assert!(dst_col + src.cols <= dst.cols, "copy_cols: {} + {} > {}", dst_col, src.cols, dst.cols);
        let mut args = [
            Arg::Ptr(src.buf.ptr()),
            Arg::I32(src.cols as i32),
            Arg::Ptr(dst.buf.ptr()),
            Arg::I32(dst.cols as i32),
            Arg::I32(dst_col as i32),
            Arg::I32(n as i32),
        ];
        self.launch_elems("copy_cols_f32", n * src.cols, &mut args, None);
    }

    fn gather_rows(&self, src: &CudaTensor, rows: &[usize], dst: &mut CudaTensor) {
        assert_eq!(src.cols, dst.cols, "gather_rows: widths differ");
        if rows.is_empty() {
            return;
        }
        if src.bf16 != dst.bf16 {
            return self.gpu.record(|| "gather_rows: between a bf16 KV cache and f32 activations".to_string());
        }
        let list = to_usize_ids(rows);
        let cols = src.words(1);
        let mut args = [Arg::Ptr(src.buf.ptr()), Arg::Ptr(dst.buf.ptr()), Arg::I32(cols as i32), NULL];
        let block = row_block(cols * 8);
        self.kernel(
            "gather_rows_f32",
            (rows.len() as u32, 1),
            block,
            0,
            &mut args,
            Some(Dynamic { values: &list, value_args: &[], ptr_arg: 3 }),
        );
    }

    fn move_rows(&self, t: &mut CudaTensor, src_rows: &[usize], dst_start: usize) {
        if src_rows.is_empty() {
            return;
        }
        // The list and the start travel together in the list buffer (or the arena): the
        // start first, then the source rows.
        let mut values = vec![dst_start as i32];
        values.extend(to_usize_ids(src_rows));
        let cols = t.words(1);
        let mut args = [Arg::Ptr(t.buf.ptr()), Arg::I32(cols as i32), NULL, Arg::I32(src_rows.len() as i32)];
        let block = row_block(cols * 8);
        self.kernel("move_rows_f32", (1, 1), block, 0, &mut args, Some(Dynamic { values: &values, value_args: &[], ptr_arg: 2 }));
    }

    fn argmax(&self, x: &CudaTensor, n: usize, out: &mut CudaIds) {
        self.chunked_topk(x, n, 1, None, out, Ranked::Logits);
    }

    fn softmax(&self, x: &mut CudaTensor, n: usize, temperature: f32) {
        let chunks = chunk_count(x.cols, 1);
        let stats = self.chunk_stats.ptr();
        for (start, rows) in row_groups(n) {
            let mut args = [Arg::Ptr(x.row_ptr(start)), Arg::I32(x.cols as i32), Arg::F32(temperature), Arg::Ptr(stats)];
            let grid = (chunks as u32, rows as u32);
            self.kernel("softmax_chunks_f32", grid, CHUNK_THREADS, 0, &mut args, None);
            self.kernel("softmax_apply_f32", grid, CHUNK_THREADS, 0, &mut args, None);
        }
    }

    fn topk(&self, x: &CudaTensor, n: usize, k: usize, values: &mut CudaTensor, indices: &mut CudaIds) {
        self.chunked_topk(x, n, k, Some(values), indices, Ranked::Logits);
    }

    /// Ranked by logit (the same order as by probability, up to ties that rounding makes
    /// between different logits); only the k winners' probabilities are written.
    fn softmax_topk(&self, x: &mut CudaTensor, n: usize, k: usize, values: &mut CudaTensor, indices: &mut CudaIds) {
        self.chunked_topk(x, n, k, Some(values), indices, Ranked::Probabilities);
    }

    fn sample(&self, probs: &CudaTensor, row: usize, excluded: &[u32], coin: f32) -> Result<u32, BackendError> {
        self.readable()?;
        if excluded.len() > MAX_LIST {
            return Err(BackendError::Device(format!("sample: {} excluded ids exceed {MAX_LIST}", excluded.len())));
        }
        let excluded: Vec<i32> = excluded.iter().map(|&e| e as i32).collect();
        let list = self.upload_list(&excluded).unwrap_or(0);
        let args = [
            Arg::Ptr(probs.buf.ptr()),
            Arg::I32(probs.cols as i32),
            Arg::I32(row as i32),
            Arg::Ptr(list),
            Arg::I32(excluded.len() as i32),
            Arg::F32(coin),
            Arg::Ptr(self.picked.ptr()),
        ];
        self.gpu.launch("sample_probs_f32", (1, 1), 1024, 0, &args);
        let picked = self.gpu.download(&self.picked, 0, 1)?[0];
        u32::try_from(picked).map_err(|_| BackendError::Device(format!("row {row} has no probability mass")))
    }

    fn pick_ids(&self, src: &CudaIds, stride: usize, map: Option<&CudaIds>, n: usize, dst: &mut CudaIds, at: usize) {
        assert!(at + n <= dst.buf.len(), "pick_ids: {n} ids at {at} into {}", dst.buf.len());
        let mut args = [
            Arg::Ptr(src.buf.ptr()),
            Arg::I32(stride as i32),
            Arg::Ptr(map.map_or(0, |m| m.buf.ptr())),
            Arg::I32(n as i32),
            Arg::Ptr(dst.buf.ptr()),
            Arg::I32(at as i32),
            NULL,
        ];
        let values = [at as i32];
        self.launch_elems("pick_ids_i32", n, &mut args, Some(Dynamic { values: &values, value_args: &[5], ptr_arg: 6 }));
    }

    fn gather_ids(&self, src: &CudaIds, from: &[i32], dst: &mut CudaIds) {
        assert!(from.len() <= dst.buf.len(), "gather_ids: {} ids into {}", from.len(), dst.buf.len());
        // A row list holds MAX_LIST entries: longer lists go in pieces, each at its offset.
        for (piece, list) in from.chunks(MAX_LIST).enumerate() {
            let base = (piece * MAX_LIST) as i32;
            let mut args = [Arg::Ptr(src.buf.ptr()), NULL, Arg::I32(list.len() as i32), Arg::Ptr(dst.buf.ptr()), Arg::I32(base)];
            self.launch_elems("gather_ids_i32", list.len(), &mut args, Some(Dynamic { values: list, value_args: &[], ptr_arg: 1 }));
        }
    }

    fn graph_begin(&self, key: &str) -> Result<(), BackendError> {
        self.graphs.begin(&self.gpu, key)
    }

    fn graph_end(&self) -> Result<(), BackendError> {
        // A replayed step's ops staged nothing that its matmuls read.
        self.matmuls.forget_staged();
        self.graphs.end(&self.gpu)?;
        self.gpu.take_error()
    }

    fn graph_step(&self, key: &str, step: &mut dyn FnMut()) {
        let bracketed = self.graphs.begin(&self.gpu, key).is_ok();
        step();
        self.matmuls.forget_staged();
        // Any error ending the step means its kernels did not run (a capture that failed or
        // a replay that diverged skips them); the book is back to eager, so run them now.
        if bracketed && self.graphs.end(&self.gpu).is_err() {
            step();
        }
    }

    fn set_deterministic(&self, on: bool) {
        self.matmuls.set_deterministic(on);
    }

    fn set_precise_inputs(&self, on: bool) {
        self.matmuls.set_precise_inputs(on);
    }

    fn uses_graphs(&self) -> bool {
        true
    }

    fn graph_reset(&self) {
        self.graphs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launch shapes above size grids and shared memory for kernels/attention.cu's
    /// tiles and splits: each must be the number the kernels are compiled with.
    #[test]
    fn launch_constants_match_the_attention_kernels() {
        let text = SOURCES.iter().find(|s| s.file == "kernels/attention.cu").unwrap().text;
        let define = |name: &str| -> usize {
            let re = regex::Regex::new(&format!(r"(?m)^#define {name} (\d+)$")).unwrap();
            re.captures(text).unwrap_or_else(|| panic!("{name} is not defined")).get(1).unwrap().as_str().parse().unwrap()
        };
        assert_eq!(define("ATTENTION_SPLIT_KEYS"), ATTENTION_SPLIT_KEYS);
        assert_eq!(define("PREFILL_TILE_Q"), PREFILL_TILE_Q);
        assert_eq!(define("PREFILL_TILE_K"), PREFILL_TILE_K);
        assert_eq!(define("PREFILL_WARPS"), PREFILL_WARPS as usize);
        assert_eq!(define("PREFILL_MMA_TILE_Q"), PREFILL_MMA_TILE_Q);
        assert_eq!(define("PREFILL_MMA_TILE_K"), PREFILL_MMA_TILE_K);
        assert_eq!(define("PREFILL_MMA_WARPS"), PREFILL_MMA_WARPS as usize);
        assert_eq!(define("ATTENTION_MAX_THREADS"), (ATTENTION_WARPS * 32) as usize);
        assert_eq!(define("STEP_MMA_TILE_K"), STEP_MMA_TILE_K);
        assert_eq!(define("STEP_MMA_WARPS"), STEP_MMA_WARPS as usize);
        assert_eq!(define("STEP_MMA_STAGES"), STEP_MMA_STAGES);
    }
}
