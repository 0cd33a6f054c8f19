//! Attention over a KV cache on the CPU: one task per (query, head), GQA by head groups.

use super::par;
use crate::backend::{AttnGeometry, AttnWindow};

/// Which region slots query `i` sees.
pub enum RegionMask<'a> {
    Causal,
    /// Row-major `[queries, region]`, nonzero = visible.
    Explicit(&'a [i32]),
}

impl RegionMask<'_> {
    fn visible(&self, w: &AttnWindow, query: usize, slot: usize) -> bool {
        match self {
            RegionMask::Causal => slot <= w.region - w.queries + query,
            RegionMask::Explicit(m) => m[query * w.region + slot] != 0,
        }
    }
}

/// Dot product with independent partial sums, so the compiler can vectorise it.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `out[q][h]` = softmax over visible slots of `scale · q·k` applied to `v`. Window slot `i`
/// is row `rows[i]` of `k` and `v` with a paged cache's slot list, else row `i`.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &AttnGeometry,
    w: AttnWindow,
    mask: RegionMask<'_>,
    rows: Option<&[usize]>,
    out: &mut [f32],
) {
    let row = |slot: usize| rows.map_or(slot, |r| r[slot]);
    let hd = g.head_dim;
    let group = g.heads / g.kv_heads;
    let q_width = g.heads * hd;
    let kv_width = g.kv_heads * hd;
    let slots = w.prefix + w.region;
    let work = w.queries * q_width * slots;
    par::chunks(&mut out[..w.queries * q_width], hd, work, |task, out_head| {
        let (query, head) = (task / g.heads, task % g.heads);
        let kv_off = (head / group) * hd;
        let q_head = &q[query * q_width + head * hd..][..hd];
        let mut scores: Vec<(usize, f32)> = Vec::with_capacity(slots);
        let mut max = f32::NEG_INFINITY;
        for slot in 0..slots {
            if slot >= w.prefix && !mask.visible(&w, query, slot - w.prefix) {
                continue;
            }
            let s = g.scale * dot(q_head, &k[row(slot) * kv_width + kv_off..][..hd]);
            max = max.max(s);
            scores.push((slot, s));
        }
        out_head.fill(0.0);
        let mut total = 0.0f32;
        for (slot, s) in &scores {
            let p = (s - max).exp();
            total += p;
            let v_head = &v[row(*slot) * kv_width + kv_off..][..hd];
            out_head.iter_mut().zip(v_head).for_each(|(o, x)| *o += p * x);
        }
        if total > 0.0 {
            out_head.iter_mut().for_each(|o| *o /= total);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_mask_hides_slots_and_groups_share_kv() {
        // 2 query heads over 1 kv head, head_dim 2; slot 0 committed, region of 2 slots.
        let g = AttnGeometry { heads: 2, kv_heads: 1, head_dim: 2, scale: 1.0 };
        let k = vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let v = vec![1.0, 0.0, 0.0, 1.0, 5.0, 5.0];
        let q = vec![1.0, 1.0, 2.0, 2.0];
        let w = AttnWindow { prefix: 1, region: 2, queries: 1 };
        let mut out = vec![9.0; 4];
        // The query sees slot 0 and region slot 1 (= slot 2), not region slot 0.
        attention(&q, &k, &v, &g, w, RegionMask::Explicit(&[0, 1]), None, &mut out);
        assert_eq!(out, vec![3.0, 2.5, 3.0, 2.5]);
        // Causal: the last query sees everything.
        attention(&q, &k, &v, &g, w, RegionMask::Causal, None, &mut out);
        assert_eq!(out, vec![2.0, 2.0, 2.0, 2.0]);
        // The same window through a slot list that reverses the rows: slot 0 is row 2.
        let (k_rev, v_rev) = (k.clone(), vec![5.0, 5.0, 0.0, 1.0, 1.0, 0.0]);
        attention(&q, &k_rev, &v_rev, &g, w, RegionMask::Explicit(&[0, 1]), Some(&[2, 1, 0]), &mut out);
        assert_eq!(out, vec![3.0, 2.5, 3.0, 2.5]);
    }
}
