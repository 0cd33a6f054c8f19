//! The backend seam: every numeric operation the engine needs, behind one trait, so the model
//! code (`engine::llama`, `engine::eagle3`, `engine::spec_decode`) is written once and runs on
//! the CPU reference (`cpu::CpuBackend`, f32, used by every CI test) or on a GPU backend.
//!
//! # The contract
//!
//! * Three associated device types:
//!   - `Tensor`: float activations, a 2-D row-major buffer `[capacity_rows, cols]` allocated once
//!     (at load) and reused every step. Ops act on its first `n` rows, so one buffer serves any
//!     batch of tokens up to its capacity (the CUDA backend captures one graph per `n` bucket).
//!   - `Weight`: a parameter as the device keeps it (f32 on the CPU; bf16 on a GPU), 1-D
//!     (norms, biases) or 2-D in the HF Linear layout `[out, in]`. Under tensor parallelism a
//!     `Weight` holds this rank's shard (`Shard`), and the model calls `all_reduce` after every
//!     row-parallel matmul (`o_proj`, `down_proj`); at tp = 1 that op does nothing.
//!   - `Ids`: i32 data on the device: token ids, positions, attention masks, top-k indices.
//! * Ops only enqueue work and do not fail: shapes are checked by the model code when buffers are
//!   sized, and device errors (a GPU backend launches asynchronously) surface at the next call
//!   that returns a `Result`: `sync`, a readback, an allocation or a load.
//! * Host↔device traffic is explicit and small: `write_ids` (the token ids, positions and mask
//!   of the next step, written into preallocated `Ids` so a captured graph sees new values
//!   without re-capture), `read_ids` / `read_rows` / `read_elements` (accept decisions, top-k of
//!   the drafter, a few probabilities), and `sample` (one token id). Logits never cross.
//!   Per verify step the host reads N argmax ids (greedy) or N-1 probabilities and one sampled
//!   id (sampling); per draft level it reads K·K top-k values and ids, because the tree is
//!   built on the host (`engine::tree`). A GPU backend that wants whole draft loops in one
//!   graph would move that selection on device; for a chain (topk 1) it is a single id.
//! * Index lists that the host computes between steps (rows of accepted tree nodes, the branch
//!   each draft step continues) are passed as host slices; a GPU backend copies them up.
//!
//! # How model code uses it
//!
//! A forward pass is a fixed sequence of ops over scratch buffers sized at load:
//! `embed` → per layer [`rms_norm` → `matmul` q,k,v (+bias) → (`head_rms_norm`)
//! → `rope` → `copy_rows` into the KV cache → `attention` (prefix fully visible, then a causal
//! or explicit mask over the new region) → `matmul` o → `all_reduce` → `add` to the residual →
//! `rms_norm` → `matmul` gate, up → `silu_mul` → `matmul` down → `all_reduce` → `add`] →
//! final norm → `matmul` lm_head. The fused forms below (`matmul_many`, `gate_up_silu`,
//! `matmul_residual`, `rope_store_kv`, and `qkv_rope_store_kv`, which is the first and the
//! last together) name those runs so a GPU backend can do each in one launch. Decoding then
//! uses `argmax` / `softmax` + `topk` / `read_elements` + `sample`.
//! The EAGLE-3 drafter adds `copy_cols` (concatenating `[norm(embed); hidden_norm(h)]` and the
//! three captured target hiddens) and `gather_rows` (the hidden each draft branch continues).
//! Committing accepted tree tokens is `move_rows` on every layer's K and V.
//!
//! # What else sits here
//!
//! The backend knows no events, findings or launch specs: it returns typed errors
//! (`BackendError`, `kernels::KernelCompileError`, `cuda::tp::StartError`) and reports
//! progress through callbacks, and the engine turns those into the launch's events and
//! findings. `kernels`: what a kernel compilation reports; `conformance`: any backend's
//! ops compared with the CPU reference; `nvml`: the GPU inventory, NVML opened in one place.

pub(crate) mod conformance;
pub mod cpu;
pub mod cuda;
pub(crate) mod kernels;
pub mod latent;
pub(crate) mod nvml;
pub(crate) mod rope;

use crate::model::checkpoint::{CheckpointError, TensorView};
use kernels::{CompileProgress, KernelCompileError, KernelsReady};
use latent::{Experts, MlaGeometry, MoeScratch, Routing, SlotTable};

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("cannot allocate {bytes} bytes for {what}")]
    OutOfMemory { bytes: u64, what: String },
    #[error(transparent)]
    Load(#[from] CheckpointError),
    #[error("device error: {0}")]
    Device(String),
}

/// How a tensor-parallel rank holds a weight. The CPU reference runs at tp = 1 and keeps the
/// whole tensor whatever the shard says.
///
/// The model code marks every weight: q/k/v (+bias), gate and up are `Column`; o_proj and
/// down_proj are `Row` (followed by `all_reduce`); embeddings, lm_head, norms, q/k norms and
/// EAGLE-3's `fc` are `Replicated`. A backend running tp > 1 also needs the model code to size
/// its per-rank buffers and `AttnGeometry` with heads / tp and intermediate / tp: the shapes
/// the loader checks are the checkpoint's full shapes, before sharding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shard {
    Replicated,
    /// Split the output features (rows of `[out, in]`).
    Column,
    /// Split the input features (columns); an `all_reduce` follows the matmul.
    Row,
}

/// Which halves of a head RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(i, i + d/2)` (HF `rotate_half`; Llama/Qwen checkpoints in HF layout).
    NeoX,
    /// Pairs `(2i, 2i + 1)` (GPT-J style).
    Interleaved,
}

/// Head layout of one attention layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnGeometry {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Softmax scale, normally `1/sqrt(head_dim)`.
    pub scale: f32,
}

/// The most queries of a forward whose rows must have the bits of the decode steps they
/// stand for (a verify tree, a draft level): a backend sums their attention as it sums a
/// decode step's, and may sum a longer forward's (a prefill chunk) another way.
pub const STEP_QUERIES_MAX: usize = 64;

/// Which cache slots the queries of one forward see.
///
/// Slots `[0, prefix)` are committed and visible to every query. The slots
/// `[prefix, prefix + region)` hold the tokens of the current region (a prefill chunk, a
/// verify tree, or all draft-tree levels so far); this forward's `queries` tokens are the last
/// `queries` slots of the region, and `Mask` says which region slots each one sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnWindow {
    pub prefix: usize,
    pub region: usize,
    pub queries: usize,
}

impl AttnWindow {
    /// The first slot this forward writes.
    pub fn first_new_slot(&self) -> usize {
        self.prefix + self.region - self.queries
    }
}

/// Visibility inside the region.
pub enum Mask<'a, B: Backend + ?Sized> {
    /// Query `i` sees region slots `0 ..= region - queries + i`.
    Causal,
    /// Row-major `[queries, region]` of 0/1: query `i` sees region slot `j` when `m[i][j] == 1`.
    Explicit(&'a B::Ids),
}

// Manual impls: a derive would demand `B: Copy`, but only the reference is copied.
impl<B: Backend + ?Sized> Clone for Mask<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend + ?Sized> Copy for Mask<'_, B> {}

/// Precomputed RoPE rotation for positions `0 .. max_positions`: `cos` and `sin` are
/// `[max_positions, head_dim / 2]`, already multiplied by the scaling's attention factor.
pub struct RopeTable<B: Backend + ?Sized> {
    pub cos: B::Tensor,
    pub sin: B::Tensor,
    pub head_dim: usize,
    pub style: RopeStyle,
    pub max_positions: usize,
}

/// `h[:n] += x[:n] · wᵀ` summed over the tensor-parallel ranks, through `delta`: the
/// unfused form of `Backend::matmul_residual`.
pub fn residual_through<B: Backend + ?Sized>(b: &B, x: &B::Tensor, w: &B::Weight, n: usize, delta: &mut B::Tensor, h: &mut B::Tensor) {
    b.matmul(x, w, None, n, delta);
    b.all_reduce(delta, n);
    b.add(h, delta, n);
}

/// A linear layer's weight as the checkpoint stores it (`Backend::load_stored`): `[rows,
/// cols]` values in `format`'s bytes and their scales.
#[derive(Clone, Copy)]
pub struct StoredWeight<'a> {
    pub name: &'a str,
    pub bytes: &'a [u8],
    pub scales: &'a [f32],
    pub shape: [usize; 2],
    pub format: latent::StoredFormat,
}

/// `w` dequantized on the host and loaded as `load_weight` loads any weight: what
/// `Backend::load_stored` does on a backend that does not multiply by stored bytes.
pub fn load_dequantized<B: Backend + ?Sized>(b: &B, w: &StoredWeight<'_>) -> Result<B::Weight, BackendError> {
    let values = w.format.dequantize(w.bytes, w.scales, w.shape);
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let file = std::path::Path::new("(the target's weights)");
    let view = TensorView { name: w.name, file, dtype: safetensors::tensor::Dtype::F32, shape: &w.shape, data: &data };
    b.load_weight(&view, Shard::Replicated)
}

/// One output of `Backend::matmul_many`: `out[:n] = x[:n] · wᵀ (+ bias)`.
pub struct Projection<'a, B: Backend + ?Sized> {
    pub w: &'a B::Weight,
    pub bias: Option<&'a B::Weight>,
    pub out: &'a mut B::Tensor,
}

/// Where a layer's step leaves its attention inputs: q and k rotated at `positions`, and the
/// step's k and v rows in the cache rows `[slot, slot + n)`.
pub struct KvStore<'a, B: Backend + ?Sized> {
    pub table: &'a RopeTable<B>,
    pub positions: &'a B::Ids,
    pub cache: (&'a mut B::Tensor, &'a mut B::Tensor),
    pub slot: usize,
}

/// How a KV cache holds its values (`Backend::kv_tensor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvDtype {
    F32,
    /// Half the bytes of f32. Attention widens each value exactly, so a backend that keeps
    /// f32 and rounds what it stores computes what one that stores bf16 computes.
    Bf16,
}

impl KvDtype {
    pub fn bytes(self) -> u64 {
        match self {
            KvDtype::F32 => 4,
            KvDtype::Bf16 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F32 => "f32",
            KvDtype::Bf16 => "bf16",
        }
    }

    /// `--kv-cache-dtype` as the engine takes it: `auto` (or none) is `None`, the backend's
    /// own (`Backend::kv_dtype`); bf16 can be asked for anywhere. The FP8 kinds SGLang knows
    /// are refused by name, not ignored.
    pub fn from_flag(flag: Option<&str>) -> Result<Option<KvDtype>, String> {
        match flag.map(str::trim) {
            None | Some("auto") => Ok(None),
            Some("bf16" | "bfloat16") => Ok(Some(KvDtype::Bf16)),
            Some(other) => Err(format!("--kv-cache-dtype {other}: the engine keeps its KV cache in bf16 or f32 (use auto or bf16)")),
        }
    }
}

/// `data` (rows of `cols`) in a new KV-cache buffer of `dtype`, rounded to it.
pub fn kv_tensor_from<B: Backend + ?Sized>(b: &B, cols: usize, data: &[f32], dtype: KvDtype) -> Result<B::Tensor, BackendError> {
    let rows = data.len() / cols;
    let src = b.tensor_from(cols, data)?;
    let mut kv = b.kv_tensor(rows, cols, dtype)?;
    b.copy_rows(&src, 0, &mut kv, 0, rows);
    Ok(kv)
}

/// One sequence of a batched forward over a paged KV pool (`engine::paged`): its new
/// tokens are rows `[row, row + queries)` of the forward, and `slots` are the pool slots of
/// every position its queries see, in position order, the new tokens' slots last.
#[derive(Clone, Copy, Debug)]
pub struct PagedSeq<'a> {
    pub row: usize,
    pub queries: usize,
    pub slots: &'a [usize],
}

impl PagedSeq<'_> {
    /// The window the queries see once the sequence's KV is laid out contiguously.
    pub fn window(&self) -> AttnWindow {
        AttnWindow { prefix: self.slots.len() - self.queries, region: self.queries, queries: self.queries }
    }

    /// The slots the new tokens' K and V go to.
    pub fn new_slots(&self) -> &[usize] {
        &self.slots[self.slots.len() - self.queries..]
    }
}

/// One sequence of a batched forward: where its rows and KV are, and its mask.
pub struct BatchSeq<'a, B: Backend + ?Sized> {
    pub seq: PagedSeq<'a>,
    pub mask: Mask<'a, B>,
}

/// Buffers for `paged_attention_by_gather`: a sequence's queries and output (`[rows, heads ·
/// head_dim]`) and its K and V laid out contiguously (`[positions, kv_heads · head_dim]`).
pub struct PagedScratch<B: Backend + ?Sized> {
    pub q: B::Tensor,
    pub out: B::Tensor,
    pub k: B::Tensor,
    pub v: B::Tensor,
}

impl<B: Backend + ?Sized> PagedScratch<B> {
    /// K and V in the pool's `dtype`, which they are gathered from.
    pub fn new(b: &B, rows: usize, positions: usize, g: &AttnGeometry, dtype: KvDtype) -> Result<Self, BackendError> {
        let (q_width, kv_width) = (g.heads * g.head_dim, g.kv_heads * g.head_dim);
        Ok(PagedScratch {
            q: b.tensor(rows, q_width)?,
            out: b.tensor(rows, q_width)?,
            k: b.kv_tensor(positions, kv_width, dtype)?,
            v: b.kv_tensor(positions, kv_width, dtype)?,
        })
    }
}

/// `Backend::paged_attention` from the plain ops: the sequence's K and V gathered into
/// contiguous scratch, its query rows copied to the top of a scratch buffer, `attention`
/// there, and the output rows copied back.
#[allow(clippy::too_many_arguments)]
pub fn paged_attention_by_gather<B: Backend + ?Sized>(
    b: &B,
    q: &B::Tensor,
    k: &B::Tensor,
    v: &B::Tensor,
    geometry: &AttnGeometry,
    seq: &PagedSeq<'_>,
    mask: Mask<'_, B>,
    scratch: &mut PagedScratch<B>,
    out: &mut B::Tensor,
) {
    b.gather_rows(k, seq.slots, &mut scratch.k);
    b.gather_rows(v, seq.slots, &mut scratch.v);
    b.copy_rows(q, seq.row, &mut scratch.q, 0, seq.queries);
    b.attention(&scratch.q, &scratch.k, &scratch.v, geometry, seq.window(), mask, &mut scratch.out);
    b.copy_rows(&scratch.out, 0, out, seq.row, seq.queries);
}

/// The sequences of one batched forward, with the table a backend that reads the pool in
/// place uploads (built once per forward, read by every layer): for each row `r` of the
/// forward, `table[2r]` is the number of keys its query sees and `table[2r + 1]` where in
/// `table` the pool slots of those keys start, in position order (the row's own last); the
/// sequences' slot lists follow the `2 · rows` header entries.
pub struct PagedBatch<'a, B: Backend + ?Sized> {
    /// Unique to this batch in the process: a backend that uploads `table` once for all
    /// the layers of a forward knows the batch by it, without comparing tables.
    pub id: u64,
    pub seqs: &'a [BatchSeq<'a, B>],
    pub rows: usize,
    pub table: Vec<i32>,
    /// The most keys any row sees.
    pub max_visible: usize,
}

impl<'a, B: Backend + ?Sized> PagedBatch<'a, B> {
    /// The batch of `seqs`, whose rows cover `[0, rows)`.
    pub fn new(seqs: &'a [BatchSeq<'a, B>], rows: usize) -> Self {
        let slots: usize = seqs.iter().map(|s| s.seq.slots.len()).sum();
        let mut table = vec![0i32; 2 * rows];
        table.reserve(slots);
        let mut max_visible = 0;
        for s in seqs {
            let (offset, len) = (table.len(), s.seq.slots.len());
            table.extend(s.seq.slots.iter().map(|&slot| slot as i32));
            for i in 0..s.seq.queries {
                let (row, visible) = (s.seq.row + i, len - s.seq.queries + i + 1);
                table[2 * row] = visible as i32;
                table[2 * row + 1] = offset as i32;
                max_visible = max_visible.max(visible);
            }
        }
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        PagedBatch { id, seqs, rows, table, max_visible }
    }
}

/// `Backend::paged_attention_batch` one sequence at a time: `store_kv_slots`, then
/// `paged_attention`.
#[allow(clippy::too_many_arguments)]
pub fn paged_attention_per_seq<B: Backend + ?Sized>(
    b: &B,
    q: &B::Tensor,
    new_kv: (&B::Tensor, &B::Tensor),
    cache: (&mut B::Tensor, &mut B::Tensor),
    geometry: &AttnGeometry,
    batch: &PagedBatch<'_, B>,
    scratch: &mut PagedScratch<B>,
    out: &mut B::Tensor,
) {
    for s in batch.seqs {
        b.store_kv_slots(new_kv.0, new_kv.1, s.seq.row, s.seq.new_slots(), (&mut *cache.0, &mut *cache.1));
        b.paged_attention(q, cache.0, cache.1, geometry, &s.seq, s.mask, scratch, out);
    }
}

pub trait Backend: Send + Sync + 'static {
    type Tensor: Send + Sync;
    type Weight: Send + Sync;
    type Ids: Send + Sync;

    /// A short name for logs ("cpu", "cuda").
    fn name(&self) -> &'static str;

    /// Ranks in this backend's tensor-parallel group: the model code sizes its per-rank
    /// buffers and attention heads by it (`engine::tp`). 1 without tensor parallelism.
    fn tp_world(&self) -> usize {
        1
    }

    /// This backend's rank in that group, `0 .. tp_world()`: which shard of a split
    /// dimension is its own when the model code splits on the host.
    fn tp_rank(&self) -> usize {
        0
    }

    /// The GPU this backend runs on, for per-GPU progress events; `None` off the GPU.
    fn gpu_ordinal(&self) -> Option<u32> {
        None
    }

    /// `(free, total)` bytes of this device's memory, which the KV cache is sized from
    /// (`engine::kv_budget`); `None` off a GPU, where a budget flag sizes it.
    fn device_memory(&self) -> Option<(u64, u64)> {
        None
    }

    /// Whether the first run of a shape costs more than the next ones (a GPU backend:
    /// cuBLAS loads its kernels on first use, the skinny matmuls time their configurations),
    /// so that the warmup should run the prefill path too rather than leave that to the
    /// first request.
    fn slow_first_shapes(&self) -> bool {
        false
    }

    /// The dtype this backend keeps weights in (`load_weight` converts to it): a loader that
    /// stages many host tensors into one weight stages them in it, not in f32.
    fn weight_dtype(&self) -> safetensors::tensor::Dtype {
        safetensors::tensor::Dtype::F32
    }

    /// Whether `load_weight` keeps the bytes of an F8_E4M3 view, or a U8 view of packed INT4,
    /// as they are, for the quantized forms of `moe_experts` (`latent::Experts::quantized`),
    /// and `load_stored` keeps a dense linear's; otherwise a loader dequantizes first.
    fn keeps_quantized(&self) -> bool {
        false
    }

    /// Run a whole step loop (a generation) where this backend issues work best. The CPU
    /// backend runs it on a rayon worker, so each parallel op is split with the calling thread
    /// rather than handed to the pool and waited for; a GPU backend runs it in place.
    fn run<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        work()
    }

    // ---- memory ----------------------------------------------------------------------------

    /// A zeroed `[rows, cols]` buffer.
    fn tensor(&self, rows: usize, cols: usize) -> Result<Self::Tensor, BackendError>;
    /// A `[rows, cols]` buffer holding `data` (row-major, `rows * cols` values).
    fn tensor_from(&self, cols: usize, data: &[f32]) -> Result<Self::Tensor, BackendError>;
    /// A zeroed KV-cache buffer `[rows, cols]` of `dtype`. Values reach it through
    /// `copy_rows`, `gather_rows` and the KV stores, which round them to its dtype; reads
    /// (`read_rows`, attention) see them widened to f32.
    fn kv_tensor(&self, rows: usize, cols: usize, dtype: KvDtype) -> Result<Self::Tensor, BackendError>;
    /// The KV dtype of `--kv-cache-dtype auto`: what the activations are on this backend
    /// (f32 on the CPU) or what its weights are (bf16 on a GPU, as SGLang keeps it).
    fn kv_dtype(&self) -> KvDtype {
        KvDtype::F32
    }
    /// A zeroed id buffer of `len` entries.
    fn ids(&self, len: usize) -> Result<Self::Ids, BackendError>;
    /// Upload a checkpoint tensor (any float dtype) as this rank's shard.
    fn load_weight(&self, view: &TensorView<'_>, shard: Shard) -> Result<Self::Weight, BackendError>;
    /// A whole linear layer's weight as the checkpoint stores it, for `matmul` and its kin. A
    /// backend whose kernels read those bytes keeps them so (`keeps_quantized`); the rest
    /// dequantize it here (`load_dequantized`).
    fn load_stored(&self, w: &StoredWeight<'_>) -> Result<Self::Weight, BackendError> {
        load_dequantized(self, w)
    }

    /// Room for matmuls of up to `rows` rows, x of at most `widest_in` columns and stacked
    /// products (`load_stacked`) of at most `widest_products`, made before any graph step
    /// is captured over it. A backend with no matmul scratch has nothing to do.
    fn reserve_matmuls(&self, _rows: usize, _widest_in: usize, _widest_products: usize) -> Result<(), BackendError> {
        Ok(())
    }

    /// Weights that multiply the same input (q, k and v; gate and up), each as `load_weight`
    /// loads it. A GPU backend keeps them back to back in one allocation, so that one large
    /// matmul can read them as a single matrix.
    fn load_stacked(&self, views: &[TensorView<'_>], shard: Shard) -> Result<Vec<Self::Weight>, BackendError> {
        views.iter().map(|v| self.load_weight(v, shard)).collect()
    }
    /// The shape of a weight as held (`[out, in]` or `[len]`).
    fn weight_shape<'w>(&self, w: &'w Self::Weight) -> &'w [usize];
    /// Bytes of device memory a weight occupies.
    fn weight_bytes(&self, w: &Self::Weight) -> u64;

    // ---- host traffic (small) --------------------------------------------------------------

    /// Write `src` into the first `src.len()` entries of `dst`.
    fn write_ids(&self, dst: &mut Self::Ids, src: &[i32]);
    fn read_ids(&self, src: &Self::Ids, len: usize) -> Result<Vec<i32>, BackendError>;
    /// Rows `[start, start + n)` of a tensor, row-major.
    fn read_rows(&self, src: &Self::Tensor, start: usize, n: usize) -> Result<Vec<f32>, BackendError>;
    /// `src[row][col]` for each coordinate.
    fn read_elements(&self, src: &Self::Tensor, coords: &[(usize, usize)]) -> Result<Vec<f32>, BackendError>;
    /// Wait for queued work; report any deferred device error.
    fn sync(&self) -> Result<(), BackendError>;

    // ---- layers ------------------------------------------------------------------------------

    /// `out[i] = table[ids[i]]` for `i < n`.
    fn embed(&self, table: &Self::Weight, ids: &Self::Ids, n: usize, out: &mut Self::Tensor);
    /// `out[:n] = x[:n] · wᵀ (+ bias)`, with `w` in the `[out, in]` layout.
    fn matmul(&self, x: &Self::Tensor, w: &Self::Weight, bias: Option<&Self::Weight>, n: usize, out: &mut Self::Tensor);
    /// `out[:n] = rmsnorm(x[:n]) * w`.
    fn rms_norm(&self, x: &Self::Tensor, w: &Self::Weight, eps: f32, n: usize, out: &mut Self::Tensor);
    /// In place, each `w.len()`-wide head of the first `n` rows: `rmsnorm(head) * w` (Qwen3 q/k norm).
    fn head_rms_norm(&self, x: &mut Self::Tensor, w: &Self::Weight, eps: f32, n: usize);
    /// Rotate every head of the first `n` rows in place at `positions[i]`.
    fn rope(&self, x: &mut Self::Tensor, table: &RopeTable<Self>, positions: &Self::Ids, n: usize);
    /// Attention of `q[:window.queries]` over the cached `k`/`v` (`[slots, kv_heads * head_dim]`).
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        geometry: &AttnGeometry,
        window: AttnWindow,
        mask: Mask<'_, Self>,
        out: &mut Self::Tensor,
    );
    /// `out[:n] = silu(gate[:n]) * up[:n]`.
    fn silu_mul(&self, gate: &Self::Tensor, up: &Self::Tensor, n: usize, out: &mut Self::Tensor);
    /// `dst[:n] += src[:n]`.
    fn add(&self, dst: &mut Self::Tensor, src: &Self::Tensor, n: usize);
    /// Sum over tensor-parallel ranks, in place. The identity at tp = 1.
    fn all_reduce(&self, x: &mut Self::Tensor, n: usize);

    /// Attention of one sequence's queries (`q` rows `[seq.row, seq.row + seq.queries)`, into
    /// the same rows of `out`) over its KV in the pool `k`/`v` at `seq.slots`; `mask` is over
    /// the new tokens as in `attention`. The default gathers (`paged_attention_by_gather`);
    /// a backend that reads the slots in place overrides it.
    #[allow(clippy::too_many_arguments)]
    fn paged_attention(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        geometry: &AttnGeometry,
        seq: &PagedSeq<'_>,
        mask: Mask<'_, Self>,
        scratch: &mut PagedScratch<Self>,
        out: &mut Self::Tensor,
    ) {
        paged_attention_by_gather(self, q, k, v, geometry, seq, mask, scratch, out);
    }

    /// A batched forward's attention: every sequence's new K and V rows (`new_kv`, in the
    /// forward's row order) into its pool slots of `cache`, then each sequence's queries over
    /// its slots, as `paged_attention` does one at a time (the default). A backend that reads
    /// the slots in place does the whole batch in a launch or two.
    #[allow(clippy::too_many_arguments)]
    fn paged_attention_batch(
        &self,
        q: &Self::Tensor,
        new_kv: (&Self::Tensor, &Self::Tensor),
        cache: (&mut Self::Tensor, &mut Self::Tensor),
        geometry: &AttnGeometry,
        batch: &PagedBatch<'_, Self>,
        scratch: &mut PagedScratch<Self>,
        out: &mut Self::Tensor,
    ) {
        paged_attention_per_seq(self, q, new_kv, cache, geometry, batch, scratch, out);
    }

    /// Make `batch`'s table readable by `paged_attention_batch` before its forward, so that
    /// the forward can be a graph step (which copies nothing from the host). A backend that
    /// keeps no table has nothing to do.
    fn prepare_paged_batch(&self, _batch: &PagedBatch<'_, Self>) {}

    /// `cache[slots[i]] = rows[row + i]` for K and V: a sequence's new tokens into its pool
    /// slots. The default copies each run of consecutive slots.
    fn store_kv_slots(
        &self,
        k: &Self::Tensor,
        v: &Self::Tensor,
        row: usize,
        slots: &[usize],
        cache: (&mut Self::Tensor, &mut Self::Tensor),
    ) {
        let mut i = 0;
        while i < slots.len() {
            let run = 1 + slots[i + 1..].iter().zip(&slots[i..]).take_while(|(next, prev)| **next == **prev + 1).count();
            self.copy_rows(k, row + i, cache.0, slots[i], run);
            self.copy_rows(v, row + i, cache.1, slots[i], run);
            i += run;
        }
    }

    // ---- the DeepSeek-V3 family (`latent`) ----------------------------------------------

    /// Per head `h < heads`: `out[:n, h·b ..][..b] = x[:n, h·a ..][..a] · W_hᵀ`, where `w` is
    /// `[heads · b, a]` and `W_h` its rows `[h·b, (h+1)·b)` (MLA's absorbed key and value
    /// halves of `kv_b_proj`).
    fn head_matmul(&self, x: &Self::Tensor, w: &Self::Weight, heads: usize, n: usize, out: &mut Self::Tensor);

    /// Make `table` readable by `mla_attention` before its forward (`prepare_paged_batch`'s
    /// counterpart for the latent pool), so that the forward can be a graph step.
    fn prepare_slot_table(&self, _table: &SlotTable) {}

    /// Absorbed MLA over the latent pool: every row's new latent (`new.0` the normed `c`,
    /// `new.1` the rotated rope key) into its own slot of `cache`, then each head's
    /// `softmax(scale · (q_lat·c + q_pe·k_pe))`-weighted sum of the `c` of the slots the row
    /// sees (`table`), into `out` (`[rows, heads · kv_lora]`).
    #[allow(clippy::too_many_arguments)]
    fn mla_attention(
        &self,
        q_lat: &Self::Tensor,
        q_pe: &Self::Tensor,
        new: (&Self::Tensor, &Self::Tensor),
        cache: (&mut Self::Tensor, &mut Self::Tensor),
        geometry: &MlaGeometry,
        table: &SlotTable,
        out: &mut Self::Tensor,
    );

    /// Route the first `n` rows of router `logits` (`[n, experts]`) with the correction
    /// `bias` (one f32 row: it only chooses, and a rounding of it could choose otherwise): each row's `per_token` experts, best first, into `experts[i · per_token ..]`
    /// and their weights into row `i` of `weights`.
    fn moe_route(
        &self,
        logits: &Self::Tensor,
        bias: &Self::Tensor,
        routing: &Routing,
        n: usize,
        experts: &mut Self::Ids,
        weights: &mut Self::Tensor,
    );

    /// `out[:n] = Σ_j weights[i][j] · expert_j(x[i])` over the routed experts of each row that
    /// `w` holds (the other ranks' experts are theirs to add), each expert a SwiGLU MLP.
    #[allow(clippy::too_many_arguments)]
    fn moe_experts(
        &self,
        x: &Self::Tensor,
        experts: &Self::Ids,
        weights: &Self::Tensor,
        per_token: usize,
        w: &Experts<'_, Self>,
        n: usize,
        scratch: &mut MoeScratch<Self>,
        out: &mut Self::Tensor,
    );

    // ---- data movement -----------------------------------------------------------------------

    /// `dst[dst_start + i] = src[src_start + i]` for `i < n` (same width).
    fn copy_rows(&self, src: &Self::Tensor, src_start: usize, dst: &mut Self::Tensor, dst_start: usize, n: usize);
    /// Place the first `n` rows of `src` at columns `[dst_col, dst_col + src.cols)` of `dst`.
    fn copy_cols(&self, src: &Self::Tensor, n: usize, dst: &mut Self::Tensor, dst_col: usize);
    /// `dst[i] = src[rows[i]]`.
    fn gather_rows(&self, src: &Self::Tensor, rows: &[usize], dst: &mut Self::Tensor);
    /// `t[dst_start + i] = t[src_rows[i]]`, in order; callers guarantee `src_rows[i] >= dst_start + i`
    /// and ascending, so no row is overwritten before it is read (committing a tree path).
    fn move_rows(&self, t: &mut Self::Tensor, src_rows: &[usize], dst_start: usize);

    // ---- decoding ------------------------------------------------------------------------------

    /// `out[i] = argmax(x[i])` for `i < n` (the lowest index on ties).
    fn argmax(&self, x: &Self::Tensor, n: usize, out: &mut Self::Ids);
    /// In place: `x[i] = softmax(x[i] / temperature)` for `i < n`.
    fn softmax(&self, x: &mut Self::Tensor, n: usize, temperature: f32);
    /// The `k` largest entries of each of the first `n` rows, descending (lower index first on
    /// ties): values into `values[i][0..k]`, indices into `indices[i * k ..]`.
    fn topk(&self, x: &Self::Tensor, n: usize, k: usize, values: &mut Self::Tensor, indices: &mut Self::Ids);
    /// Sample from row `row` of a probability tensor with the `excluded` ids removed and the rest
    /// renormalised, by inverse CDF at `coin` in `[0, 1)`. When nothing is left, sample the row as is.
    fn sample(&self, probs: &Self::Tensor, row: usize, excluded: &[u32], coin: f32) -> Result<u32, BackendError>;
    /// `dst[at + i] = map[src[i * stride]]` for `i < n` (`src[i * stride]` itself without a
    /// `map`): the first index of each row of a top-k, as an id of the vocabulary `map` leads
    /// to, kept on the device for a later forward to read (chain drafting reads nothing back).
    fn pick_ids(&self, src: &Self::Ids, stride: usize, map: Option<&Self::Ids>, n: usize, dst: &mut Self::Ids, at: usize);
    /// `dst[i] = src[from[i]]` for each `i < from.len()` where `from[i] >= 0`; the other
    /// entries of `dst` keep their values (a verify's draft tokens, from where they were drafted).
    fn gather_ids(&self, src: &Self::Ids, from: &[i32], dst: &mut Self::Ids);

    // ---- fused steps (the defaults run the ops above; a GPU backend fuses them) -----------

    /// `matmul` without a bias, with x's f32 values kept whole where `matmul` may round a
    /// prefill's activations to bf16 (cuBLAS). For products that choose: the MoE router's
    /// expert scores, which transformers computes in float32, and where bf16 activations
    /// move a near-tie between two experts to the other side and change the layer's output.
    fn matmul_f32_inputs(&self, x: &Self::Tensor, w: &Self::Weight, n: usize, out: &mut Self::Tensor) {
        self.matmul(x, w, None, n, out);
    }

    /// `matmul` of the same `x[:n]` by each projection (q, k and v of a layer).
    fn matmul_many(&self, x: &Self::Tensor, n: usize, projections: &mut [Projection<'_, Self>]) {
        for p in projections.iter_mut() {
            self.matmul(x, p.w, p.bias, n, p.out);
        }
    }

    /// The gated MLP's first half: `out[:n] = silu(x[:n] · gateᵀ) * (x[:n] · upᵀ)`.
    /// `gate_buf` and `up_buf` are scratch of `out`'s shape; what they hold afterwards is
    /// unspecified.
    #[allow(clippy::too_many_arguments)]
    fn gate_up_silu(
        &self,
        x: &Self::Tensor,
        gate: &Self::Weight,
        up: &Self::Weight,
        n: usize,
        gate_buf: &mut Self::Tensor,
        up_buf: &mut Self::Tensor,
        out: &mut Self::Tensor,
    ) {
        self.matmul(x, gate, None, n, gate_buf);
        self.matmul(x, up, None, n, up_buf);
        self.silu_mul(gate_buf, up_buf, n, out);
    }

    /// A row-parallel projection and the residual add: `h[:n] += x[:n] · wᵀ`, summed over
    /// the tensor-parallel ranks. `delta` is scratch of `h`'s shape.
    fn matmul_residual(&self, x: &Self::Tensor, w: &Self::Weight, n: usize, delta: &mut Self::Tensor, h: &mut Self::Tensor) {
        residual_through(self, x, w, n, delta, h);
    }

    /// RoPE on the first `n` rows of `q` and `k` at `positions`, then `k` and `v` into the
    /// cache rows `[slot, slot + n)`.
    #[allow(clippy::too_many_arguments)]
    fn rope_store_kv(
        &self,
        q: &mut Self::Tensor,
        k: &mut Self::Tensor,
        v: &Self::Tensor,
        table: &RopeTable<Self>,
        positions: &Self::Ids,
        n: usize,
        cache: (&mut Self::Tensor, &mut Self::Tensor),
        slot: usize,
    ) {
        self.rope(q, table, positions, n);
        self.rope(k, table, positions, n);
        self.copy_rows(k, 0, cache.0, slot, n);
        self.copy_rows(v, 0, cache.1, slot, n);
    }

    /// A batched layer's attention inputs from its input `x[:n]`: `matmul_many` for q, k
    /// and v, then RoPE on q and k (their rows go into the pool with the attention).
    fn qkv_rope(&self, x: &Self::Tensor, n: usize, qkv: &mut [Projection<'_, Self>; 3], table: &RopeTable<Self>, positions: &Self::Ids) {
        self.matmul_many(x, n, qkv);
        let [q, k, _] = qkv;
        self.rope(q.out, table, positions, n);
        self.rope(k.out, table, positions, n);
    }

    /// A layer's attention inputs from its input `x[:n]`: `matmul_many` for q, k and v,
    /// then `rope_store_kv` as `store` says. What `k` and `v` (the outputs of `qkv[1]` and
    /// `qkv[2]`) hold afterwards is unspecified: their rows are in the cache.
    fn qkv_rope_store_kv(&self, x: &Self::Tensor, n: usize, qkv: &mut [Projection<'_, Self>; 3], store: KvStore<'_, Self>) {
        self.matmul_many(x, n, qkv);
        let [q, k, v] = qkv;
        self.rope_store_kv(q.out, k.out, v.out, store.table, store.positions, n, store.cache, store.slot);
    }

    /// `topk` of `softmax(x)` (temperature 1) for the first `n` rows: what a draft step
    /// reads of its logits. What `x` holds afterwards is unspecified (the probabilities
    /// here; a GPU backend leaves the logits and writes only the k probabilities).
    fn softmax_topk(&self, x: &mut Self::Tensor, n: usize, k: usize, values: &mut Self::Tensor, indices: &mut Self::Ids) {
        self.softmax(x, n, 1.0);
        self.topk(x, n, k, values, indices);
    }

    // ---- CUDA graphs (no-ops elsewhere) --------------------------------------------------

    /// Bracket a step that repeats with the same shapes (a decode, verify or draft step of
    /// a given row count) so a GPU backend can record it once and replay it as a graph.
    /// `key` names the step and its shapes. Between `graph_begin` and `graph_end` the model
    /// only enqueues ops: no read-back, no `sample`, no `sync`.
    fn graph_begin(&self, _key: &str) -> Result<(), BackendError> {
        Ok(())
    }

    /// End the step begun by `graph_begin`: record it, capture it, or launch its graph.
    fn graph_end(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// Run `step` (ops only, as between `graph_begin` and `graph_end`) as the graph step
    /// `key`, always doing its work: where the backend cannot use a graph this time (its
    /// capture failed, or the step no longer matches its recording) it runs the step again
    /// eagerly. Device errors surface at the next call that returns a `Result`.
    fn graph_step(&self, key: &str, step: &mut dyn FnMut()) {
        let _ = key;
        step();
    }

    /// `--enable-deterministic-inference`: every matmul through the batch-invariant path,
    /// prefill included. A backend whose matmuls do not depend on the row count anyway (the
    /// CPU reference) has nothing to change.
    fn set_deterministic(&self, _on: bool) {}

    /// Products read x to f32 precision at every row count, not rounded where a backend
    /// rounds it for speed (CUDA's skinny kernels to tf32). The MoE family asks for it: tf32's
    /// 2^-11 flips near-tied expert routes against the f32 reference. A backend that computes
    /// in f32 anyway (the CPU reference) has nothing to change.
    fn set_precise_inputs(&self, _on: bool) {}

    /// Whether `graph_step` records and replays graphs here (the launch then captures its
    /// steps in the graph-capture phases).
    fn uses_graphs(&self) -> bool {
        false
    }

    /// Forget every recorded step and its graph: the buffers they point into are going
    /// away (a relaunch sizes new caches).
    fn graph_reset(&self) {}

    // ---- launch phases (no-ops elsewhere) ------------------------------------------------

    /// A launch's `kernel-compile` step: a GPU backend compiles and loads its kernels there
    /// (once per process), telling `progress` as it goes; the default has none and says so.
    fn kernel_compile(&self, progress: &(dyn Fn(CompileProgress<'_>) + Sync)) -> Result<KernelsReady, KernelCompileError> {
        let _ = progress;
        Ok(KernelsReady::Skipped(format!("the {} backend compiles no kernels", self.name())))
    }
}
