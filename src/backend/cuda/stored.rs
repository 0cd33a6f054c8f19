//! Dense linears kept as the checkpoint stores them (`Backend::load_stored`): FP8 bytes and
//! their f32 scales on the GPU, a byte a weight where bf16 takes two. Three ways to multiply:
//! - up to `KERNEL_ROWS` rows (a decode step, a concurrency-32 step), for blocks of whole
//!   64-column steps: kernels/gemv.cu's `gemv_fp8_g*`, the weights exact in f16 on the tensor
//!   cores against x in two f16 parts scaled per step (testdata/gpu/run-34: DeepSeek-V3 FP8
//!   at batch 1 1.08× the f32 CUDA-core kernel below, whose x loads held the L1 at 95 % of
//!   its throughput), the same kernel at every row count, deterministic mode or not;
//! - the same rows for blocks of other widths (a multiple of 16 columns): kernels/latent.cu's
//!   `linear_fp8` (f32 activations on the CUDA cores, the CPU's weights to the bit);
//! - a prefill: the weights dequantized to bf16 into one scratch buffer that cuBLAS reads,
//!   where the tensor cores' arithmetic outweighs the second pass over the weight.

use half::bf16;

use super::backend::{CudaBackend, CudaTensor, CudaWeight, StoredScales, WeightBuf};
use super::gemm::{Input, Segment};
use super::gpu::{stride_grid, Arg};
use crate::backend::latent::StoredFormat;
use crate::backend::{load_dequantized, Backend, BackendError, StoredWeight};

/// `linear_fp8`'s warps a block (kernels/latent.cu's LATENT_WARPS).
const LINEAR_WARPS_PER_BLOCK: usize = 8;
/// Columns of a warp's round of `linear_fp8` (32 lanes of Fp8Experts::CHUNK weights), the
/// unit its K slices are cut in; the warps it aims to put on a weight's loads, enough to keep
/// the copy bandwidth busy (an H100's 132 SMs hold 24 of its warps each).
const LINEAR_SPAN: usize = 32 * 16;
const LINEAR_WARPS: usize = 4096;
/// Rows of x up to which the FP8 kernels read the stored bytes (a concurrency-32 decode step):
/// blocks of up to two groups of 8 rows, each block reading the weights again (from L2).
const KERNEL_ROWS: usize = 32;
/// The FP8 kernels' entry points by groups of 8 x rows a block (kernels/gemv.cu's GEMV_FP8).
pub const FP8_ENTRIES: [&str; 2] = ["gemv_fp8_g1", "gemv_fp8_g2"];
/// The FP8 routed experts' entry points, gate-up then down (kernels/gemv.cu's MOE_FP8).
pub const FP8_EXPERT_ENTRIES: [&str; 2] = ["moe_gate_up_fp8_mma", "moe_down_fp8_mma"];
/// Columns of one step of the FP8 kernels (FP8_STEP_COLS), and warps of a block at most
/// (GEMV_FP8_WARPS).
const STEP_COLS: usize = 64;
const WARPS: usize = 8;
/// Weight rows of an FP8 block (FP8_TILES 16-row tiles), and the features of an expert
/// gate-up block (each tile holds 8 gate and the same 8 up rows).
pub const FP8_ROWS_PER_BLOCK: usize = 32;
pub const FP8_FEATURES_PER_BLOCK: usize = 16;
/// Most K slices of one launch: their partial sums for two groups fill 32 KB of shared memory.
const MAX_SLICES: usize = 16;

/// How the FP8 kernels cut K: the most slices (a power of two up to `MAX_SLICES`) of at least
/// two whole steps each. It depends on K alone, so every row count adds the same tree.
pub fn fp8_slices(k_in: usize) -> usize {
    let steps = k_in / STEP_COLS;
    [16, 8, 4, 2].into_iter().filter(|&s| s <= MAX_SLICES).find(|&s| steps % s == 0 && steps / s >= 2).unwrap_or(1)
}

/// Whether the FP8 kernels take a weight of `cols` columns in blocks of `[_, bc]`.
pub fn fp8_kernel_takes(bc: usize, cols: usize) -> bool {
    bc % STEP_COLS == 0 && cols % bc == 0
}

/// Warps of `linear_fp8` that share an output row, each over one slice of K: the fewest (1,
/// 2, 4 or 8) that put `LINEAR_WARPS` warps on the weight, or the first that cuts K into
/// slices of under two spans (more warps would find too little to read).
/// It depends on the weight's shape alone, so a row's bits do not depend on the row count.
pub fn linear_splits(n_out: usize, k_in: usize) -> usize {
    let spans = k_in.div_ceil(LINEAR_SPAN);
    [1, 2, 4, 8].into_iter().find(|&s| n_out * s >= LINEAR_WARPS || s * 2 > spans).unwrap_or(8)
}

/// Threads of an FP8 block: a warp a slice, up to `WARPS`.
pub fn fp8_block_threads(slices: usize) -> u32 {
    (WARPS.min(slices) * 32) as u32
}

/// Shared memory of an FP8 launch: each slice's partial sums, `groups` groups of 8 x rows.
pub fn fp8_shared_bytes(slices: usize, groups: usize) -> u32 {
    (slices * groups * FP8_ROWS_PER_BLOCK * 8 * std::mem::size_of::<f32>()) as u32
}

/// What `launch_fp8_rows` multiplies: `n` rows of x (each `heads` runs of `k_in`) by a
/// weight of `heads` groups of `n_out` rows into `out` (rows of `heads` runs of `n_out`).
pub(super) struct Fp8Rows {
    pub x: u64,
    pub n: usize,
    pub k_in: usize,
    pub n_out: usize,
    pub heads: usize,
    pub out: u64,
    pub accumulate: bool,
}

impl CudaBackend {
    /// `w` kept as stored where the FP8 kernels read it (FP8, whole blocks of a multiple of
    /// 16 columns, one GPU: `kv_b_proj`'s transposed key half has blocks of 64 or 16,
    /// `deepseek::rows`), else dequantized as any backend does.
    pub(super) fn keep_stored(&self, w: &StoredWeight<'_>) -> Result<CudaWeight, BackendError> {
        let [rows, cols] = w.shape;
        let StoredFormat::Fp8 { block: [_, bc] } = w.format else { return load_dequantized(self, w) };
        if !self.keeps_quantized() || bc % 16 != 0 || cols % bc != 0 || self.rank().world > 1 {
            return load_dequantized(self, w);
        }
        let what = format!("weight {}", w.name);
        let buf = self.gpu.alloc::<bf16>(w.bytes.len().div_ceil(2), &what)?;
        self.gpu.upload(w.bytes, buf.ptr());
        let scales = self.gpu.alloc::<f32>(w.scales.len(), &format!("{what} (scales)"))?;
        self.gpu.upload(w.scales, scales.ptr());
        let mut scratch = self.dequant_scratch.lock().unwrap_or_else(|e| e.into_inner());
        if scratch.as_ref().is_none_or(|s| s.len() < rows * cols) {
            *scratch = Some(self.gpu.alloc::<bf16>(rows * cols, "dequantized weight scratch")?);
        }
        self.gpu.take_error()?;
        Ok(CudaWeight::stored(WeightBuf::whole(buf), w.shape, StoredScales { buf: scales, format: w.format }))
    }

    /// `out[:n] = x[:n] · wᵀ` for a stored `w`; with `residual`, `out[:n] += ...`, the
    /// residual's buffer taking what a timing trial writes (`Matmuls::run_residual`).
    pub(super) fn stored_matmul(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        stored: &StoredScales,
        n: usize,
        out: &CudaTensor,
        residual: Option<&CudaTensor>,
    ) {
        let accumulate = residual.is_some();
        let [n_out, k_in] = [w.shape[0], w.shape[1]];
        assert_eq!(
            (x.cols, out.cols),
            (k_in, n_out),
            "stored matmul: x is [.., {}], w is [{n_out}, {k_in}], out is [.., {}]",
            x.cols,
            out.cols
        );
        let StoredFormat::Fp8 { block: [br, bc] } = stored.format else {
            return self.gpu.record(|| "stored matmul: only FP8 weights are kept as stored".into());
        };
        // The tensor-core kernels take whole 64-column steps of one scale; `linear_fp8` any
        // block of a multiple of 16 columns.
        let mma = fp8_kernel_takes(bc, k_in);
        let (w_ptr, scales) = (Arg::Ptr(w.buf.ptr()), Arg::Ptr(stored.buf.ptr()));
        let (br, bc) = (Arg::I32(br as i32), Arg::I32(bc as i32));
        if n <= KERNEL_ROWS && !mma {
            let splits = linear_splits(n_out, k_in);
            let mut args = [
                Arg::Ptr(x.buf.ptr()),
                w_ptr,
                scales,
                br,
                bc,
                Arg::I32(n as i32),
                Arg::I32(k_in as i32),
                Arg::I32(n_out as i32),
                Arg::I32(splits as i32),
                Arg::I32(accumulate as i32),
                Arg::Ptr(out.buf.ptr()),
            ];
            let grid = n_out.div_ceil(LINEAR_WARPS_PER_BLOCK / splits) as u32;
            return self.kernel("linear_fp8", (grid, 1), (LINEAR_WARPS_PER_BLOCK * 32) as u32, 0, &mut args, None);
        }
        if n <= KERNEL_ROWS {
            let rows = Fp8Rows { x: x.buf.ptr(), n, k_in, n_out, heads: 1, out: out.buf.ptr(), accumulate };
            return self.launch_fp8_rows(&rows, w.buf.ptr(), stored);
        }
        let scratch = self.dequant_scratch.lock().unwrap_or_else(|e| e.into_inner());
        let Some(values) = scratch.as_ref().map(|s| s.ptr()) else {
            return self.gpu.record(|| "stored matmul: no dequantization scratch (the weight was not loaded by keep_stored)".into());
        };
        let mut args = [w_ptr, scales, br, bc, Arg::I32(n_out as i32), Arg::I32(k_in as i32), Arg::Ptr(values)];
        self.kernel("dequant_fp8_bf16", stride_grid(n_out * k_in / 16), 256, 0, &mut args, None);
        let seg = Segment { w: values, bias: None, out: out.buf.ptr(), n_out, accumulate };
        let Some(eager) = self.matmul_gate("stored_matmul", n, &[x.buf.ptr(), values, seg.out]) else { return };
        let input = Input { x: x.buf.ptr(), rows: n, k_in, k_full: k_in };
        match residual {
            Some(trial) => self.matmuls.run_residual(&self.gpu, input, seg, trial.buf.ptr(), eager),
            None => self.matmuls.run(&self.gpu, input, seg, eager),
        }
    }

    /// Up to `KERNEL_ROWS` rows through kernels/gemv.cu's FP8 kernels, whose blocks are whole
    /// 64-column steps of one scale (`fp8_kernel_takes`), per head when `heads` > 1.
    pub(super) fn launch_fp8_rows(&self, r: &Fp8Rows, w: u64, stored: &StoredScales) {
        let StoredFormat::Fp8 { block: [br, bc] } = stored.format else {
            return self.gpu.record(|| "FP8 rows: the weight is not FP8".into());
        };
        let slices = fp8_slices(r.k_in);
        let groups = r.n.div_ceil(8).min(FP8_ENTRIES.len());
        let mut args = [
            Arg::Ptr(r.x),
            Arg::I32(r.n as i32),
            Arg::I32(r.k_in as i32),
            Arg::I32((r.k_in / slices) as i32),
            Arg::I32(slices as i32),
            Arg::I32(self.matmuls.x_parts()),
            Arg::Ptr(w),
            Arg::Ptr(stored.buf.ptr()),
            Arg::I32(br as i32),
            Arg::I32(bc as i32),
            Arg::Ptr(r.out),
            Arg::I32(r.n_out as i32),
            Arg::I32(r.heads as i32),
            Arg::I32(r.accumulate as i32),
        ];
        let grid = (r.n.div_ceil(8 * groups) as u32, (r.heads * r.n_out.div_ceil(FP8_ROWS_PER_BLOCK)) as u32);
        let (threads, shared) = (fp8_block_threads(slices), fp8_shared_bytes(slices, groups));
        self.kernel(FP8_ENTRIES[groups - 1], grid, threads, shared, &mut args, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DeepSeek-V3's dense FP8 shapes, as `linear_fp8` would split them if their blocks were
    /// narrower than the tensor cores' 64 columns: the wide ones a warp a row, kv_a_proj's 512
    /// latent and 64 rope rows 8 warps a row, q_a_proj 4, a shared expert's gate or up 2; a
    /// short K stops at the first cut into slices of under two 512-column spans.
    #[test]
    fn linear_splits_put_enough_warps_on_narrow_weights() {
        let cases = [((7168, 16384), 1), ((16384, 512), 1), ((2048, 7168), 2), ((1536, 7168), 4), ((512, 7168), 8), ((64, 7168), 8)];
        for ((n_out, k_in), splits) in cases {
            assert_eq!(linear_splits(n_out, k_in), splits, "[{n_out}, {k_in}]");
        }
        assert_eq!((linear_splits(64, 512), linear_splits(64, 1024), linear_splits(64, 2048)), (1, 2, 4));
    }

    /// The K cut of the DeepSeek-V3 family's widths: whole 64-column steps, at least two a
    /// slice where K has four, and the same cut whatever the row count (it takes K alone).
    #[test]
    fn fp8_slices_cut_k_into_whole_steps() {
        let cases = [(7168, 16), (1536, 8), (16384, 16), (18432, 16), (2048, 16), (512, 4), (256, 2), (128, 1), (2304, 4)];
        for (k, slices) in cases {
            assert_eq!(fp8_slices(k), slices, "K = {k}");
            assert_eq!((k % slices, (k / slices) % STEP_COLS), (0, 0), "K = {k}");
        }
    }

    /// A launch's partial sums fit the 48 KB of shared memory a launch gets without asking,
    /// and its blocks are whole warps.
    #[test]
    fn fp8_launches_fit_their_shared_memory() {
        assert_eq!(fp8_shared_bytes(MAX_SLICES, FP8_ENTRIES.len()), 32 * 1024);
        assert_eq!((fp8_block_threads(1), fp8_block_threads(4), fp8_block_threads(16)), (32, 128, 256));
        assert!(fp8_kernel_takes(128, 7168) && !fp8_kernel_takes(16, 512) && !fp8_kernel_takes(128, 192));
    }
}
