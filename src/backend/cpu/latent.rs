//! The CPU reference of the DeepSeek-V3 family's ops (`backend::latent`), written out
//! plainly: what a GPU backend's kernels are compared with.

use super::buffers::{CpuIds, CpuTensor, CpuWeight};
use super::route::route;
use crate::backend::latent::{Experts, MlaGeometry, Routing, SlotTable};
use crate::backend::Backend;

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

pub(super) fn head_matmul(x: &CpuTensor, w: &CpuWeight, heads: usize, n: usize, out: &mut CpuTensor) {
    let (b, a) = (w.shape[0] / heads, w.shape[1]);
    assert_eq!(
        (x.cols, out.cols),
        (heads * a, heads * b),
        "head_matmul: x is [.., {}], w is {:?}, out is [.., {}]",
        x.cols,
        w.shape,
        out.cols
    );
    for r in 0..n {
        let (xr, or) = (&x.data[r * x.cols..][..x.cols], &mut out.data[r * out.cols..][..out.cols]);
        for h in 0..heads {
            for j in 0..b {
                or[h * b + j] = dot(&xr[h * a..][..a], &w.data[(h * b + j) * a..][..a]);
            }
        }
    }
}

pub(super) fn mla_attention(
    q_lat: &CpuTensor,
    q_pe: &CpuTensor,
    new: (&CpuTensor, &CpuTensor),
    cache: (&mut CpuTensor, &mut CpuTensor),
    g: &MlaGeometry,
    table: &SlotTable,
    out: &mut CpuTensor,
) {
    let (lora, rope) = (g.kv_lora, g.rope);
    for r in 0..table.rows {
        let own = table.row(r).1;
        cache.0.data[own * lora..][..lora].copy_from_slice(&new.0.data[r * lora..][..lora]);
        cache.1.data[own * rope..][..rope].copy_from_slice(&new.1.data[r * rope..][..rope]);
    }
    let (c, pe) = (&cache.0.data, &cache.1.data);
    for r in 0..table.rows {
        let slots = table.row(r).0;
        for h in 0..g.heads {
            let ql = &q_lat.data[r * q_lat.cols + h * lora..][..lora];
            let qp = &q_pe.data[r * q_pe.cols + h * rope..][..rope];
            let scores: Vec<f32> = slots
                .iter()
                .map(|&s| g.scale * (dot(ql, &c[s as usize * lora..][..lora]) + dot(qp, &pe[s as usize * rope..][..rope])))
                .collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let weights: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f32 = weights.iter().sum();
            let o = &mut out.data[r * out.cols + h * lora..][..lora];
            o.fill(0.0);
            for (&s, p) in slots.iter().zip(&weights) {
                let cs = &c[s as usize * lora..][..lora];
                o.iter_mut().zip(cs).for_each(|(o, x)| *o += p / total * x);
            }
        }
    }
}

pub(super) fn moe_route(logits: &CpuTensor, bias: &CpuTensor, m: &Routing, n: usize, experts: &mut CpuIds, weights: &mut CpuTensor) {
    for i in 0..n {
        for (j, (e, w)) in route(m, &logits.data[i * logits.cols..][..m.experts], &bias.data).into_iter().enumerate() {
            experts.data[i * m.per_token + j] = e as i32;
            weights.data[i * weights.cols + j] = w;
        }
    }
}

/// `Backend::moe_experts`, for any backend whose buffers are the CPU's (no scratch needed).
pub(crate) fn moe_experts<B: Backend<Tensor = CpuTensor, Weight = CpuWeight, Ids = CpuIds>>(
    x: &CpuTensor,
    (experts, weights, per_token): (&CpuIds, &CpuTensor, usize),
    w: &Experts<'_, B>,
    n: usize,
    out: &mut CpuTensor,
) {
    assert!(w.quantized.is_none(), "quantized experts on a backend that dequantizes at load");
    let (hidden, inner) = (x.cols, w.inner);
    for i in 0..n {
        let xi = &x.data[i * hidden..][..hidden];
        let o = &mut out.data[i * hidden..][..hidden];
        o.fill(0.0);
        for j in 0..per_token {
            let Some(local) = (experts.data[i * per_token + j] as usize).checked_sub(w.first).filter(|&e| e < w.count) else { continue };
            let gate_up = &w.gate_up.data[local * 2 * inner * hidden..][..2 * inner * hidden];
            let act: Vec<f32> = (0..inner)
                .map(|k| silu(dot(xi, &gate_up[k * hidden..][..hidden])) * dot(xi, &gate_up[(inner + k) * hidden..][..hidden]))
                .collect();
            let down = &w.down.data[local * hidden * inner..][..hidden * inner];
            let weight = weights.data[i * weights.cols + j];
            for (d, o) in o.iter_mut().enumerate() {
                *o += weight * dot(&down[d * inner..][..inner], &act);
            }
        }
    }
}
