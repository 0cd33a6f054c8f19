//! `out = x · Wᵀ (+ bias)` with f32 activations and bf16 weights in the `[out, in]` layout.
//!
//! Two ways to do it: the skinny kernels of `kernels/gemv.cu` for up to 8 rows (decode and
//! verify steps, where the cost is reading W once) and cuBLAS `cublasGemmEx` (bf16 inputs,
//! f32 accumulation and output, after converting x to bf16) for more. The choice depends
//! only on the row count, and the skinny kernels compute each row the same way whatever
//! the count or configuration, so a verify step's rows equal the decode steps they stand
//! for, bit for bit (speculative greedy output then equals target-only output).
//!
//! The skinny kernels come in configurations (weight rows per warp task, column steps in
//! flight); which is fastest depends on the shape and the GPU, so the first eager run of
//! each shape times the candidates for its row count and keeps the fastest. All of them
//! give identical results, so the choice only moves time. One launch can also multiply
//! the same x by up to three matrices (q, k, v) or fuse gate, up and SiLU.

use std::collections::HashMap;
use std::sync::Mutex;

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t};
use half::bf16;

use super::gpu::{stride_grid, Arg, DeviceBuf, Gpu, NULL};

/// Rows up to which the skinny kernels are used.
pub const GEMV_MAX_ROWS: usize = 8;
/// Threads per block of the skinny kernels (`GEMV_THREADS` in kernels/gemv.cu).
const GEMV_THREADS: u32 = 256;
const GEMV_WARPS: usize = GEMV_THREADS as usize / 32;
/// Matrices one plain skinny launch multiplies (`gemv_segments` in kernels/gemv.cu).
const SEGMENTS_PER_LAUNCH: usize = 3;

/// One compiled configuration of the skinny kernels (a `GEMV_ENTRY` line of gemv.cu).
#[derive(Debug, PartialEq, Eq)]
pub struct GemvConfig {
    /// Most rows of x it takes; fewer are fine.
    pub max_rows: usize,
    /// Weight rows per warp task (gate-up: half of them gate, half up).
    pub rows_per_task: usize,
    /// 256-column steps whose loads are issued together.
    pub steps: usize,
    pub plain: &'static str,
    pub gate_up: &'static str,
}

macro_rules! gemv_configs {
    ($(($m:literal, $r:literal, $u:literal)),* $(,)?) => {
        pub const GEMV_CONFIGS: &[GemvConfig] = &[$(GemvConfig {
            max_rows: $m,
            rows_per_task: $r,
            steps: $u,
            plain: concat!("gemv_m", $m, "_r", $r, "_u", $u),
            gate_up: concat!("gemv_gate_up_m", $m, "_r", $r, "_u", $u),
        }),*];
    };
}

// Keep in step with the GEMV_ENTRY lines of kernels/gemv.cu (a test checks).
gemv_configs!((1, 4, 4), (1, 2, 8), (2, 4, 4), (2, 2, 8), (4, 4, 2), (4, 2, 4), (8, 4, 2), (8, 2, 4));

/// The configurations that take `rows` rows with the fewest wasted: those compiled for the
/// smallest sufficient `max_rows`.
pub fn candidates(rows: usize) -> impl Iterator<Item = &'static GemvConfig> {
    let fit = GEMV_CONFIGS.iter().map(|c| c.max_rows).filter(|&m| m >= rows).min();
    GEMV_CONFIGS.iter().filter(move |c| Some(c.max_rows) == fit)
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
}

/// The shared operand of a launch: `rows` rows of `k_in` f32 at `x`.
#[derive(Clone, Copy, Debug)]
pub struct Input {
    pub x: u64,
    pub rows: usize,
    pub k_in: usize,
}

/// What one skinny launch computes.
#[derive(Clone, Copy, Debug)]
pub enum GemvJob<'a> {
    Segments(&'a [Segment]),
    /// `act = silu(x·gateᵀ) * (x·upᵀ)`, all three `[rows, n_out]`.
    GateUp { gate: u64, up: u64, act: u64, n_out: usize },
}

impl GemvJob<'_> {
    fn n_total(&self) -> usize {
        match self {
            GemvJob::Segments(s) => s.iter().map(|s| s.n_out).sum(),
            GemvJob::GateUp { n_out, .. } => *n_out,
        }
    }

    fn weights(&self) -> Vec<u64> {
        match self {
            GemvJob::Segments(s) => s.iter().map(|s| s.w).collect(),
            GemvJob::GateUp { gate, up, .. } => vec![*gate, *up],
        }
    }
}

impl Input {
    /// The skinny kernels need 16-byte aligned rows of x and W.
    fn gemv_ok(&self, weights: &[u64]) -> bool {
        self.rows <= GEMV_MAX_ROWS && self.k_in % 8 == 0 && self.x % 16 == 0 && weights.iter().all(|w| w % 16 == 0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ShapeKey {
    gate_up: bool,
    max_rows: usize,
    n_total: usize,
    k_in: usize,
}

#[derive(Default)]
pub struct Matmuls {
    /// The bf16 copy of x that cuBLAS reads; grown on demand.
    scratch: Mutex<Option<DeviceBuf<bf16>>>,
    /// The skinny configuration chosen for each shape.
    chosen: Mutex<HashMap<ShapeKey, &'static GemvConfig>>,
    /// Resident blocks per SM of each skinny kernel, from the driver.
    blocks_per_sm: Mutex<HashMap<&'static str, u32>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Matmuls {
    /// `seg.out = x · seg.wᵀ (+ bias)`. `eager` says the stream is not being captured, so a
    /// new shape may be timed.
    pub fn run(&self, gpu: &Gpu, input: Input, seg: Segment, eager: bool) {
        self.run_many(gpu, input, &[seg], eager);
    }

    /// The same x times each matrix: one skinny launch per three matrices, or cuBLAS.
    pub fn run_many(&self, gpu: &Gpu, input: Input, segs: &[Segment], eager: bool) {
        if input.rows == 0 || segs.is_empty() {
            return;
        }
        if !input.gemv_ok(&segs.iter().map(|s| s.w).collect::<Vec<_>>()) {
            return segs.iter().for_each(|s| self.cublas(gpu, input, *s));
        }
        for chunk in segs.chunks(SEGMENTS_PER_LAUNCH) {
            self.gemv(gpu, input, GemvJob::Segments(chunk), eager);
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
        if input.gemv_ok(&job.weights()) {
            return self.gemv(gpu, input, job, eager);
        }
        self.cublas(gpu, input, Segment { w: gate, bias: None, out: bufs.0, n_out });
        self.cublas(gpu, input, Segment { w: up, bias: None, out: bufs.1, n_out });
        let len = input.rows * n_out;
        gpu.launch("silu_mul_f32", stride_grid(len), 256, 0, &[Arg::Ptr(bufs.0), Arg::Ptr(bufs.1), Arg::Ptr(act), Arg::I64(len as i64)]);
    }

    /// One path regardless of the rules (the self-test times each).
    pub fn run_path(&self, gpu: &Gpu, input: Input, job: GemvJob<'_>, path: MatmulPath) {
        match (path, job) {
            (MatmulPath::Gemv(config), job) => {
                self.launch(gpu, config, input, job);
            }
            (MatmulPath::Cublas, GemvJob::Segments(segs)) => segs.iter().for_each(|s| self.cublas(gpu, input, *s)),
            (MatmulPath::Cublas, GemvJob::GateUp { .. }) => gpu.record(|| "cuBLAS has no fused gate-up path".into()),
        }
    }

    /// The configuration this shape uses: the one chosen before, else (when the stream
    /// is not capturing) the fastest candidate timed now, else the first candidate.
    pub fn config_for(&self, gpu: &Gpu, input: Input, job: GemvJob<'_>, eager: bool) -> &'static GemvConfig {
        let list: Vec<&'static GemvConfig> = candidates(input.rows).collect();
        let key = ShapeKey {
            gate_up: matches!(job, GemvJob::GateUp { .. }),
            max_rows: list[0].max_rows,
            n_total: job.n_total(),
            k_in: input.k_in,
        };
        if let Some(c) = locked(&self.chosen).get(&key) {
            return c;
        }
        if !eager || list.len() == 1 {
            return list[0];
        }
        let timed: Vec<(f64, &'static GemvConfig)> = list
            .iter()
            .filter_map(|&c| {
                // A configuration that fails to launch (too many resources, say) is out.
                let mut launched = true;
                let ms = gpu.elapsed_ms(3, || launched &= self.launch(gpu, c, input, job)).ok()?;
                launched.then_some((ms, c))
            })
            .collect();
        let best = timed.iter().min_by(|a, b| a.0.total_cmp(&b.0)).map_or(list[0], |t| t.1);
        locked(&self.chosen).insert(key, best);
        best
    }

    fn gemv(&self, gpu: &Gpu, input: Input, job: GemvJob<'_>, eager: bool) {
        let config = self.config_for(gpu, input, job, eager);
        self.launch(gpu, config, input, job);
    }

    /// Blocks for a persistent grid: enough for every task, at most what fits on the GPU.
    fn grid(&self, gpu: &Gpu, kernel: &'static str, tasks: usize) -> u32 {
        let per_sm = *locked(&self.blocks_per_sm).entry(kernel).or_insert_with(|| {
            gpu.function(kernel)
                .and_then(|f| f.occupancy_max_active_blocks_per_multiprocessor(GEMV_THREADS, 0, None).ok())
                .unwrap_or(1)
                .max(1)
        });
        tasks.div_ceil(GEMV_WARPS).min((gpu.sm_count * per_sm) as usize).max(1) as u32
    }

    /// Launch one skinny kernel; `false` when the launch failed (recorded for the next sync).
    fn launch(&self, gpu: &Gpu, config: &'static GemvConfig, input: Input, job: GemvJob<'_>) -> bool {
        let head = [Arg::Ptr(input.x), Arg::I32(input.rows as i32), Arg::I32(input.k_in as i32)];
        match job {
            GemvJob::Segments(segs) => {
                let tasks: usize = segs.iter().map(|s| s.n_out.div_ceil(config.rows_per_task)).sum();
                let mut args = [NULL; 15];
                args[..3].copy_from_slice(&head);
                for i in 0..SEGMENTS_PER_LAUNCH {
                    let s = segs.get(i);
                    args[3 + 4 * i] = Arg::Ptr(s.map_or(0, |s| s.w));
                    args[4 + 4 * i] = s.and_then(|s| s.bias).map_or(NULL, Arg::Ptr);
                    args[5 + 4 * i] = Arg::Ptr(s.map_or(0, |s| s.out));
                    args[6 + 4 * i] = Arg::I32(s.map_or(0, |s| s.n_out as i32));
                }
                gpu.launch(config.plain, (self.grid(gpu, config.plain, tasks), 1), GEMV_THREADS, 0, &args)
            }
            GemvJob::GateUp { gate, up, act, n_out } => {
                let tasks = n_out.div_ceil(config.rows_per_task / 2);
                let args = [head[0], head[1], head[2], Arg::Ptr(gate), Arg::Ptr(up), Arg::Ptr(act), Arg::I32(n_out as i32)];
                gpu.launch(config.gate_up, (self.grid(gpu, config.gate_up, tasks), 1), GEMV_THREADS, 0, &args)
            }
        }
    }

    fn cublas(&self, gpu: &Gpu, input: Input, seg: Segment) {
        let Input { x, rows, k_in } = input;
        let len = rows * k_in;
        let mut scratch = locked(&self.scratch);
        if scratch.as_ref().is_none_or(|s| s.len() < len) {
            *scratch = None; // free the old one first
            match gpu.alloc::<bf16>(len.next_power_of_two(), "matmul input (bf16)") {
                Ok(b) => *scratch = Some(b),
                Err(e) => return gpu.record(|| e.to_string()),
            }
        }
        let xb = scratch.as_ref().expect("allocated above").ptr();
        gpu.bind();
        gpu.launch("f32_to_bf16", stride_grid(len), 256, 0, &[Arg::Ptr(x), Arg::Ptr(xb), Arg::I64(len as i64)]);
        let (alpha, beta) = (1.0f32, 0.0f32);
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

    /// Every row count up to 8 has candidates, all taking at least that many rows, and the
    /// smallest sufficient kernel (1 row: the m1 kernels only, not the m8 ones).
    #[test]
    fn candidates_take_the_rows_with_the_smallest_kernel() {
        for rows in 1..=GEMV_MAX_ROWS {
            let list: Vec<_> = candidates(rows).collect();
            assert!(list.len() >= 2, "{rows}: {list:?}");
            assert!(list.iter().all(|c| c.max_rows >= rows && c.max_rows == list[0].max_rows));
        }
        assert_eq!(candidates(1).map(|c| c.plain).collect::<Vec<_>>(), ["gemv_m1_r4_u4", "gemv_m1_r2_u8"]);
        assert_eq!(candidates(5).map(|c| c.max_rows).collect::<Vec<_>>(), [8, 8]);
        assert_eq!(candidates(9).count(), 0);
    }

    /// The table matches the GEMV_ENTRY lines of kernels/gemv.cu, and gate-up tasks split
    /// evenly into gate and up rows.
    #[test]
    fn configs_match_the_kernel_file() {
        let text = include_str!("../../../kernels/gemv.cu");
        let re = regex::Regex::new(r"(?m)^GEMV_ENTRY\((\d+), (\d+), (\d+)\)$").unwrap();
        let in_file: Vec<(usize, usize, usize)> =
            re.captures_iter(text).map(|c| (c[1].parse().unwrap(), c[2].parse().unwrap(), c[3].parse().unwrap())).collect();
        let in_table: Vec<(usize, usize, usize)> = GEMV_CONFIGS.iter().map(|c| (c.max_rows, c.rows_per_task, c.steps)).collect();
        assert_eq!(in_file, in_table);
        assert!(GEMV_CONFIGS.iter().all(|c| c.rows_per_task % 2 == 0));
        assert_eq!(GEMV_CONFIGS[0].gate_up, "gemv_gate_up_m1_r4_u4");
    }

    #[test]
    fn the_skinny_path_needs_aligned_rows_and_few_of_them() {
        let ok = Input { x: 0x1000, rows: 8, k_in: 4096 };
        assert!(ok.gemv_ok(&[0x2000, 0x3000]));
        assert!(!Input { rows: 9, ..ok }.gemv_ok(&[0x2000]));
        assert!(!Input { k_in: 4100, ..ok }.gemv_ok(&[0x2000]));
        assert!(!Input { x: 0x1004, ..ok }.gemv_ok(&[0x2000]));
        assert!(!ok.gemv_ok(&[0x2000, 0x3008]));
    }
}
