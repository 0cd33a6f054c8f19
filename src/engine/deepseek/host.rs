//! The host-side f32 pieces the DeepSeek-V3 reference is written in: a linear layer over the
//! CPU backend's matmul (gemm + rayon), RMSNorm and SiLU as transformers computes them.

use crate::backend::cpu::matmul::matmul;
use crate::backend::Backend;
use crate::backend::BackendError;
use crate::engine::weights::Loader;

/// `y = x · Wᵀ` with `W` `[outputs, inputs]` as the checkpoint stores it.
pub(crate) struct Linear {
    pub w: Vec<f32>,
    pub outputs: usize,
    pub inputs: usize,
}

impl Linear {
    pub(crate) fn load<B: Backend>(ld: &mut Loader<'_, B>, name: &str, outputs: usize, inputs: usize) -> Result<Self, BackendError> {
        Ok(Linear { w: ld.host_f32(name, &[outputs, inputs])?, outputs, inputs })
    }

    /// The first `n` rows of `x` (`[n, inputs]`) through the layer: `[n, outputs]`.
    pub(crate) fn apply(&self, x: &[f32], n: usize) -> Vec<f32> {
        let mut out = vec![0.0; n * self.outputs];
        matmul(x, &self.w, None, n, self.inputs, self.outputs, &mut out);
        out
    }

    /// Row `r` of the weight (one output's inputs).
    pub(crate) fn row(&self, r: usize) -> &[f32] {
        &self.w[r * self.inputs..][..self.inputs]
    }

    pub(crate) fn elements(&self) -> usize {
        self.w.len()
    }
}

/// RMSNorm of every `w.len()`-wide row of `x`, as transformers' `DeepseekV3RMSNorm`.
pub(crate) fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(w.len()) {
        let mean = row.iter().map(|v| v * v).sum::<f32>() / w.len() as f32;
        let inv = 1.0 / (mean + eps).sqrt();
        out.extend(row.iter().zip(w).map(|(v, g)| g * (v * inv)));
    }
    out
}

pub(crate) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

pub(crate) fn add(dst: &mut [f32], src: &[f32]) {
    dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
}

/// The indices of the `k` largest values, largest first (ties to the lower index).
pub(crate) fn top_k(values: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
    order.truncate(k);
    order
}
