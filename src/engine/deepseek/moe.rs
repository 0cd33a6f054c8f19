//! The feed-forward half of a DeepSeek-V3 layer: a dense SwiGLU MLP in the first
//! `first_k_dense_replace` layers, else the routed experts (each a small SwiGLU MLP, run on
//! the tokens routed to it) plus the shared experts every token runs.
//!
//! Over a tensor-parallel group the dense and shared MLPs split their width (gate and up by
//! rows, down by inputs) and the routed experts split as SGLang splits them for `--ep-size`:
//! each of `ep` groups of ranks holds a contiguous run of experts, each expert's width split
//! over the group's ranks; every rank routes every token as the others do. Each rank's output
//! is its partial sum, which the model's all-reduce completes.

use std::ops::Range;

use crate::backend::cpu::route::route;
use crate::backend::latent::Routing;
use crate::backend::{Backend, BackendError};
use crate::engine::deepseek::host::{add, silu, Linear, Split};
use crate::engine::weights::Loader;
use crate::model::deepseek::{DeepseekConfig, MoeConfig};
use crate::model::quantized::WeightFormats;

/// `down(silu(gate(x)) * up(x))`.
pub(crate) struct Mlp {
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
}

impl Mlp {
    /// The MLP under `prefix`, only the `width` part of its `inner` hidden units.
    pub(crate) fn load<B: Backend>(
        ld: &mut Loader<'_, B>,
        f: &WeightFormats,
        prefix: &str,
        [hidden, inner]: [usize; 2],
        width: Range<usize>,
    ) -> Result<Self, BackendError> {
        Ok(Mlp {
            gate: Linear::load(ld, f, &format!("{prefix}gate_proj.weight"), inner, hidden)?.outputs_in(width.clone()),
            up: Linear::load(ld, f, &format!("{prefix}up_proj.weight"), inner, hidden)?.outputs_in(width.clone()),
            down: Linear::load(ld, f, &format!("{prefix}down_proj.weight"), hidden, inner)?.inputs_in(width),
        })
    }

    /// A first-k-dense layer's MLP under `prefix`, this rank's part of its width.
    pub(crate) fn dense<B: Backend>(ld: &mut Loader<'_, B>, prefix: &str, c: &DeepseekConfig, split: Split) -> Result<Self, BackendError> {
        let width = split.part(c.intermediate, "intermediate_size")?;
        Mlp::load(ld, &c.weights, prefix, [c.hidden, c.intermediate], width)
    }

    fn forward(&self, x: &[f32], n: usize) -> Vec<f32> {
        let (gate, up) = (self.gate.apply(x, n), self.up.apply(x, n));
        let act: Vec<f32> = gate.iter().zip(&up).map(|(g, u)| silu(*g) * u).collect();
        self.down.apply(&act, n)
    }

    pub(crate) fn elements(&self) -> usize {
        self.gate.elements() + self.up.elements() + self.down.elements()
    }
}

/// What the router reads of the config.
pub(crate) fn routing(m: &MoeConfig) -> Routing {
    Routing {
        experts: m.experts,
        per_token: m.per_token,
        groups: m.groups,
        topk_groups: m.topk_groups,
        norm_topk_prob: m.norm_topk_prob,
        routed_scaling_factor: m.routed_scaling_factor,
    }
}

pub(crate) struct Moe {
    /// `mlp.gate.weight`, `[experts, hidden]`.
    gate: Linear,
    /// `mlp.gate.e_score_correction_bias`.
    bias: Vec<f32>,
    /// This rank's routed experts, `first` onwards.
    experts: Vec<Mlp>,
    first: usize,
    shared: Option<Mlp>,
}

/// This rank's share of a MoE layer: its run of routed experts, its part of each one's
/// width, and its part of the shared experts' width.
pub(crate) struct MoeShare {
    pub own: Range<usize>,
    pub width: Range<usize>,
    pub shared_width: Option<Range<usize>>,
}

impl MoeShare {
    pub(crate) fn of(c: &DeepseekConfig, split: Split, ep: usize) -> Result<MoeShare, BackendError> {
        let m = &c.moe;
        let (group, within) = split.experts(ep)?;
        let shared_width = match m.shared_experts * m.intermediate {
            0 => None,
            inner => Some(split.part(inner, "n_shared_experts × moe_intermediate_size")?),
        };
        Ok(MoeShare {
            own: group.part(m.experts, "n_routed_experts")?,
            width: within.part(m.intermediate, "moe_intermediate_size")?,
            shared_width,
        })
    }

    /// The shared experts under `prefix` (`model.layers.{i}.mlp.`), this rank's part.
    pub(crate) fn shared<B: Backend>(&self, ld: &mut Loader<'_, B>, prefix: &str, c: &DeepseekConfig) -> Result<Option<Mlp>, BackendError> {
        let Some(width) = self.shared_width.clone() else { return Ok(None) };
        let inner = c.moe.shared_experts * c.moe.intermediate;
        Mlp::load(ld, &c.weights, &format!("{prefix}shared_experts."), [c.hidden, inner], width).map(Some)
    }
}

pub(crate) enum FeedForward {
    Dense(Mlp),
    Moe(Moe),
}

impl FeedForward {
    /// Layer `i`'s feed-forward under `prefix` (`model.layers.{i}.mlp.`), this rank's share.
    pub(crate) fn load<B: Backend>(
        ld: &mut Loader<'_, B>,
        prefix: &str,
        c: &DeepseekConfig,
        i: usize,
        split: Split,
        ep: usize,
    ) -> Result<Self, BackendError> {
        let (h, f) = (c.hidden, &c.weights);
        if !c.is_moe_layer(i) {
            return Ok(FeedForward::Dense(Mlp::dense(ld, prefix, c, split)?));
        }
        let share = MoeShare::of(c, split, ep)?;
        let experts = share
            .own
            .clone()
            .map(|e| Mlp::load(ld, f, &format!("{prefix}experts.{e}."), [h, c.moe.intermediate], share.width.clone()))
            .collect::<Result<_, _>>()?;
        let shared = share.shared(ld, prefix, c)?;
        let m = &c.moe;
        Ok(FeedForward::Moe(Moe {
            gate: Linear::load(ld, f, &format!("{prefix}gate.weight"), m.experts, h)?,
            bias: ld.host_f32(&format!("{prefix}gate.e_score_correction_bias"), &[m.experts])?,
            experts,
            first: share.own.start,
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
        // Tokens grouped by expert, so each expert runs once over all the rows routed to it;
        // experts of other ranks are theirs to run.
        let mut routed: Vec<Vec<(usize, f32)>> = vec![Vec::new(); moe.experts.len()];
        for (t, row) in logits.chunks_exact(m.experts).enumerate() {
            for (e, w) in route(&routing(m), row, &moe.bias) {
                if let Some(own) = e.checked_sub(moe.first).and_then(|e| routed.get_mut(e)) {
                    own.push((t, w));
                }
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

    /// Weight elements this rank reads for a token that runs `routed` of the routed
    /// experts, this rank's share of them on average (`None`: all of this rank's, which are
    /// the elements held).
    pub(crate) fn elements(&self, routed: Option<usize>) -> usize {
        match self {
            FeedForward::Dense(mlp) => mlp.elements(),
            FeedForward::Moe(moe) => {
                let per_expert = moe.experts.first().map_or(0, Mlp::elements);
                let shared = moe.shared.as_ref().map_or(0, Mlp::elements);
                let held = moe.experts.len();
                let read = routed.map_or(held, |k| k * held / moe.gate.outputs);
                moe.gate.elements() + moe.bias.len() + shared + read * per_expert
            }
        }
    }
}
