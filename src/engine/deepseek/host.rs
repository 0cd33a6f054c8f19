//! The host-side f32 pieces the DeepSeek-V3 reference is written in: a linear layer over the
//! CPU backend's matmul (gemm + rayon), RMSNorm and SiLU as transformers computes them.

use std::ops::Range;
use std::path::Path;

use half::bf16;
use rayon::prelude::*;
use safetensors::tensor::Dtype;

use crate::backend::cpu::matmul::matmul;
use crate::backend::{Backend, BackendError, Shard};
use crate::engine::weights::Loader;
use crate::model::checkpoint::TensorView;
use crate::model::quantized::WeightFormats;

/// One rank's share of the dimensions a tensor-parallel group splits evenly (attention heads,
/// MLP widths, routed experts): the whole of each at one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Split {
    pub rank: usize,
    pub world: usize,
}

impl Split {
    pub(crate) fn of<B: Backend>(b: &B) -> Split {
        Split { rank: b.tp_rank(), world: b.tp_world() }
    }

    /// SGLang's expert-parallel layout over this group: of `ep` groups of consecutive ranks,
    /// this rank's group (which run of experts it holds) and its place in the group (which
    /// part of each expert's width).
    pub(crate) fn experts(&self, ep: usize) -> Result<(Split, Split), BackendError> {
        if ep == 0 || self.world % ep != 0 {
            return Err(BackendError::Device(format!("--tp-size {} is not divisible by --ep-size {ep}", self.world)));
        }
        let moe_tp = self.world / ep;
        Ok((Split { rank: self.rank / moe_tp, world: ep }, Split { rank: self.rank % moe_tp, world: moe_tp }))
    }

    /// This rank's part of `len`, the value of config key `key` (an error when it does not
    /// split evenly).
    pub(crate) fn part(&self, len: usize, key: &str) -> Result<Range<usize>, BackendError> {
        if len % self.world != 0 {
            return Err(BackendError::Device(format!("--tp-size {} does not divide {key} {len}", self.world)));
        }
        let share = len / self.world;
        Ok(self.rank * share..(self.rank + 1) * share)
    }
}

/// `y = x · Wᵀ` with `W` `[outputs, inputs]` as the checkpoint stores it.
pub(crate) struct Linear {
    pub w: Vec<f32>,
    pub outputs: usize,
    pub inputs: usize,
}

impl Linear {
    /// The `[outputs, inputs]` weight `name`, dequantized when `formats` stores it quantized.
    pub(crate) fn load<B: Backend>(
        ld: &mut Loader<'_, B>,
        formats: &WeightFormats,
        name: &str,
        outputs: usize,
        inputs: usize,
    ) -> Result<Self, BackendError> {
        Ok(Linear { w: ld.host_linear(name, outputs, inputs, formats)?, outputs, inputs })
    }

    /// Only the outputs `rows` (a column-parallel shard).
    pub(crate) fn outputs_in(mut self, rows: Range<usize>) -> Linear {
        if rows == (0..self.outputs) {
            return self;
        }
        self.w = self.w[rows.start * self.inputs..rows.end * self.inputs].to_vec();
        self.outputs = rows.len();
        self
    }

    /// Only the inputs `cols` (a row-parallel shard: its outputs are partial sums that the
    /// group's all-reduce completes).
    pub(crate) fn inputs_in(mut self, cols: Range<usize>) -> Linear {
        if cols == (0..self.inputs) {
            return self;
        }
        self.w = self.w.chunks_exact(self.inputs).flat_map(|row| &row[cols.clone()]).copied().collect();
        self.inputs = cols.len();
        self
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

    /// The weight on `backend` as the values held here (`name` is what errors call it).
    pub(crate) fn to_backend<B: Backend>(&self, backend: &B, name: &str) -> Result<B::Weight, BackendError> {
        Staged::new(backend, self.inputs).push(&self.w).upload(backend, name)
    }
}

/// Rows of f32 values gathered into one weight, held in the backend's weight dtype.
pub(crate) struct Staged {
    dtype: Dtype,
    bytes: Vec<u8>,
    rows: usize,
    cols: usize,
}

impl Staged {
    pub(crate) fn new<B: Backend>(b: &B, cols: usize) -> Staged {
        Staged { dtype: b.weight_dtype(), bytes: Vec::new(), rows: 0, cols }
    }

    /// Append whole rows (`values.len()` a multiple of the width).
    pub(crate) fn push(&mut self, values: &[f32]) -> &mut Self {
        let width = if self.dtype == Dtype::BF16 { 2 } else { 4 };
        let start = self.bytes.len();
        self.bytes.resize(start + width * values.len(), 0);
        // In parallel: a DeepSeek-V3 layer stages some 11 G values.
        let dst = self.bytes[start..].par_chunks_exact_mut(width).zip(values.par_iter());
        match self.dtype {
            Dtype::BF16 => dst.for_each(|(d, v)| d.copy_from_slice(&bf16::from_f32(*v).to_le_bytes())),
            _ => dst.for_each(|(d, v)| d.copy_from_slice(&v.to_le_bytes())),
        }
        self.rows += values.len() / self.cols;
        self
    }

    /// The rows so far as one `[rows, cols]` weight (`name` is what errors call it).
    pub(crate) fn upload<B: Backend>(&self, b: &B, name: &str) -> Result<B::Weight, BackendError> {
        let dtype = if self.dtype == Dtype::BF16 { Dtype::BF16 } else { Dtype::F32 };
        let shape = [self.rows, self.cols];
        let view = TensorView { name, file: Path::new("(the target's weights)"), dtype, shape: &shape, data: &self.bytes };
        b.load_weight(&view, Shard::Replicated)
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
