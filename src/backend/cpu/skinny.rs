//! `x · Wᵀ` for a few rows of `x` (decode, verify trees, draft levels) with AVX2 + FMA.
//!
//! A decode or verify step multiplies 1–16 token rows by each weight matrix, so the cost is
//! reading the weights once. `gemm` packs the weight matrix for every such call (measured
//! here: 8 rows cost 4× one row), so these shapes get a kernel that streams each weight row
//! from memory once and dots it with every token row while it sits in L1.

use std::arch::x86_64::*;

/// The most token rows one `block` call takes; `matmul` feeds larger batches 16 rows at a time.
pub const MAX_ROWS: usize = 16;

pub fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

#[target_feature(enable = "avx2,fma")]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

#[target_feature(enable = "avx2,fma")]
unsafe fn sum4(v: [__m256; 4]) -> f32 {
    hsum(_mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3])))
}

/// The scalar rest `Σ x[t]·w[t]` for `t` in `from..k`.
unsafe fn tail(x: *const f32, w: *const f32, from: usize, k: usize) -> f32 {
    (from..k).map(|t| *x.add(t) * *w.add(t)).sum()
}

/// Rows `c0 .. c0 + cols` of `w` against the first `n` rows of `x`, into columns
/// `c0 .. c0 + cols` of `out` (row stride `m`).
///
/// One weight row at a time (a single sequential stream, which the prefetcher follows best),
/// dotted with two token rows per pass, four independent accumulators each.
///
/// # Safety
/// AVX2 and FMA must be available (`available()`); `x` holds `n * k` values, `w` at least
/// `(c0 + cols) * k`, and `out` points at `n` rows of `m` values, of which this call writes
/// only columns `c0 .. c0 + cols`.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn block(x: &[f32], w: &[f32], n: usize, k: usize, m: usize, c0: usize, cols: usize, out: *mut f32) {
    let k32 = k / 32 * 32;
    let xp = x.as_ptr();
    for c in c0..c0 + cols {
        let wr = w.as_ptr().add(c * k);
        let mut r = 0;
        while r < n {
            let pair = n - r >= 2;
            let x0 = xp.add(r * k);
            let x1 = if pair { x0.add(k) } else { x0 };
            let mut a = [_mm256_setzero_ps(); 4];
            let mut b = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i < k32 {
                for j in 0..4 {
                    let wv = _mm256_loadu_ps(wr.add(i + 8 * j));
                    a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x0.add(i + 8 * j)), wv, a[j]);
                    if pair {
                        b[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x1.add(i + 8 * j)), wv, b[j]);
                    }
                }
                i += 32;
            }
            *out.add(r * m + c) = sum4(a) + tail(x0, wr, k32, k);
            if pair {
                *out.add((r + 1) * m + c) = sum4(b) + tail(x1, wr, k32, k);
            }
            r += if pair { 2 } else { 1 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_plain_product() {
        if !available() {
            eprintln!("AVX2/FMA absent: the skinny kernel is not used on this machine");
            return;
        }
        for (n, k, m) in [(1, 13, 7), (3, 64, 9), (5, 70, 33), (16, 8, 4)] {
            let x: Vec<f32> = (0..n * k).map(|i| ((i * 31 % 17) as f32 - 8.0) / 5.0).collect();
            let w: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 4.0).collect();
            let mut out = vec![f32::NAN; n * m];
            // Two blocks, as two tasks would split it.
            let half = m / 2;
            unsafe {
                block(&x, &w, n, k, m, 0, half, out.as_mut_ptr());
                block(&x, &w, n, k, m, half, m - half, out.as_mut_ptr());
            }
            for r in 0..n {
                for c in 0..m {
                    let want: f32 = (0..k).map(|i| x[r * k + i] * w[c * k + i]).sum();
                    let got = out[r * m + c];
                    assert!((got - want).abs() <= 1e-3 * (1.0 + want.abs()), "({n},{k},{m}) [{r}][{c}]: {got} vs {want}");
                }
            }
        }
    }
}
