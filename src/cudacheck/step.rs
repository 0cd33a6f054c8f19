//! A small decode step written over the backend seam as a decoder layer is (embedding,
//! norm, q/k/v in one call, RoPE with the KV-cache write, attention, output projection,
//! fused residual norm, gate-up-SiLU, down projection, lm_head, argmax), used to check
//! that a step replayed from a CUDA graph computes exactly what the same step computes
//! eagerly, and to time the two.

use crate::backend::{AttnGeometry, AttnWindow, Backend, BackendError, Mask, Projection, RopeStyle, RopeTable, Shard};
use crate::model::checkpoint::TensorView;

pub struct Dims {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub slots: usize,
}

pub struct ToyStep<B: Backend> {
    d: Dims,
    table: B::Weight,
    norm: B::Weight,
    wq: B::Weight,
    wk: B::Weight,
    wv: B::Weight,
    wo: B::Weight,
    gate: B::Weight,
    up: B::Weight,
    down: B::Weight,
    rope: RopeTable<B>,
    ids: B::Ids,
    pos: B::Ids,
    picked: B::Ids,
    x: B::Tensor,
    h: B::Tensor,
    q: B::Tensor,
    k: B::Tensor,
    v: B::Tensor,
    kc: B::Tensor,
    vc: B::Tensor,
    a: B::Tensor,
    o: B::Tensor,
    g: B::Tensor,
    u: B::Tensor,
    act: B::Tensor,
    logits: B::Tensor,
}

/// Deterministic pseudo-random bf16 bytes (a weight's file contents).
fn bf16_bytes(n: usize, seed: u64, scale: f32) -> Vec<u8> {
    let mut z = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    (0..n)
        .flat_map(|_| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            let u = (z >> 40) as f32 / (1u64 << 24) as f32;
            half::bf16::from_f32((2.0 * u - 1.0) * scale).to_le_bytes()
        })
        .collect()
}

/// A weight of deterministic pseudo-random bf16 values in `(-scale, scale)`.
pub fn random_weight<B: Backend>(b: &B, shape: &[usize], seed: u64, scale: f32) -> Result<B::Weight, BackendError> {
    let bytes = bf16_bytes(shape.iter().product(), seed, scale);
    let view =
        TensorView { name: "toy", file: std::path::Path::new("(generated)"), dtype: safetensors::tensor::Dtype::BF16, shape, data: &bytes };
    b.load_weight(&view, Shard::Replicated)
}

impl<B: Backend> ToyStep<B> {
    pub fn new(b: &B, d: Dims) -> Result<Self, BackendError> {
        let (qw, kw) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
        let half = d.head_dim / 2;
        let angle = |p: usize, j: usize| p as f64 / 10000f64.powf(2.0 * j as f64 / d.head_dim as f64);
        let cos: Vec<f32> = (0..d.slots * half).map(|i| angle(i / half, i % half).cos() as f32).collect();
        let sin: Vec<f32> = (0..d.slots * half).map(|i| angle(i / half, i % half).sin() as f32).collect();
        let rope = RopeTable {
            cos: b.tensor_from(half, &cos)?,
            sin: b.tensor_from(half, &sin)?,
            head_dim: d.head_dim,
            style: RopeStyle::NeoX,
            max_positions: d.slots,
        };
        Ok(ToyStep {
            table: random_weight(b, &[d.vocab, d.hidden], 1, 1.0)?,
            norm: random_weight(b, &[d.hidden], 2, 1.0)?,
            wq: random_weight(b, &[qw, d.hidden], 3, 0.05)?,
            wk: random_weight(b, &[kw, d.hidden], 4, 0.05)?,
            wv: random_weight(b, &[kw, d.hidden], 5, 0.05)?,
            wo: random_weight(b, &[d.hidden, qw], 6, 0.05)?,
            gate: random_weight(b, &[d.intermediate, d.hidden], 7, 0.05)?,
            up: random_weight(b, &[d.intermediate, d.hidden], 8, 0.05)?,
            down: random_weight(b, &[d.hidden, d.intermediate], 9, 0.05)?,
            rope,
            ids: b.ids(1)?,
            pos: b.ids(1)?,
            picked: b.ids(1)?,
            x: b.tensor(1, d.hidden)?,
            h: b.tensor(1, d.hidden)?,
            q: b.tensor(1, qw)?,
            k: b.tensor(1, kw)?,
            v: b.tensor(1, kw)?,
            kc: b.kv_tensor(d.slots, kw, b.kv_dtype())?,
            vc: b.kv_tensor(d.slots, kw, b.kv_dtype())?,
            a: b.tensor(1, qw)?,
            o: b.tensor(1, d.hidden)?,
            g: b.tensor(1, d.intermediate)?,
            u: b.tensor(1, d.intermediate)?,
            act: b.tensor(1, d.intermediate)?,
            logits: b.tensor(1, d.vocab)?,
            d,
        })
    }

    /// Enqueue one decode step of `token` at position `pos` (greedy next token in `picked`).
    pub fn enqueue(&mut self, b: &B, token: u32, pos: usize) {
        let g = AttnGeometry {
            heads: self.d.heads,
            kv_heads: self.d.kv_heads,
            head_dim: self.d.head_dim,
            scale: 1.0 / (self.d.head_dim as f32).sqrt(),
        };
        b.write_ids(&mut self.ids, &[token as i32]);
        b.write_ids(&mut self.pos, &[pos as i32]);
        b.embed(&self.table, &self.ids, 1, &mut self.x);
        b.rms_norm(&self.x, &self.norm, 1e-5, 1, &mut self.h);
        b.matmul_many(
            &self.h,
            1,
            &mut [
                Projection { w: &self.wq, bias: None, out: &mut self.q },
                Projection { w: &self.wk, bias: None, out: &mut self.k },
                Projection { w: &self.wv, bias: None, out: &mut self.v },
            ],
        );
        b.rope_store_kv(&mut self.q, &mut self.k, &self.v, &self.rope, &self.pos, 1, (&mut self.kc, &mut self.vc), pos);
        b.attention(&self.q, &self.kc, &self.vc, &g, AttnWindow { prefix: pos, region: 1, queries: 1 }, Mask::Causal, &mut self.a);
        b.matmul_residual(&self.a, &self.wo, 1, &mut self.o, &mut self.x);
        b.rms_norm(&self.x, &self.norm, 1e-5, 1, &mut self.h);
        b.gate_up_silu(&self.h, &self.gate, &self.up, 1, &mut self.g, &mut self.u, &mut self.act);
        b.matmul_residual(&self.act, &self.down, 1, &mut self.o, &mut self.x);
        b.rms_norm(&self.x, &self.norm, 1e-5, 1, &mut self.h);
        b.matmul(&self.h, &self.table, None, 1, &mut self.logits);
        b.argmax(&self.logits, 1, &mut self.picked);
    }

    /// Greedy decode of `steps` tokens from `first`, each step in graph brackets when
    /// `graphs` is set. Returns the tokens and the attention output of the last step.
    pub fn decode(&mut self, b: &B, first: u32, steps: usize, graphs: bool) -> Result<(Vec<u32>, Vec<f32>), BackendError> {
        let mut tokens = vec![first];
        for pos in 0..steps {
            if graphs {
                b.graph_begin("toy-decode/1")?;
            }
            self.enqueue(b, tokens[pos], pos);
            if graphs {
                b.graph_end()?;
            }
            tokens.push(b.read_ids(&self.picked, 1)?[0] as u32);
        }
        Ok((tokens, b.read_rows(&self.a, 0, 1)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;

    fn dims() -> Dims {
        Dims { hidden: 64, heads: 4, kv_heads: 2, head_dim: 32, intermediate: 96, vocab: 97, slots: 16 }
    }

    /// On the CPU reference the brackets change nothing, and the step is deterministic:
    /// the same tokens twice, and a token sequence that is not a constant (the step really
    /// depends on position and history).
    #[test]
    fn brackets_are_transparent_on_the_cpu() {
        let b = CpuBackend;
        let (eager, a1) = ToyStep::new(&b, dims()).unwrap().decode(&b, 5, 12, false).unwrap();
        let (bracketed, a2) = ToyStep::new(&b, dims()).unwrap().decode(&b, 5, 12, true).unwrap();
        assert_eq!(eager, bracketed);
        assert_eq!(a1, a2);
        assert_eq!(eager.len(), 13);
        assert!(eager.iter().any(|&t| t != eager[1]), "{eager:?}");
    }
}
