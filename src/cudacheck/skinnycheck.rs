//! The skinny matmuls' promises, checked bit for bit on the GPU (`cuda-check`, gemm
//! section): an output row is the same whatever the row count (1 to 8) and configuration,
//! for plain, gate-up and rope (q/k/v with RoPE and the cache write) launches, and in a
//! launch of more rows in groups of 8 (deterministic mode) as in its group's own; a 2-way
//! row-parallel split of K, its two halves added as the all-reduce adds them, equals the
//! single-GPU result; a launch that adds into its output adds exactly its product; and the
//! values agree with an f64 reference on the host.

use half::bf16;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use crate::backend::cuda::gemm::{GemvConfig, GemvJob, Input, MatmulPath, RopeStore, Segment, GEMV_CONFIGS, GEMV_MAX_ROWS};
use crate::backend::cuda::gpu::DeviceBuf;
use crate::backend::cuda::CudaBackend;

/// What the check found.
pub struct SkinnyBits {
    /// Every (configuration, row count) gave the reference's bits, plain and gate-up.
    pub rows_and_configs_equal: bool,
    /// The two K halves, added in f32, gave the whole-K bits.
    pub split_sum_equal: bool,
    /// Adding into an output that holds the product gave twice the product's bits.
    pub accumulate_equal: bool,
    /// Relative error of the whole-K result against an f64 host reference.
    pub rel_err: f64,
    pub detail: Value,
}

/// The down-projection width of Qwen2.5-1.5B (32 slices of 280, each ending 24 columns into
/// a 32-column step; two per warp) and 272 outputs: 17 tiles of 16 rows, so the 32-row
/// configurations end on a half-empty tile.
pub const K: usize = 8960;
const N_OUT: usize = 272;
/// Rows of the grouped check: groups of 8, 8 and 5.
const GROUPED_ROWS: usize = 21;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Columns `cols` of every row of a row-major `[rows, K]` matrix.
fn columns<T: Copy>(m: &[T], rows: usize, cols: std::ops::Range<usize>) -> Vec<T> {
    (0..rows).flat_map(|r| m[r * K + cols.start..r * K + cols.end].iter().copied()).collect()
}

/// Widths of the rope check: q, k and v each 2 heads of 32 (the first 192 rows of W).
const ROPE_HEAD_DIM: usize = 32;
const ROPE_WIDTH: usize = 2 * ROPE_HEAD_DIM;

/// A rope launch of `rows` rows in a configuration: q's rows, then the k and v rows it wrote
/// into the caches (from slot 3), at positions 5, 6, ... (NeoX tables of a made-up base).
fn rope_launcher<'a>(
    backend: &'a CudaBackend,
    w: &'a DeviceBuf<bf16>,
    x: &'a DeviceBuf<f32>,
) -> anyhow::Result<impl Fn(&'static GemvConfig, usize) -> anyhow::Result<Vec<f32>> + 'a> {
    let gpu = backend.gpu();
    let half = ROPE_HEAD_DIM / 2;
    let positions = 16;
    let angle = |i: usize| (i / half) as f32 * 0.5f32.powf((i % half) as f32 / half as f32);
    let cos = gpu.alloc_from(&(0..positions * half).map(|i| angle(i).cos()).collect::<Vec<_>>(), "rope check cos")?;
    let sin = gpu.alloc_from(&(0..positions * half).map(|i| angle(i).sin()).collect::<Vec<_>>(), "rope check sin")?;
    let pos = gpu.alloc_from(&(5..5 + GEMV_MAX_ROWS as i32).collect::<Vec<_>>(), "rope check positions")?;
    let q = gpu.alloc::<f32>(GEMV_MAX_ROWS * ROPE_WIDTH, "rope check q")?;
    let caches =
        [gpu.alloc::<f32>(positions * ROPE_WIDTH, "rope check k cache")?, gpu.alloc::<f32>(positions * ROPE_WIDTH, "rope check v cache")?];
    let slot = 3;
    Ok(move |config: &'static GemvConfig, rows: usize| -> anyhow::Result<Vec<f32>> {
        let seg = |i: usize, out: u64| Segment { w: w.ptr_at(i * ROPE_WIDTH * K), bias: None, out, n_out: ROPE_WIDTH, accumulate: false };
        let segs = [seg(0, q.ptr()), seg(1, 0), seg(2, 0)];
        let store = RopeStore {
            cos: cos.ptr(),
            sin: sin.ptr(),
            positions: pos.ptr(),
            head_dim: ROPE_HEAD_DIM,
            interleaved: false,
            k_cache: caches[0].ptr(),
            v_cache: caches[1].ptr(),
            slot,
            slot_dev: 0,
        };
        let input = Input { x: x.ptr(), rows, k_in: K, k_full: K };
        backend.matmuls.run_path(gpu, input, GemvJob::QkvRope(&segs, store), MatmulPath::Gemv(config));
        let mut out = gpu.download(&q, 0, rows * ROPE_WIDTH)?;
        for cache in &caches {
            out.extend(gpu.download(cache, slot * ROPE_WIDTH, rows * ROPE_WIDTH)?);
        }
        Ok(out)
    })
}

pub fn skinny_bits(backend: &CudaBackend) -> anyhow::Result<SkinnyBits> {
    let gpu = backend.gpu();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let w_host: Vec<bf16> = (0..N_OUT * K).map(|_| bf16::from_f32(rng.random_range(-0.05f32..0.05))).collect();
    let x_host: Vec<f32> = (0..GROUPED_ROWS * K).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let (w, x) = (gpu.alloc_from(&w_host, "skinny check weights")?, gpu.alloc_from(&x_host, "skinny check input")?);
    let y = gpu.alloc::<f32>(GROUPED_ROWS * N_OUT, "skinny check output")?;
    let launch = |config: &'static GemvConfig, gate_up: bool, rows: usize, x: u64, w: &DeviceBuf<bf16>, k_in: usize, accumulate: bool| {
        let input = Input { x, rows, k_in, k_full: K };
        let n_out = if gate_up { N_OUT / 2 } else { N_OUT };
        let seg = [Segment { w: w.ptr(), bias: None, out: y.ptr(), n_out, accumulate }];
        // Gate-up: the first half of W's rows are the gate, the second half the up rows.
        let job = if gate_up {
            GemvJob::GateUp { gate: w.ptr(), up: w.ptr_at(n_out * k_in), act: y.ptr(), n_out }
        } else {
            GemvJob::Segments(&seg)
        };
        backend.matmuls.run_path(gpu, input, job, MatmulPath::Gemv(config));
        gpu.download(&y, 0, rows * n_out)
    };
    let run = |config, gate_up, rows, x: u64, w: &DeviceBuf<bf16>, k_in| launch(config, gate_up, rows, x, w, k_in, false);

    let rope = rope_launcher(backend, &w, &x)?;
    let rope_reference = bits(&rope(&GEMV_CONFIGS[0], GEMV_MAX_ROWS)?);
    let mut mismatches = Vec::new();
    for config in GEMV_CONFIGS {
        for rows in 1..=GEMV_MAX_ROWS {
            let got = bits(&rope(config, rows)?);
            // q, k and v each hold `rows` rows of ROPE_WIDTH; the reference's hold 8.
            let differs = |part: usize| {
                got[part * rows * ROPE_WIDTH..][..rows * ROPE_WIDTH]
                    != rope_reference[part * GEMV_MAX_ROWS * ROPE_WIDTH..][..rows * ROPE_WIDTH]
            };
            if (0..3).any(differs) {
                mismatches.push(format!("rope {} rows {rows}", config.plain));
            }
        }
    }
    for gate_up in [false, true] {
        let kind = if gate_up { "gate-up " } else { "" };
        let reference = bits(&run(&GEMV_CONFIGS[0], gate_up, GEMV_MAX_ROWS, x.ptr(), &w, K)?);
        for config in GEMV_CONFIGS {
            for rows in 1..=GEMV_MAX_ROWS {
                let got = bits(&run(config, gate_up, rows, x.ptr(), &w, K)?);
                if got[..] != reference[..got.len()] {
                    mismatches.push(format!("{kind}{} rows {rows}", config.plain));
                }
            }
        }
        // Each group of a grouped launch, against an 8-row (or 5-row) launch of its rows.
        let mut groups = Vec::new();
        for first in (0..GROUPED_ROWS).step_by(GEMV_MAX_ROWS) {
            let rows = GEMV_MAX_ROWS.min(GROUPED_ROWS - first);
            groups.extend(bits(&run(&GEMV_CONFIGS[0], gate_up, rows, x.ptr_at(first * K), &w, K)?));
        }
        for config in GEMV_CONFIGS {
            if bits(&run(config, gate_up, GROUPED_ROWS, x.ptr(), &w, K)?) != groups {
                mismatches.push(format!("{kind}{} rows {GROUPED_ROWS} in groups of {GEMV_MAX_ROWS}", config.plain));
            }
        }
    }

    let whole = run(&GEMV_CONFIGS[0], false, GEMV_MAX_ROWS, x.ptr(), &w, K)?;
    // `y` holds `whole` now: adding the product again doubles it, exactly.
    let doubled = launch(&GEMV_CONFIGS[0], false, GEMV_MAX_ROWS, x.ptr(), &w, K, true)?;
    let accumulate_equal = bits(&doubled) == bits(&whole.iter().map(|v| v + v).collect::<Vec<_>>());
    let half = K / 2;
    let part = |cols: std::ops::Range<usize>| -> anyhow::Result<Vec<f32>> {
        let w = gpu.alloc_from(&columns(&w_host, N_OUT, cols.clone()), "skinny check weights")?;
        let x = gpu.alloc_from(&columns(&x_host, GEMV_MAX_ROWS, cols), "skinny check input")?;
        Ok(run(&GEMV_CONFIGS[0], false, GEMV_MAX_ROWS, x.ptr(), &w, half)?)
    };
    let (first, second) = (part(0..half)?, part(half..K)?);
    let summed: Vec<f32> = first.iter().zip(&second).map(|(a, b)| a + b).collect();
    let split_sum_equal = bits(&summed) == bits(&whole);

    let (mut num, mut den) = (0.0f64, 0.0f64);
    for m in 0..GEMV_MAX_ROWS {
        for n in 0..N_OUT {
            let exact: f64 = (0..K).map(|k| x_host[m * K + k] as f64 * w_host[n * K + k].to_f64()).sum();
            num += (whole[m * N_OUT + n] as f64 - exact).powi(2);
            den += exact * exact;
        }
    }
    let rel_err = (num / den.max(f64::MIN_POSITIVE)).sqrt();
    gpu.take_error()?;
    Ok(SkinnyBits {
        rows_and_configs_equal: mismatches.is_empty(),
        split_sum_equal,
        accumulate_equal,
        rel_err,
        detail: json!({ "k": K, "n_out": N_OUT, "mismatches": mismatches, "split_sum_equal": split_sum_equal, "accumulate_equal": accumulate_equal,
                        "rel_err_vs_f64": rel_err }),
    })
}
