//! The feed-forward half of a DeepSeek-V3 layer: a dense SwiGLU MLP in the first
//! `first_k_dense_replace` layers, else the routed experts (each a small SwiGLU MLP, run on
//! the tokens routed to it) plus the shared experts every token runs.

use crate::backend::{Backend, BackendError};
use crate::engine::deepseek::host::{add, silu, Linear};
use crate::engine::deepseek::router::route;
use crate::engine::weights::Loader;
use crate::model::deepseek::{DeepseekConfig, MoeConfig};

/// `down(silu(gate(x)) * up(x))`.
pub(crate) struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Mlp {
    fn load<B: Backend>(ld: &mut Loader<'_, B>, prefix: &str, hidden: usize, inner: usize) -> Result<Self, BackendError> {
        Ok(Mlp {
            gate: Linear::load(ld, &format!("{prefix}gate_proj.weight"), inner, hidden)?,
            up: Linear::load(ld, &format!("{prefix}up_proj.weight"), inner, hidden)?,
            down: Linear::load(ld, &format!("{prefix}down_proj.weight"), hidden, inner)?,
        })
    }

    fn forward(&self, x: &[f32], n: usize) -> Vec<f32> {
        let (gate, up) = (self.gate.apply(x, n), self.up.apply(x, n));
        let act: Vec<f32> = gate.iter().zip(&up).map(|(g, u)| silu(*g) * u).collect();
        self.down.apply(&act, n)
    }

    fn elements(&self) -> usize {
        self.gate.elements() + self.up.elements() + self.down.elements()
    }
}

pub(crate) struct Moe {
    /// `mlp.gate.weight`, `[experts, hidden]`.
    gate: Linear,
    /// `mlp.gate.e_score_correction_bias`.
    bias: Vec<f32>,
    experts: Vec<Mlp>,
    shared: Option<Mlp>,
}

pub(crate) enum FeedForward {
    Dense(Mlp),
    Moe(Moe),
}

impl FeedForward {
    /// Layer `i`'s feed-forward under `prefix` (`model.layers.{i}.mlp.`).
    pub(crate) fn load<B: Backend>(ld: &mut Loader<'_, B>, prefix: &str, c: &DeepseekConfig, i: usize) -> Result<Self, BackendError> {
        let h = c.hidden;
        if !c.is_moe_layer(i) {
            return Ok(FeedForward::Dense(Mlp::load(ld, prefix, h, c.intermediate)?));
        }
        let m = &c.moe;
        let experts =
            (0..m.experts).map(|e| Mlp::load(ld, &format!("{prefix}experts.{e}."), h, m.intermediate)).collect::<Result<_, _>>()?;
        let shared = match m.shared_experts {
            0 => None,
            s => Some(Mlp::load(ld, &format!("{prefix}shared_experts."), h, s * m.intermediate)?),
        };
        Ok(FeedForward::Moe(Moe {
            gate: Linear::load(ld, &format!("{prefix}gate.weight"), m.experts, h)?,
            bias: ld.host_f32(&format!("{prefix}gate.e_score_correction_bias"), &[m.experts])?,
            experts,
            shared,
        }))
    }

    /// `[n, hidden]` in, `[n, hidden]` out.
    pub(crate) fn forward(&self, m: &MoeConfig, x: &[f32], n: usize) -> Vec<f32> {
        let moe = match self {
            FeedForward::Dense(mlp) => return mlp.forward(x, n),
            FeedForward::Moe(moe) => moe,
        };
        let hidden = moe.gate.inputs;
        let mut out = match &moe.shared {
            Some(s) => s.forward(x, n),
            None => vec![0.0; n * hidden],
        };
        let logits = moe.gate.apply(x, n);
        // Tokens grouped by expert, so each expert runs once over all the rows routed to it.
        let mut routed: Vec<Vec<(usize, f32)>> = vec![Vec::new(); moe.experts.len()];
        for (t, row) in logits.chunks_exact(moe.experts.len()).enumerate() {
            for (e, w) in route(m, row, &moe.bias) {
                routed[e].push((t, w));
            }
        }
        for (expert, tokens) in moe.experts.iter().zip(&routed).filter(|(_, t)| !t.is_empty()) {
            let rows: Vec<f32> = tokens.iter().flat_map(|&(t, _)| &x[t * hidden..][..hidden]).copied().collect();
            let y = expert.forward(&rows, tokens.len());
            for (&(t, w), y) in tokens.iter().zip(y.chunks_exact(hidden)) {
                let scaled: Vec<f32> = y.iter().map(|v| v * w).collect();
                add(&mut out[t * hidden..][..hidden], &scaled);
            }
        }
        out
    }

    /// Weight elements a token reads when it runs `routed` of the routed experts (`None`:
    /// all of them, which are the elements held).
    pub(crate) fn elements(&self, routed: Option<usize>) -> usize {
        match self {
            FeedForward::Dense(mlp) => mlp.elements(),
            FeedForward::Moe(moe) => {
                let per_expert = moe.experts.first().map_or(0, Mlp::elements);
                let shared = moe.shared.as_ref().map_or(0, Mlp::elements);
                moe.gate.elements() + moe.bias.len() + shared + routed.unwrap_or(moe.experts.len()) * per_expert
            }
        }
    }
}
