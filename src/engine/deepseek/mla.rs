//! Multi-head Latent Attention as DeepSeek-V3 computes it, written out plainly.
//!
//! Per token: q from `q_proj`, or from `q_b_proj(q_a_layernorm(q_a_proj(x)))` with a q LoRA;
//! `kv_a_proj_with_mqa(x)` gives the latent `c` (`kv_lora_rank`, then `kv_a_layernorm`) and
//! one rope key `k_pe` (`qk_rope_head_dim`) all heads share. The cache keeps `[c; k_pe]`, the
//! latent, per token. Each head's q is `[q_nope; q_pe]`; `kv_b_proj` maps `c` to each head's
//! `k_nope` and `v`. The rope part is rotated in pairs `(2i, 2i+1)`, as the original
//! checkpoints are laid out (transformers de-interleaves, `rope_interleave`, which rotates the
//! same pairs); cos and sin carry YaRN's mscale, and the softmax scale its `mscale_all_dim`.
//!
//! Two ways to the same scores, `scale · (q_nope·k_nope + q_pe·k_pe)`:
//! - decompressed: `k_nope` and `v` of every visible slot through `kv_b_proj` (a prefill,
//!   where the forward's own tokens are most of the slots it reads);
//! - absorbed: `kv_b_proj`'s key half folded into the query (`q_nope·W_ukᵀ`, a latent-wide
//!   query) and its value half applied once to the attention-weighted latent, so a decode or
//!   verify step reads the cache as it is, with no decompression.

use std::ops::Range;

use crate::backend::{AttnWindow, Backend, BackendError};
use crate::engine::deepseek::host::{rms_norm, Linear};
use crate::engine::weights::Loader;
use crate::model::deepseek::DeepseekConfig;

pub(crate) enum QProj {
    Full(Linear),
    Lora { a: Linear, norm: Vec<f32>, b: Linear },
}

pub(crate) struct Mla {
    pub q: QProj,
    pub kv_a: Linear,
    pub kv_a_norm: Vec<f32>,
    pub kv_b: Linear,
    pub o: Linear,
}

/// The sizes and constants every layer shares.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MlaShape {
    pub heads: usize,
    pub nope: usize,
    pub rope: usize,
    pub v: usize,
    pub kv_lora: usize,
    pub eps: f32,
    /// The softmax scale: `qk_head_dim^-0.5`, times YaRN's `mscale(factor, mscale_all_dim)²`.
    pub scale: f32,
}

impl MlaShape {
    /// The shape of one rank's `heads` of the layer.
    pub(crate) fn new(c: &DeepseekConfig, heads: usize, scale: f32) -> MlaShape {
        MlaShape { heads, nope: c.qk_nope_head_dim, rope: c.qk_rope_head_dim, v: c.v_head_dim, kv_lora: c.kv_lora_rank, eps: c.eps, scale }
    }

    fn qk(&self) -> usize {
        self.nope + self.rope
    }

    /// Values per token in the latent cache.
    pub(crate) fn width(&self) -> usize {
        self.kv_lora + self.rope
    }
}

/// cos and sin, `[positions, rope / 2]`, already scaled by YaRN's attention factor.
pub(crate) struct RopeRows {
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
    pub half: usize,
}

impl RopeRows {
    /// Rotate the pairs `(2i, 2i+1)` of `v` to position `pos`.
    fn rotate(&self, v: &mut [f32], pos: usize) {
        let (cos, sin) = (&self.cos[pos * self.half..][..self.half], &self.sin[pos * self.half..][..self.half]);
        for (i, pair) in v.chunks_exact_mut(2).enumerate() {
            let (a, b) = (pair[0], pair[1]);
            pair[0] = a * cos[i] - b * sin[i];
            pair[1] = b * cos[i] + a * sin[i];
        }
    }
}

/// How the scores meet the latent (module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attend {
    Absorbed,
    Decompressed,
}

/// Which cache slots each query of a forward sees: `backend::AttnWindow` and `backend::Mask`
/// on the host.
pub(crate) struct Visibility<'a> {
    pub window: AttnWindow,
    /// Row-major `[queries, region]` of 0/1; `None` is causal.
    pub mask: Option<&'a [i32]>,
}

impl Visibility<'_> {
    fn sees(&self, query: usize, slot: usize) -> bool {
        let w = &self.window;
        match (slot.checked_sub(w.prefix), self.mask) {
            (None, _) => true,
            (Some(r), None) => r <= w.region - w.queries + query,
            (Some(r), Some(m)) => m[query * w.region + r] != 0,
        }
    }

    /// Softmax over the visible slots of `score(slot)`: each visible slot with its weight.
    fn softmax(&self, query: usize, score: impl Fn(usize) -> f32) -> Vec<(usize, f32)> {
        let slots = self.window.prefix + self.window.region;
        let mut scores: Vec<(usize, f32)> = (0..slots).filter(|&s| self.sees(query, s)).map(|s| (s, score(s))).collect();
        let max = scores.iter().map(|s| s.1).fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0;
        for s in &mut scores {
            s.1 = (s.1 - max).exp();
            total += s.1;
        }
        scores.iter_mut().for_each(|s| s.1 /= total);
        scores
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl Mla {
    /// The attention of one layer, under `prefix` (`model.layers.{i}.self_attn.`): the
    /// `heads` of this rank (q and `kv_b_proj` by their rows, `o_proj` by its inputs); the
    /// latent projection whole, since every head reads the same latent.
    pub(crate) fn load<B: Backend>(
        ld: &mut Loader<'_, B>,
        prefix: &str,
        c: &DeepseekConfig,
        heads: Range<usize>,
    ) -> Result<Self, BackendError> {
        let name = |t: &str| format!("{prefix}{t}");
        let (h, qk, kv_b, f) = (c.hidden, c.qk_head_dim(), c.qk_nope_head_dim + c.v_head_dim, &c.weights);
        let of_heads = |per_head: usize| heads.start * per_head..heads.end * per_head;
        let q = match c.q_lora_rank {
            None => QProj::Full(Linear::load(ld, f, &name("q_proj.weight"), c.heads * qk, h)?.outputs_in(of_heads(qk))),
            Some(r) => QProj::Lora {
                a: Linear::load(ld, f, &name("q_a_proj.weight"), r, h)?,
                norm: ld.host_f32(&name("q_a_layernorm.weight"), &[r])?,
                b: Linear::load(ld, f, &name("q_b_proj.weight"), c.heads * qk, r)?.outputs_in(of_heads(qk)),
            },
        };
        Ok(Mla {
            q,
            kv_a: Linear::load(ld, f, &name("kv_a_proj_with_mqa.weight"), c.latent_width(), h)?,
            kv_a_norm: ld.host_f32(&name("kv_a_layernorm.weight"), &[c.kv_lora_rank])?,
            kv_b: Linear::load(ld, f, &name("kv_b_proj.weight"), c.heads * kv_b, c.kv_lora_rank)?.outputs_in(of_heads(kv_b)),
            o: Linear::load(ld, f, &name("o_proj.weight"), h, c.heads * c.v_head_dim)?.inputs_in(of_heads(c.v_head_dim)),
        })
    }

    pub(crate) fn elements(&self) -> usize {
        let q = match &self.q {
            QProj::Full(l) => l.elements(),
            QProj::Lora { a, norm, b } => a.elements() + norm.len() + b.elements(),
        };
        q + self.kv_a.elements() + self.kv_a_norm.len() + self.kv_b.elements() + self.o.elements()
    }

    /// Attention of the rows of `x` (the layer's normed input, one per position) over `cache`
    /// (`[slots, width]`, the latents), into which the new tokens' latents are written first,
    /// at the window's new slots. Returns `o_proj`'s output, `[n, hidden]`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &self,
        s: &MlaShape,
        rope: &RopeRows,
        x: &[f32],
        positions: &[usize],
        cache: &mut [f32],
        vis: &Visibility<'_>,
        attend: Attend,
    ) -> Vec<f32> {
        let (n, qk, width) = (positions.len(), s.qk(), s.width());
        let mut q = match &self.q {
            QProj::Full(l) => l.apply(x, n),
            QProj::Lora { a, norm, b } => b.apply(&rms_norm(&a.apply(x, n), norm, s.eps), n),
        };
        let kv = self.kv_a.apply(x, n);
        let first = vis.window.first_new_slot();
        for (i, &pos) in positions.iter().enumerate() {
            let row = &kv[i * width..][..width];
            let latent = &mut cache[(first + i) * width..][..width];
            latent[..s.kv_lora].copy_from_slice(&rms_norm(&row[..s.kv_lora], &self.kv_a_norm, s.eps));
            latent[s.kv_lora..].copy_from_slice(&row[s.kv_lora..]);
            rope.rotate(&mut latent[s.kv_lora..], pos);
            for head in q[i * s.heads * qk..][..s.heads * qk].chunks_exact_mut(qk) {
                rope.rotate(&mut head[s.nope..], pos);
            }
        }
        let cache = &*cache;
        let k_pe = |slot: usize| &cache[slot * width + s.kv_lora..][..s.rope];
        let mut out = vec![0.0; n * s.heads * s.v];
        match attend {
            Attend::Absorbed => {
                // kv_b's rows for head h: its k_nope rows, then its v rows.
                let w = |h: usize, row: usize| self.kv_b.row(h * (s.nope + s.v) + row);
                let c = |slot: usize| &cache[slot * width..][..s.kv_lora];
                for i in 0..n {
                    for h in 0..s.heads {
                        let head = &q[(i * s.heads + h) * qk..][..qk];
                        let mut q_latent = vec![0.0; s.kv_lora];
                        for (d, &qd) in head[..s.nope].iter().enumerate() {
                            q_latent.iter_mut().zip(w(h, d)).for_each(|(l, wk)| *l += qd * wk);
                        }
                        let probs = vis.softmax(i, |slot| s.scale * (dot(&q_latent, c(slot)) + dot(&head[s.nope..], k_pe(slot))));
                        let mut o_latent = vec![0.0; s.kv_lora];
                        for (slot, p) in probs {
                            o_latent.iter_mut().zip(c(slot)).for_each(|(o, x)| *o += p * x);
                        }
                        for (e, o) in out[(i * s.heads + h) * s.v..][..s.v].iter_mut().enumerate() {
                            *o = dot(w(h, s.nope + e), &o_latent);
                        }
                    }
                }
            }
            Attend::Decompressed => {
                let slots = vis.window.prefix + vis.window.region;
                let latents: Vec<f32> = cache[..slots * width].chunks_exact(width).flat_map(|r| &r[..s.kv_lora]).copied().collect();
                let kv = self.kv_b.apply(&latents, slots);
                let per_slot = s.heads * (s.nope + s.v);
                for i in 0..n {
                    for h in 0..s.heads {
                        let head = &q[(i * s.heads + h) * qk..][..qk];
                        let k_nope = |slot: usize| &kv[slot * per_slot + h * (s.nope + s.v)..][..s.nope];
                        let probs =
                            vis.softmax(i, |slot| s.scale * (dot(&head[..s.nope], k_nope(slot)) + dot(&head[s.nope..], k_pe(slot))));
                        let o = &mut out[(i * s.heads + h) * s.v..][..s.v];
                        for (slot, p) in probs {
                            let v = &kv[slot * per_slot + h * (s.nope + s.v) + s.nope..][..s.v];
                            o.iter_mut().zip(v).for_each(|(o, x)| *o += p * x);
                        }
                    }
                }
            }
        }
        self.o.apply(&out, n)
    }
}
