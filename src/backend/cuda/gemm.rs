//! `out = x · Wᵀ (+ bias)` with f32 activations and bf16 weights in the `[out, in]` layout.
//!
//! Two ways to do it: the skinny tensor-core kernels of `kernels/gemv.cu` for up to 8 rows
//! (decode and verify steps, where the cost is reading W once) and cuBLAS `cublasGemmEx`
//! (bf16 inputs, f32 accumulation and output, after converting x to bf16) for more. The
//! choice depends only on the row count, and the skinny kernels compute each row the same
//! way whatever the count or configuration, so a verify step's rows equal the decode steps
//! they stand for, bit for bit (speculative greedy output then equals target-only output).
//! They cut K by the unsharded width ([`Slicing`]), which makes a 2-way row-parallel shard
//! all-reduce to the single-GPU bits as well.
//!
//! Under `--enable-deterministic-inference` the skinny kernels take every row count too, as
//! groups of 8 rows in one launch, each group computed as an 8-row launch computes it: a
//! row's bits then do not depend on how many rows share the step, where cuBLAS picks its
//! kernel (and its reduction order) by the row count.
//!
//! The configurations (row tiles per block, column steps per round) compute the same bits,
//! so the first eager run of each shape and row count times them and keeps the fastest.
//! One launch can also multiply the same x by up to three matrices (q, k, v) or fuse gate,
//! up and SiLU; and add its product into the output ([`Segment::accumulate`]: the residual
//! add after o_proj and down_proj, at tp = 1). A q, k, v launch can finish with RoPE and the
//! KV-cache write ([`GemvJob::QkvRope`]), the same bits as the rope kernel after it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t};
use half::bf16;

use super::gpu::{stride_grid, Arg, DeviceBuf, Gpu, NULL};
use crate::knobs::Knobs;

/// Rows up to which the skinny kernels are used (the 8 columns of one tensor-core tile), and
/// the rows of one group of a deterministic launch of more.
pub const GEMV_MAX_ROWS: usize = 8;
/// Most K slices one launch adds up (`GEMV_MAX_SLICES` in kernels/gemv.cu): their partial
/// sums fill at most 34 KB of shared memory, under the 48 KB a launch gets without asking.
const GEMV_MAX_SLICES: usize = 32;
/// Most warps per block, one slice each at a time (`GEMV_MAX_WARPS` in kernels/gemv.cu).
const GEMV_MAX_WARPS: usize = 16;
/// Matrices one plain skinny launch multiplies (`GemvArgs` in kernels/gemv.cu).
const SEGMENTS_PER_LAUNCH: usize = 3;
/// The narrowest K slice worth a warp of its own: narrower slices mean more warps, each
/// with a shorter chain of dependent loads, and more partial sums to add. Small models are
/// latency-bound, so their K (896, 1536) is cut down to this.
const MIN_SLICE_COLS: usize = 96;
/// Most groups of 8 rows one skinny launch takes (the grid's x extent): 64K rows, past any
/// step or prompt chunk.
const MAX_GROUPS: usize = 8192;
/// The grid's y extent, which numbers a launch's weight row tiles (a million weight rows).
const MAX_GRID_Y: usize = 65535;
/// Slices are cut no wider than this where K allows 32 of them (14336: 32 of 448, where 16
/// of 896 made each warp's chain of loads twice as long), so that a row-parallel half of a
/// wide K still has 16 warps' worth of slices on each rank.
const WIDE_SLICE_COLS: usize = 256;

/// One compiled configuration of the skinny kernels (a `GEMV_ENTRY` line of gemv.cu).
#[derive(Debug, PartialEq, Eq)]
pub struct GemvConfig {
    /// 16-row tensor-core tiles per block (gate-up: each tile is 8 gate and 8 up rows).
    pub tiles: usize,
    /// 32-column steps whose loads each warp issues together (a round).
    pub steps: usize,
    pub plain: &'static str,
    pub gate_up: &'static str,
    pub rope: &'static str,
}

/// The kernel family of a launch (a `GemvConfig` has one entry point per family).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Plain,
    GateUp,
    Rope,
}

impl GemvConfig {
    pub fn entry(&self, family: Family) -> &'static str {
        match family {
            Family::Plain => self.plain,
            Family::GateUp => self.gate_up,
            Family::Rope => self.rope,
        }
    }
}

macro_rules! gemv_configs {
    ($(($t:literal, $u:literal)),* $(,)?) => {
        pub const GEMV_CONFIGS: &[GemvConfig] = &[$(GemvConfig {
            tiles: $t,
            steps: $u,
            plain: concat!("gemv_t", $t, "_u", $u),
            gate_up: concat!("gemv_gate_up_t", $t, "_u", $u),
            rope: concat!("gemv_rope_t", $t, "_u", $u),
        }),*];
    };
}

// Keep in step with the GEMV_ENTRY lines of kernels/gemv.cu (a test checks).
gemv_configs!((1, 2), (1, 3), (1, 4), (2, 2));

/// The configuration of launches of more than 8 rows (deterministic mode), so that a prompt
/// of a new length times nothing. On run 29's H200 (`cuda-check`'s gemm section,
/// testdata/gpu/run-29/NOTES.md) two tiles a block was the fastest of the four in 15 of 20
/// cases (the 8B and Qwen 1.5B shapes at 16 and 64 rows) and within 13 % in the other 5.
const GROUPED: &GemvConfig = &GEMV_CONFIGS[3];

/// How the skinny kernels cut K: `slices` runs of `cols` columns, added in a fixed pairwise
/// tree. The cut is derived from the unsharded K, so a rank holding half of a row-parallel
/// weight holds exactly half of the slices, and the all-reduce of the two half-trees is the
/// single-GPU sum bit for bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slicing {
    pub cols: usize,
    pub slices: usize,
}

impl Slicing {
    /// The cut for `k_in` columns of a weight whose unsharded width is `k_full`; `None`
    /// when the skinny kernels cannot take that width.
    pub fn of(k_in: usize, k_full: usize) -> Option<Slicing> {
        if k_in == 0 || k_in % 8 != 0 {
            return None;
        }
        let whole = |k: usize| {
            // Slices of whole 16-byte loads (8 columns), all of one width: about 16 of them,
            // within the bounds above.
            let narrowest = (k / 16).clamp(MIN_SLICE_COLS, WIDE_SLICE_COLS);
            let slices = [32, 16, 8, 4, 2].into_iter().find(|&s| k % (8 * s) == 0 && k / s >= narrowest).unwrap_or(1);
            Slicing { cols: k / slices, slices }
        };
        let full = whole(k_full);
        if k_full % k_in == 0 && k_in % full.cols == 0 {
            let slices = k_in / full.cols;
            return Some(Slicing { cols: full.cols, slices });
        }
        Some(whole(k_in))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulPath {
    Gemv(&'static GemvConfig),
    Cublas,
}

/// One weight matrix multiplying the shared x, as raw device addresses.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub w: u64,
    pub bias: Option<u64>,
    pub out: u64,
    pub n_out: usize,
    /// `out += x · wᵀ (+ bias)` instead of `out = ...`.
    pub accumulate: bool,
}

/// The shared operand of a launch: `rows` rows of `k_in` f32 at `x`, multiplying weights
/// whose unsharded width is `k_full`.
#[derive(Clone, Copy, Debug)]
pub struct Input {
    pub x: u64,
    pub rows: usize,
    pub k_in: usize,
    pub k_full: usize,
}

/// The rope launch's RoPE and cache operands, as raw device addresses: the rope kernel's
/// tables and positions, and the cache rows `slot + row` for k and v (the slot read from
/// `slot_dev` when that is not 0: a graph's per-step value).
#[derive(Clone, Copy, Debug)]
pub struct RopeStore {
    pub cos: u64,
    pub sin: u64,
    pub positions: u64,
    pub head_dim: usize,
    pub interleaved: bool,
    pub k_cache: u64,
    pub v_cache: u64,
    pub slot: usize,
    pub slot_dev: u64,
}

impl RopeStore {
    /// The rope launch pairs the two halves of a head in one 16-row tile.
    pub fn fits(head_dim: usize) -> bool {
        head_dim > 0 && head_dim % 16 == 0
    }
}

/// The RoPE operands of a stacked q, k, v launch (`Matmuls::qkv_split`), as raw device
/// addresses: the rope kernel's tables and the rows' positions.
#[derive(Clone, Copy, Debug)]
pub struct RopeSplit {
    pub cos: u64,
    pub sin: u64,
    pub positions: u64,
    pub head_dim: usize,
    pub interleaved: bool,
}

/// What one skinny launch computes.
#[derive(Clone, Copy, Debug)]
pub enum GemvJob<'a> {
    Segments(&'a [Segment]),
    /// `act = silu(x·gateᵀ) * (x·upᵀ)`, all three `[rows, n_out]`.
    GateUp {
        gate: u64,
        up: u64,
        act: u64,
        n_out: usize,
    },
    /// q, k and v (their `out` unused for k and v): q rotated into its `out`, k rotated and
    /// v into the cache rows that `rope` names.
    QkvRope(&'a [Segment; 3], RopeStore),
}

impl GemvJob<'_> {
    fn family(&self) -> Family {
        match self {
            GemvJob::Segments(_) => Family::Plain,
            GemvJob::GateUp { .. } => Family::GateUp,
            GemvJob::QkvRope(..) => Family::Rope,
        }
    }

    fn segments(&self) -> &[Segment] {
        match self {
            GemvJob::Segments(s) => s,
            GemvJob::QkvRope(s, _) => &s[..],
            GemvJob::GateUp { .. } => &[],
        }
    }

    fn n_total(&self) -> usize {
        match self {
            GemvJob::GateUp { n_out, .. } => *n_out,
            _ => self.segments().iter().map(|s| s.n_out).sum(),
        }
    }

    /// Whether running it twice differs from running it once (a residual add), so that
    /// it must not be timed on its real output.
    fn accumulates(&self) -> bool {
        self.segments().iter().any(|s| s.accumulate)
    }

    fn weights(&self) -> impl Iterator<Item = u64> + '_ {
        let gate_up = match self {
            GemvJob::GateUp { gate, up, .. } => Some([*gate, *up]),
            _ => None,
        };
        gate_up.into_iter().flatten().chain(self.segments().iter().map(|s| s.w))
    }

    /// Blocks of a launch: one per row tile (16 rows per tensor-core tile; a gate-up tile
    /// holds 8 features' gate and up rows).
    fn blocks(&self, config: &GemvConfig) -> usize {
        match self {
            GemvJob::GateUp { n_out, .. } => n_out.div_ceil(8 * config.tiles),
            _ => self.segments().iter().map(|s| s.n_out.div_ceil(16 * config.tiles)).sum(),
        }
    }
}

impl Input {
    /// The K cut, when the skinny kernels can take this operand (up to 8 rows, or any count
    /// in groups of 8 when `grouped`; K a multiple of 8, 16-byte aligned rows of x and W).
    fn skinny(&self, weights: impl IntoIterator<Item = u64>, grouped: bool) -> Option<Slicing> {
        let aligned = self.x % 16 == 0 && weights.into_iter().all(|w| w % 16 == 0);
        let slicing = Slicing::of(self.k_in, self.k_full)?;
        let rows = self.rows <= GEMV_MAX_ROWS || (grouped && self.groups() <= MAX_GROUPS);
        (rows && aligned && slicing.slices <= GEMV_MAX_SLICES).then_some(slicing)
    }

    /// The groups of 8 rows a skinny launch of this operand runs (the grid's x extent).
    fn groups(&self) -> usize {
        self.rows.div_ceil(GEMV_MAX_ROWS)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ShapeKey {
    family: Family,
    rows: usize,
    n_total: usize,
    k_in: usize,
}

#[derive(Default)]
pub struct Matmuls {
    /// `SPECDECK_GEMV=t1_u2` (say): every skinny launch uses that configuration instead of
    /// the fastest timed alone (for A/B runs of whole steps, where launches overlap).
    pinned: Option<&'static GemvConfig>,
    /// The bf16 copy of x that cuBLAS reads; sized by `reserve`, grown on demand.
    scratch: Mutex<Option<DeviceBuf<bf16>>>,
    /// The f32 products of a stacked launch (q, k and v, or gate and up, as one matrix)
    /// before they are split; sized by `reserve`, grown on demand.
    products: Mutex<Option<DeviceBuf<f32>>>,
    /// The x (address, rows, columns) whose bf16 copy `scratch` holds, written there by the
    /// op that produced x (`stage`), for the launch that comes next.
    staged: Mutex<Option<(u64, usize, usize)>>,
    /// The skinny configuration chosen for each shape.
    chosen: Mutex<HashMap<ShapeKey, &'static GemvConfig>>,
    /// `--enable-deterministic-inference`: more rows than 8 go through the skinny kernels
    /// in groups of 8 instead of cuBLAS, whose reduction order depends on the shape (so on
    /// the row count and on a tensor-parallel shard's width).
    deterministic: AtomicBool,
    /// The skinny kernels read x in two tf32 parts (to about 2^-22) instead of rounded to
    /// tf32 (2^-11), and cuBLAS in two bf16 parts (`run_split`, to about 2^-16) instead of
    /// rounded to bf16: what the MoE family asks for (`set_precise_inputs`), and what
    /// `precisely` asks for around one product.
    precise_x: AtomicBool,
}

/// The address of `slot`'s buffer, grown to at least `len` elements first (the old one
/// freed before the new one is allocated); `None` when that failed (recorded for the next
/// sync).
fn grown<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    gpu: &Gpu,
    slot: &Mutex<Option<DeviceBuf<T>>>,
    len: usize,
    what: &str,
) -> Option<u64> {
    let mut buf = locked(slot);
    if buf.as_ref().is_none_or(|b| b.len() < len) {
        *buf = None;
        match gpu.alloc::<T>(len, what) {
            Ok(b) => *buf = Some(b),
            Err(e) => {
                gpu.record(|| e.to_string());
                return None;
            }
        }
    }
    buf.as_ref().map(|b| b.ptr())
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Whether `segs` lie back to back in one allocation (`Backend::load_stacked`), so that one
/// launch multiplies x by all of them as one `[Σ n_out, k_in]` matrix (their biases added as
/// the products are split).
pub fn stacked(segs: &[Segment], k_in: usize) -> bool {
    segs.len() > 1 && segs.windows(2).all(|w| w[1].w == w[0].w + (w[0].n_out * k_in * 2) as u64) && segs.iter().all(|s| !s.accumulate)
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Matmuls {
    pub fn new() -> Matmuls {
        let pinned = Knobs::get().gemv.as_ref().and_then(|w| GEMV_CONFIGS.iter().find(|c| c.plain == format!("gemv_{w}")));
        Matmuls { pinned, ..Matmuls::default() }
    }

    /// `seg.out = x · seg.wᵀ (+ bias)`. `eager` says the stream is not being captured, so a
    /// new shape may be timed.
    pub fn run(&self, gpu: &Gpu, input: Input, seg: Segment, eager: bool) {
        self.run_many(gpu, input, &[seg], eager);
    }

    /// `seg.out += x · seg.wᵀ`. Adding twice is not adding once, so a new shape is timed
    /// writing into `trial_out` (of `seg.out`'s shape) instead.
    pub fn run_residual(&self, gpu: &Gpu, input: Input, seg: Segment, trial_out: u64, eager: bool) {
        if eager && self.skinny(input, [seg.w]).is_some() {
            let trial = Segment { out: trial_out, accumulate: false, ..seg };
            self.config_for(gpu, input, GemvJob::Segments(&[trial]), true);
        }
        self.run(gpu, input, seg, eager);
    }

    pub fn set_deterministic(&self, on: bool) {
        self.deterministic.store(on, Ordering::Relaxed);
    }

    /// Whether `--enable-deterministic-inference` is on.
    pub fn deterministic(&self) -> bool {
        self.deterministic.load(Ordering::Relaxed)
    }

    /// Every product from now on reads x in two parts (`on`: tf32 in the skinny kernels,
    /// bf16 through cuBLAS) or rounded once.
    pub fn set_precise_inputs(&self, on: bool) {
        self.precise_x.store(on, Ordering::Relaxed);
    }

    /// Run `launches` with x read in two parts, then go back to the setting before
    /// (a launch takes the setting when it is recorded, in a graph too).
    pub fn precisely<T>(&self, launches: impl FnOnce() -> T) -> T {
        let before = self.precise_x.swap(true, Ordering::Relaxed);
        let out = launches();
        self.precise_x.store(before, Ordering::Relaxed);
        out
    }

    /// The tf32 parts the skinny kernels split x into.
    pub fn x_parts(&self) -> i32 {
        if self.precise_x.load(Ordering::Relaxed) {
            2
        } else {
            1
        }
    }

    /// Whether a launch of `rows` rows reads x through cuBLAS (as bf16).
    pub fn takes_cublas(&self, rows: usize) -> bool {
        rows > GEMV_MAX_ROWS && !self.deterministic()
    }

    /// Size the scratch for launches of up to `rows` rows of at most `widest_in` columns of
    /// x and `widest_products` stacked outputs, before any graph is captured over it: a
    /// buffer grown later would leave a captured graph reading the freed one.
    pub fn reserve(&self, gpu: &Gpu, rows: usize, widest_in: usize, widest_products: usize) {
        if rows > GEMV_MAX_ROWS {
            grown(gpu, &self.scratch, rows * widest_in, "matmul input (bf16)");
            grown(gpu, &self.products, rows * widest_products, "stacked matmul products");
        }
    }

    /// Where the op that produces `rows` × `cols` f32 at `x` also writes them rounded to
    /// bf16, when the next matmul reads that x through cuBLAS: it then converts nothing.
    /// The copy serves the launch that comes next only (every launch forgets it), so x must
    /// not change before it.
    pub fn stage(&self, gpu: &Gpu, x: u64, rows: usize, cols: usize) -> Option<u64> {
        if !self.takes_cublas(rows) || self.precise_x.load(Ordering::Relaxed) {
            return None;
        }
        let at = grown(gpu, &self.scratch, rows * cols, "matmul input (bf16)")?;
        *locked(&self.staged) = Some((x, rows, cols));
        Some(at)
    }

    /// The K cut of a skinny launch of `input` by `weights`, when one takes it: more than 8
    /// rows only in deterministic mode.
    fn skinny(&self, input: Input, weights: impl IntoIterator<Item = u64>) -> Option<Slicing> {
        input.skinny(weights, self.deterministic())
    }

    /// The same x times each matrix: one skinny launch per three matrices, or cuBLAS (one
    /// launch for matrices stacked in one allocation, their products then split apart).
    pub fn run_many(&self, gpu: &Gpu, input: Input, segs: &[Segment], eager: bool) {
        if input.rows == 0 || segs.is_empty() {
            return;
        }
        if let [q, k, v] = segs {
            if self.takes_cublas(input.rows) && stacked(segs, input.k_in) {
                return self.qkv_split(gpu, input, [q, k, v], None);
            }
        }
        let Some(cut) = self.skinny(input, segs.iter().map(|s| s.w)) else {
            return self.cublas(gpu, input, segs);
        };
        self.forget_staged();
        for chunk in segs.chunks(SEGMENTS_PER_LAUNCH) {
            self.gemv(gpu, input, cut, GemvJob::Segments(chunk), eager);
        }
    }

    /// `act = silu(x·gateᵀ) * (x·upᵀ)`; through cuBLAS, `gate_buf` and `up_buf` hold the
    /// two products first.
    #[allow(clippy::too_many_arguments)]
    pub fn gate_up(&self, gpu: &Gpu, input: Input, gate: u64, up: u64, n_out: usize, act: u64, bufs: (u64, u64), eager: bool) {
        if input.rows == 0 {
            return;
        }
        let job = GemvJob::GateUp { gate, up, act, n_out };
        if let Some(cut) = self.skinny(input, job.weights()) {
            self.forget_staged();
            return self.gemv(gpu, input, cut, job, eager);
        }
        let product = |w: u64, out: u64| Segment { w, bias: None, out, n_out, accumulate: false };
        let pair = [product(gate, bufs.0), product(up, bufs.1)];
        let len = input.rows * n_out;
        if !stacked(&pair, input.k_in) {
            self.cublas(gpu, input, &pair);
            let args = [Arg::Ptr(bufs.0), Arg::Ptr(bufs.1), Arg::Ptr(act), Arg::I64(len as i64)];
            gpu.launch("silu_mul_f32", stride_grid(len), 256, 0, &args);
            return;
        }
        // One launch of [gate; up], then the activation from its halves, rounded to bf16 as
        // well for the down matmul that reads it next.
        let Some(products) = self.stacked_product(gpu, input, &pair) else { return };
        let copy = self.stage(gpu, act, input.rows, n_out).unwrap_or(0);
        let args = [Arg::Ptr(products), Arg::Ptr(act), Arg::Ptr(copy), Arg::I32(n_out as i32), Arg::I64(len as i64)];
        gpu.launch("silu_mul_stacked_f32", stride_grid(len), 256, 0, &args);
    }

    /// q, k and v stacked in one allocation, through one cuBLAS launch: their products
    /// split into each `out` plus its bias, and q and k rotated when `rope` is given (the
    /// paged forward's RoPE, which then needs no launch of its own).
    pub fn qkv_split(&self, gpu: &Gpu, input: Input, [q, k, v]: [&Segment; 3], rope: Option<&RopeSplit>) {
        let plain = |s: &Segment| Segment { bias: None, ..*s };
        let Some(products) = self.stacked_product(gpu, input, &[plain(q), plain(k), plain(v)]) else { return };
        assert_eq!(k.n_out, v.n_out, "qkv_split: k and v widths differ");
        let bias = |s: &Segment| s.bias.map_or(NULL, Arg::Ptr);
        // Without RoPE any common divisor of the widths serves as the "head" a block moves.
        let head_dim = rope.map_or(gcd(q.n_out, k.n_out), |r| r.head_dim);
        let (heads, kv_heads) = (q.n_out / head_dim, k.n_out / head_dim);
        let args = [
            Arg::Ptr(products),
            Arg::Ptr(q.out),
            Arg::Ptr(k.out),
            Arg::Ptr(v.out),
            bias(q),
            bias(k),
            bias(v),
            Arg::I32(heads as i32),
            Arg::I32(kv_heads as i32),
            Arg::I32(head_dim as i32),
            Arg::Ptr(rope.map_or(0, |r| r.cos)),
            Arg::Ptr(rope.map_or(0, |r| r.sin)),
            Arg::Ptr(rope.map_or(0, |r| r.positions)),
            Arg::I32(rope.is_some_and(|r| r.interleaved) as i32),
            Arg::I32(rope.is_some() as i32),
        ];
        let block = (head_dim / 2).next_power_of_two().clamp(32, 256) as u32;
        gpu.launch("split_qkv_f32", (input.rows as u32, (heads + 2 * kv_heads) as u32), block, 0, &args);
    }

    /// `products = x · [W_0; W_1; ...]ᵀ` for matrices `stacked` in one allocation, in one
    /// cuBLAS launch; the address of the `[rows, Σ n_out]` products.
    fn stacked_product(&self, gpu: &Gpu, input: Input, segs: &[Segment]) -> Option<u64> {
        let n_out = segs.iter().map(|s| s.n_out).sum();
        let products = grown(gpu, &self.products, input.rows * n_out, "stacked matmul products")?;
        self.cublas(gpu, input, &[Segment { w: segs[0].w, bias: None, out: products, n_out, accumulate: false }]);
        Some(products)
    }

    /// The K cut of a `qkv_rope` launch, when it takes this one: up to 8 rows (its cache
    /// rows are one group's), widths the skinny kernels take, and heads that split into
    /// 16-row tiles of RoPE pairs.
    pub fn rope_cut(input: Input, segs: &[Segment; 3], head_dim: usize) -> Option<Slicing> {
        if !RopeStore::fits(head_dim) {
            return None;
        }
        input.skinny(segs.map(|s| s.w), false)
    }

    /// q, k and v with RoPE and the cache write in one skinny launch cut as `rope_cut` says.
    pub fn qkv_rope(&self, gpu: &Gpu, input: Input, cut: Slicing, segs: &[Segment; 3], rope: RopeStore, eager: bool) {
        self.gemv(gpu, input, cut, GemvJob::QkvRope(segs, rope), eager);
    }

    /// One path regardless of the rules (the self-test times each).
    pub fn run_path(&self, gpu: &Gpu, input: Input, job: GemvJob<'_>, path: MatmulPath) {
        match (path, job) {
            (MatmulPath::Gemv(config), job) => match input.skinny(job.weights(), !matches!(job, GemvJob::QkvRope(..))) {
                Some(cut) => {
                    self.launch(gpu, config, input, cut, job);
                }
                None => gpu.record(|| format!("skinny matmul: {} rows of K = {} are outside its range", input.rows, input.k_in)),
            },
            (MatmulPath::Cublas, GemvJob::Segments(segs)) => self.cublas(gpu, input, segs),
            (MatmulPath::Cublas, GemvJob::GateUp { .. } | GemvJob::QkvRope(..)) => {
                gpu.record(|| "cuBLAS has no fused gate-up or rope path".into())
            }
        }
    }

    /// The configuration this shape uses: the pinned one; for several groups of 8 rows
    /// `GROUPED`; else the one chosen before, else (when the stream is not capturing and
    /// the launch does not add into its output) the fastest candidate timed now, else the
    /// first candidate.
    pub fn config_for(&self, gpu: &Gpu, input: Input, job: GemvJob<'_>, eager: bool) -> &'static GemvConfig {
        if let Some(c) = self.pinned {
            return c;
        }
        if input.groups() > 1 {
            return GROUPED;
        }
        let key = ShapeKey { family: job.family(), rows: input.rows, n_total: job.n_total(), k_in: input.k_in };
        if let Some(c) = locked(&self.chosen).get(&key).copied() {
            return c;
        }
        // Past here only on a shape's first use.
        let list = GEMV_CONFIGS;
        let cut = match input.skinny(job.weights(), false) {
            Some(cut) if eager && list.len() > 1 && !job.accumulates() => cut,
            _ => return &list[0],
        };
        let timed: Vec<(f64, &'static GemvConfig)> = list
            .iter()
            .filter_map(|c| {
                // A configuration that fails to launch (too many resources, say) is out.
                let mut launched = true;
                let ms = gpu.elapsed_ms(10, || launched &= self.launch(gpu, c, input, cut, job)).ok()?;
                launched.then_some((ms, c))
            })
            .collect();
        let best = timed.iter().min_by(|a, b| a.0.total_cmp(&b.0)).map_or(&list[0], |t| t.1);
        locked(&self.chosen).insert(key, best);
        best
    }

    fn gemv(&self, gpu: &Gpu, input: Input, cut: Slicing, job: GemvJob<'_>, eager: bool) {
        let config = self.config_for(gpu, input, job, eager);
        self.launch(gpu, config, input, cut, job);
    }

    /// Launch one skinny kernel cutting K as `cut` says; `false` when the launch failed
    /// (recorded for the next sync).
    fn launch(&self, gpu: &Gpu, config: &'static GemvConfig, input: Input, cut: Slicing, job: GemvJob<'_>) -> bool {
        const HEAD: usize = 6;
        let head: [Arg; HEAD] = [
            Arg::Ptr(input.x),
            Arg::I32(input.rows as i32),
            Arg::I32(input.k_in as i32),
            Arg::I32(cut.cols as i32),
            Arg::I32(cut.slices as i32),
            Arg::I32(self.x_parts()),
        ];
        let blocks = job.blocks(config);
        if blocks > MAX_GRID_Y {
            gpu.record(|| format!("skinny matmul: {blocks} row tiles are past the grid's y extent ({MAX_GRID_Y})"));
            return false;
        }
        let grid = (input.groups() as u32, blocks as u32);
        // One warp per slice, each taking several when there are more slices than warps.
        let threads = 32 * cut.slices.min(GEMV_MAX_WARPS) as u32;
        // A partial sum per slice and output (16 rows x 8 x rows per tile).
        let shared = (4 * cut.slices * config.tiles * 16 * 8) as u32;
        match job {
            GemvJob::Segments(segs) => {
                const PER_SEGMENT: usize = 5;
                let mut args = [NULL; HEAD + PER_SEGMENT * SEGMENTS_PER_LAUNCH];
                args[..HEAD].copy_from_slice(&head);
                for (i, at) in (HEAD..args.len()).step_by(PER_SEGMENT).enumerate() {
                    let s = segs.get(i);
                    args[at] = Arg::Ptr(s.map_or(0, |s| s.w));
                    args[at + 1] = s.and_then(|s| s.bias).map_or(NULL, Arg::Ptr);
                    args[at + 2] = Arg::Ptr(s.map_or(0, |s| s.out));
                    args[at + 3] = Arg::I32(s.map_or(0, |s| s.n_out as i32));
                    args[at + 4] = Arg::I32(s.is_some_and(|s| s.accumulate) as i32);
                }
                gpu.launch(config.entry(Family::Plain), grid, threads, shared, &args)
            }
            GemvJob::QkvRope([q, k, v], r) => {
                const ROPE_ARGS: usize = 18;
                let bias = |s: &Segment| s.bias.map_or(NULL, Arg::Ptr);
                let mut args = [NULL; HEAD + ROPE_ARGS];
                args[..HEAD].copy_from_slice(&head);
                args[HEAD..].copy_from_slice(&[
                    Arg::Ptr(q.w),
                    bias(q),
                    Arg::Ptr(q.out),
                    Arg::I32(q.n_out as i32),
                    Arg::Ptr(k.w),
                    bias(k),
                    Arg::I32(k.n_out as i32),
                    Arg::Ptr(v.w),
                    bias(v),
                    Arg::Ptr(r.cos),
                    Arg::Ptr(r.sin),
                    Arg::Ptr(r.positions),
                    Arg::I32(r.head_dim as i32),
                    Arg::I32(r.interleaved as i32),
                    Arg::Ptr(r.k_cache),
                    Arg::Ptr(r.v_cache),
                    Arg::I32(r.slot as i32),
                    Arg::Ptr(r.slot_dev),
                ]);
                gpu.launch(config.entry(Family::Rope), grid, threads, shared, &args)
            }
            GemvJob::GateUp { gate, up, act, n_out } => {
                let mut args = [NULL; HEAD + 4];
                args[..HEAD].copy_from_slice(&head);
                args[HEAD..].copy_from_slice(&[Arg::Ptr(gate), Arg::Ptr(up), Arg::Ptr(act), Arg::I32(n_out as i32)]);
                gpu.launch(config.entry(Family::GateUp), grid, threads, shared, &args)
            }
        }
    }

    /// The staged copy of x the launch that comes next may read, forgotten now.
    pub fn forget_staged(&self) -> Option<(u64, usize, usize)> {
        locked(&self.staged).take()
    }

    /// Each segment's product through cuBLAS, from one bf16 copy of x (the one its producer
    /// wrote, when it staged one), or from two (`split`) where x is read precisely.
    fn cublas(&self, gpu: &Gpu, input: Input, segs: &[Segment]) {
        if self.precise_x.load(Ordering::Relaxed) {
            return self.split_products(gpu, input, segs);
        }
        let Input { x, rows, k_in, .. } = input;
        let len = rows * k_in;
        let staged = self.forget_staged() == Some((x, rows, k_in));
        let Some(xb) = grown(gpu, &self.scratch, len, "matmul input (bf16)") else { return };
        gpu.bind();
        if !staged {
            gpu.launch("f32_to_bf16", stride_grid(len), 256, 0, &[Arg::Ptr(x), Arg::Ptr(xb), Arg::I64(len as i64)]);
        }
        for seg in segs {
            Self::cublas_product(gpu, xb, rows, k_in, seg);
        }
    }

    /// `seg.out (+)= x · seg.wᵀ (+ bias)` through cuBLAS with x cut into two bf16 parts, its
    /// rounding and what that rounding left out, each multiplied and the second added: the
    /// products of x's f32 values to about 16 bits, for twice one product's time.
    pub fn run_split(&self, gpu: &Gpu, input: Input, seg: Segment) {
        self.split_products(gpu, input, &[seg]);
    }

    /// `run_split` for each segment, from one split of x.
    fn split_products(&self, gpu: &Gpu, input: Input, segs: &[Segment]) {
        let Input { x, rows, k_in, .. } = input;
        let len = rows * k_in;
        self.forget_staged();
        let Some(high) = grown(gpu, &self.scratch, 2 * len, "matmul input (bf16)") else { return };
        let low = high + (2 * len) as u64;
        gpu.bind();
        gpu.launch("f32_to_bf16_split", stride_grid(len), 256, 0, &[Arg::Ptr(x), Arg::Ptr(high), Arg::Ptr(low), Arg::I64(len as i64)]);
        for seg in segs {
            Self::cublas_product(gpu, high, rows, k_in, seg);
            Self::cublas_product(gpu, low, rows, k_in, &Segment { bias: None, accumulate: true, ..*seg });
        }
    }

    /// `seg.out (+)= x · seg.wᵀ (+ bias)` with x already in bf16 at `xb`.
    fn cublas_product(gpu: &Gpu, xb: u64, rows: usize, k_in: usize, seg: &Segment) {
        let (alpha, beta) = (1.0f32, if seg.accumulate { 1.0f32 } else { 0.0 });
        // Row-major out[rows, N] = x[rows, K] · W[N, K]ᵀ is, in cuBLAS's column-major terms,
        // out'[N, rows] = W'ᵀ · x' with W' = [K, N] (ld K) and x' = [K, rows] (ld K).
        // SAFETY: the addresses are live buffers of at least these extents.
        let status = unsafe {
            cudarc::cublas::result::gemm_ex(
                *gpu.blas.handle(),
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                seg.n_out as i32,
                rows as i32,
                k_in as i32,
                (&alpha) as *const f32 as *const _,
                seg.w as *const _,
                cudaDataType_t::CUDA_R_16BF,
                k_in as i32,
                xb as *const _,
                cudaDataType_t::CUDA_R_16BF,
                k_in as i32,
                (&beta) as *const f32 as *const _,
                seg.out as *mut _,
                cudaDataType_t::CUDA_R_32F,
                seg.n_out as i32,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        if let Err(e) = status {
            gpu.record(|| format!("cublasGemmEx [{rows}x{k_in}]·[{}x{k_in}]ᵀ: {e:?}", seg.n_out));
        }
        if let Some(bias) = seg.bias {
            let len = rows * seg.n_out;
            gpu.launch(
                "add_bias_f32",
                stride_grid(len),
                256,
                0,
                &[Arg::Ptr(seg.out), Arg::Ptr(bias), Arg::I32(seg.n_out as i32), Arg::I64(len as i64)],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_name_their_entry_points() {
        assert_eq!(GEMV_CONFIGS[0].plain, "gemv_t1_u2");
        assert_eq!(GEMV_CONFIGS[0].gate_up, "gemv_gate_up_t1_u2");
        assert_eq!(GEMV_CONFIGS[3].entry(Family::Rope), "gemv_rope_t2_u2");
    }

    /// A rope launch pairs dims (j, j + half) in 16-row tiles: whole heads of 16k dims.
    #[test]
    fn the_rope_launch_takes_heads_of_whole_tiles() {
        assert!(RopeStore::fits(64) && RopeStore::fits(128) && RopeStore::fits(80));
        assert!(!RopeStore::fits(72) && !RopeStore::fits(0));
        let seg = |w, n_out| Segment { w, bias: None, out: 0, n_out, accumulate: false };
        let segs = [seg(0x2000, 4096), seg(0x3000, 1024), seg(0x4000, 1024)];
        let decode = Input { x: 0x1000, rows: 1, k_in: 4096, k_full: 4096 };
        assert_eq!(Matmuls::rope_cut(decode, &segs, 128), Some(Slicing { cols: 256, slices: 16 }));
        assert!(Matmuls::rope_cut(decode, &segs, 72).is_none());
        assert!(Matmuls::rope_cut(Input { rows: 9, ..decode }, &segs, 128).is_none());
        let rope =
            RopeStore { cos: 0, sin: 0, positions: 0, head_dim: 128, interleaved: false, k_cache: 0, v_cache: 0, slot: 0, slot_dev: 0 };
        assert_eq!(GemvJob::QkvRope(&segs, rope).blocks(&GEMV_CONFIGS[0]), 256 + 64 + 64);
        assert_eq!(GemvJob::QkvRope(&segs, rope).family(), Family::Rope);
    }

    /// The table matches the GEMV_ENTRY lines of kernels/gemv.cu.
    #[test]
    fn configs_match_the_kernel_file() {
        let text = include_str!("../../../kernels/gemv.cu");
        let re = regex::Regex::new(r"(?m)^GEMV_ENTRY\((\d+), (\d+)\)$").unwrap();
        let in_file: Vec<(usize, usize)> = re.captures_iter(text).map(|c| (c[1].parse().unwrap(), c[2].parse().unwrap())).collect();
        let in_table: Vec<(usize, usize)> = GEMV_CONFIGS.iter().map(|c| (c.tiles, c.steps)).collect();
        assert_eq!(in_file, in_table);
        let limits =
            |name: &str| regex::Regex::new(&format!(r"#define {name} (\d+)")).unwrap().captures(text).unwrap()[1].parse::<usize>().unwrap();
        assert_eq!(limits("GEMV_MAX_WARPS"), GEMV_MAX_WARPS);
        assert_eq!(limits("GEMV_MAX_SLICES"), GEMV_MAX_SLICES);
    }

    /// The cuts of the real shapes: Llama-3.1-8B (4096, 14336), Qwen2.5 1.5B / 0.5B (1536,
    /// 8960, 896, 4864), SmolLM2 (576, 1536) and an EAGLE-3 fc input (3 x 576).
    #[test]
    fn k_is_cut_into_a_power_of_two_of_equal_slices() {
        let cut = |k| Slicing::of(k, k).map(|s| (s.cols, s.slices));
        assert_eq!(cut(4096), Some((256, 16)));
        assert_eq!(cut(14336), Some((448, 32)));
        assert_eq!(cut(1536), Some((96, 16)));
        assert_eq!(cut(8960), Some((280, 32)));
        assert_eq!(cut(896), Some((112, 8)));
        assert_eq!(cut(4864), Some((304, 16)));
        assert_eq!(cut(576), Some((144, 4)));
        assert_eq!(cut(1728), Some((216, 8)));
        assert_eq!(cut(200), Some((200, 1)));
        assert_eq!(cut(100), None);
        for k in [4096usize, 14336, 1536, 8960, 896, 4864, 576, 1728] {
            let s = Slicing::of(k, k).unwrap();
            assert!(s.slices.is_power_of_two() && s.cols * s.slices == k && s.cols % 8 == 0 && s.cols >= MIN_SLICE_COLS, "{k}: {s:?}");
            assert!(s.slices <= GEMV_MAX_SLICES);
        }
    }

    /// A row-parallel shard keeps the unsharded slice width, so each of two ranks adds
    /// exactly one half of the single-GPU tree; a cut that cannot be kept falls back to the
    /// shard's own.
    #[test]
    fn a_sharded_k_keeps_the_whole_weights_slices() {
        assert_eq!(Slicing::of(7168, 14336), Some(Slicing { cols: 448, slices: 16 }));
        assert_eq!(Slicing::of(2048, 4096), Some(Slicing { cols: 256, slices: 8 }));
        assert_eq!(Slicing::of(4480, 8960), Some(Slicing { cols: 280, slices: 16 }));
        assert_eq!(Slicing::of(448, 896), Some(Slicing { cols: 112, slices: 4 }));
        assert_eq!(Slicing::of(224, 896), Some(Slicing { cols: 112, slices: 2 }));
    }

    #[test]
    fn the_skinny_path_needs_aligned_rows_and_few_of_them() {
        let ok = Input { x: 0x1000, rows: 8, k_in: 4096, k_full: 4096 };
        assert_eq!(ok.skinny([0x2000, 0x3000], false), Some(Slicing { cols: 256, slices: 16 }));
        assert!(Input { rows: 9, ..ok }.skinny([0x2000], false).is_none());
        assert!(Input { k_in: 4100, k_full: 4100, ..ok }.skinny([0x2000], false).is_none());
        assert!(Input { x: 0x1004, ..ok }.skinny([0x2000], false).is_none());
        assert!(ok.skinny([0x2000, 0x3008], false).is_none());
    }

    /// A deterministic prefill of 21 rows is one launch of three groups (8, 8 and 5 rows);
    /// past the grid's extent it goes to cuBLAS.
    #[test]
    fn deterministic_launches_take_any_rows_in_groups_of_eight() {
        let input = Input { x: 0x1000, rows: 21, k_in: 4096, k_full: 4096 };
        assert_eq!(input.groups(), 3);
        assert_eq!(Input { rows: 8, ..input }.groups(), 1);
        let m = Matmuls::default();
        assert!(m.skinny(input, [0x2000]).is_none() && m.takes_cublas(21));
        m.set_deterministic(true);
        assert_eq!(m.skinny(input, [0x2000]), Some(Slicing { cols: 256, slices: 16 }));
        assert!(!m.takes_cublas(21));
        assert!(m.skinny(Input { rows: 8 * MAX_GROUPS + 1, ..input }, [0x2000]).is_none());
        assert_eq!(GROUPED.plain, "gemv_t2_u2");
    }

    /// q, k and v loaded into one allocation (Llama-3.1-8B's widths at K = 4096, bf16) go
    /// through one launch; out of order, alone, or adding into their output they do not.
    #[test]
    fn only_segments_back_to_back_are_stacked() {
        let seg = |w, n_out| Segment { w, bias: None, out: 0, n_out, accumulate: false };
        let q = seg(0x10000, 4096);
        let k = seg(q.w + 4096 * 4096 * 2, 1024);
        let v = seg(k.w + 1024 * 4096 * 2, 1024);
        assert!(stacked(&[q, k, v], 4096));
        assert!(stacked(&[Segment { bias: Some(0x400), ..q }, k], 4096));
        assert!(!stacked(&[q, v, k], 4096));
        assert!(!stacked(&[q, k, v], 2048));
        assert!(!stacked(&[q], 4096));
        assert!(!stacked(&[q, Segment { accumulate: true, ..k }], 4096));
    }

    #[test]
    fn a_launch_has_a_block_per_row_tile() {
        let seg = |n_out| Segment { w: 0, bias: None, out: 0, n_out, accumulate: false };
        let segs = [seg(4096), seg(1000)];
        assert_eq!(GemvJob::Segments(&segs).blocks(&GEMV_CONFIGS[0]), 256 + 63);
        assert_eq!(GemvJob::Segments(&segs).blocks(&GEMV_CONFIGS[3]), 128 + 32);
        let gate_up = GemvJob::GateUp { gate: 0, up: 0, act: 0, n_out: 14336 };
        assert_eq!(gate_up.blocks(&GEMV_CONFIGS[0]), 1792);
        assert_eq!(gate_up.blocks(&GEMV_CONFIGS[3]), 896);
    }
}
