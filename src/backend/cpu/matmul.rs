//! `x · Wᵀ` on the CPU, split over rayon threads by output columns, so every core streams its
//! own slice of the weight (a decode step is bound by reading the weights).
//!
//! Each slice is computed by the `skinny` AVX2 kernel, 16 token rows at a time, where AVX2 is
//! there, else by `gemm` (packed SIMD microkernels). The skinny kernel computes every row
//! alone, so a row's result does not depend on how many rows share the call: a request's
//! tokens are the same alone or in a batch (`engine::scheduler`), and a prompt prefilled in
//! chunks the same as in one forward.

use gemm::Parallelism;
use rayon::prelude::*;

/// Columns per task are a multiple of this, so SIMD lanes stay full.
const COLUMN_ALIGN: usize = 16;
/// Work items per thread: enough to even out uneven progress, few enough to keep overhead low.
const TASKS_PER_THREAD: usize = 4;

/// A raw output pointer handed to parallel tasks that write disjoint column ranges.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint column ranges of the output (see `matmul`).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Through a method, so closures capture the `Send` wrapper rather than its raw field.
    fn get(self) -> *mut f32 {
        self.0
    }
}

fn skinny_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return super::skinny::available();
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// `out[r][c] = Σ_k x[r][k] · w[c][k] (+ bias[c])` for `r < n`, with `x` `[n, k]`, `w` `[m, k]`
/// and `out` `[n, m]`, all row-major.
pub fn matmul(x: &[f32], w: &[f32], bias: Option<&[f32]>, n: usize, k: usize, m: usize, out: &mut [f32]) {
    assert!(x.len() >= n * k && w.len() == m * k && out.len() >= n * m, "matmul shapes");
    if n == 0 || m == 0 {
        return;
    }
    // Small products run whole on this thread; rayon's dispatch would cost more.
    let parallel = n * k * m >= super::par::PARALLEL_MIN * 4;
    let threads = if parallel { rayon::current_num_threads().max(1) } else { 1 };
    let per_task = if parallel { m.div_ceil(threads * TASKS_PER_THREAD).next_multiple_of(COLUMN_ALIGN).min(m) } else { m };
    let tasks = m.div_ceil(per_task);
    let dst = OutPtr(out.as_mut_ptr());
    let skinny = skinny_available();
    let task = |t: usize| {
        let col0 = t * per_task;
        let cols = per_task.min(m - col0);
        // SAFETY: `x`, `w` and `out` are large enough (asserted above); this task reads rows
        // `col0..col0+cols` of `w` and writes only columns `col0..col0+cols` of `out`, which no
        // other task touches; the skinny kernel runs only where AVX2 and FMA were detected.
        #[cfg(target_arch = "x86_64")]
        if skinny {
            for r0 in (0..n).step_by(super::skinny::MAX_ROWS) {
                let rows = super::skinny::MAX_ROWS.min(n - r0);
                unsafe { super::skinny::block(&x[r0 * k..], w, rows, k, m, col0, cols, dst.get().add(r0 * m)) };
            }
            return;
        }
        unsafe {
            gemm::gemm(
                n,
                cols,
                k,
                dst.get().add(col0),
                1,
                m as isize,
                false,
                x.as_ptr(),
                1,
                k as isize,
                w.as_ptr().add(col0 * k),
                k as isize,
                1,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
    };
    if parallel {
        (0..tasks).into_par_iter().for_each(task);
    } else {
        (0..tasks).for_each(task);
    }
    if let Some(b) = bias {
        out[..n * m].chunks_mut(m).for_each(|row| row.iter_mut().zip(b).for_each(|(o, b)| *o += b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(x: &[f32], w: &[f32], n: usize, k: usize, m: usize) -> Vec<f32> {
        let mut out = vec![0.0; n * m];
        for r in 0..n {
            for c in 0..m {
                out[r * m + c] = (0..k).map(|i| x[r * k + i] as f64 * w[c * k + i] as f64).sum::<f64>() as f32;
            }
        }
        out
    }

    #[test]
    fn matches_a_plain_product_for_odd_shapes() {
        // On AVX2 machines 16 rows at a time through the skinny kernel, else gemm.
        for (n, k, m) in [(1, 7, 5), (1, 576, 1537), (3, 64, 17), (9, 33, 130), (20, 40, 70), (130, 64, 300)] {
            let x: Vec<f32> = (0..n * k).map(|i| ((i * 37 % 11) as f32 - 5.0) / 7.0).collect();
            let w: Vec<f32> = (0..m * k).map(|i| ((i * 13 % 17) as f32 - 8.0) / 9.0).collect();
            let bias: Vec<f32> = (0..m).map(|i| i as f32 * 0.5).collect();
            let mut out = vec![f32::NAN; n * m];
            matmul(&x, &w, Some(&bias), n, k, m, &mut out);
            let want = reference(&x, &w, n, k, m);
            for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                let b = b + bias[i % m];
                assert!((a - b).abs() <= 1e-3 * (1.0 + b.abs()), "({n},{k},{m}) at {i}: {a} vs {b}");
            }
        }
    }

    /// A row's result is the same bits whatever rows share the call (the scheduler's
    /// alone-vs-batched guarantee rests on it).
    #[test]
    fn a_row_does_not_depend_on_the_rows_beside_it() {
        let (n, k, m) = (40, 96, 70);
        let x: Vec<f32> = (0..n * k).map(|i| ((i * 29 % 23) as f32 - 11.0) / 13.0).collect();
        let w: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 19) as f32 - 9.0) / 10.0).collect();
        let mut all = vec![0.0; n * m];
        matmul(&x, &w, None, n, k, m, &mut all);
        for r in [0, 15, 16, 17, 39] {
            let mut one = vec![0.0; m];
            matmul(&x[r * k..(r + 1) * k], &w, None, 1, k, m, &mut one);
            assert_eq!(
                one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                all[r * m..][..m].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "row {r}"
            );
        }
    }
}
