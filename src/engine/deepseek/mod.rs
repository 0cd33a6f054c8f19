//! DeepSeek-V3-family targets (DeepSeek-V3/R1, Kimi-K2, Moonlight, the Kimi-K2.5 text model):
//! MLA (`mla`) and the sigmoid grouped-top-k MoE (`router`, `moe`), written out plainly on the
//! host in f32 as the reference a GPU path is checked against, and checked itself against
//! transformers' `DeepseekV3ForCausalLM` (testdata/deepseek/, tests/deepseek_reference.rs).
//!
//! The model speaks the target's side of the backend seam as `LlamaModel` does (token ids
//! and positions in `inputs`, logits in `logits`, the KV cache a `KvCache`, here the latent
//! one), so the engine's decoding loop drives either.

pub(crate) mod host;
pub(crate) mod mla;
pub(crate) mod moe;
pub(crate) mod router;

use std::sync::Arc;

use crate::backend::rope::{yarn_mscale, RopeParams};
use crate::backend::{AttnWindow, Backend, BackendError, Mask, RopeStyle};
use crate::engine::deepseek::host::{add, rms_norm, Linear};
use crate::engine::deepseek::mla::{Mla, MlaShape, RopeRows, Visibility};
use crate::engine::deepseek::moe::FeedForward;
use crate::engine::kv::KvCache;
use crate::engine::llama::{rope_from_config, Capacity, Capture, Logits, StepInputs};
use crate::engine::weights::Loader;
use crate::model::config::{ConfigError, ModelConfig};
use crate::model::deepseek::DeepseekConfig;

pub use mla::Attend;

/// What the engine derives from the config beside the text model's sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct DeepseekTargetConfig {
    pub text: DeepseekConfig,
    /// RoPE over `qk_rope_head_dim`, YaRN's mscale in its cos and sin.
    pub rope: RopeParams,
    pub softmax_scale: f32,
}

impl DeepseekTargetConfig {
    pub fn from_config(cfg: &ModelConfig) -> Result<DeepseekTargetConfig, ConfigError> {
        let text = DeepseekConfig::from_config(cfg)?;
        let rope = RopeParams { style: RopeStyle::Interleaved, ..rope_from_config(cfg, text.qk_rope_head_dim)? };
        Ok(DeepseekTargetConfig { softmax_scale: softmax_scale(cfg, text.qk_head_dim()), rope, text })
    }
}

/// `qk_head_dim^-0.5`, times `mscale(factor, mscale_all_dim)²` under a scaled rope, as
/// transformers' `DeepseekV3Attention` sets `self.scaling`.
fn softmax_scale(cfg: &ModelConfig, qk_head_dim: usize) -> f32 {
    let base = (qk_head_dim as f64).powf(-0.5);
    let all_dim = cfg.rope_scaling().filter(|s| s.kind != "default").and_then(|s| {
        let m = s.raw.get("mscale_all_dim").and_then(serde_json::Value::as_f64).filter(|m| *m != 0.0)?;
        Some(yarn_mscale(s.factor, m))
    });
    (base * all_dim.map_or(1.0, |m| m * m)) as f32
}

struct DecoderLayer {
    input_ln: Vec<f32>,
    attn: Mla,
    post_ln: Vec<f32>,
    ffn: FeedForward,
}

pub struct DeepseekModel<B: Backend> {
    pub config: DeepseekConfig,
    pub capacity: Capacity,
    backend: Arc<B>,
    /// `[vocab, hidden]`: gathered by token, and the lm_head when tied.
    embed: Linear,
    layers: Vec<DecoderLayer>,
    norm: Vec<f32>,
    /// None: tied to the embeddings.
    lm_head: Option<Linear>,
    shape: MlaShape,
    /// What `rope` was computed from, to extend it to a longer context.
    rope_params: RopeParams,
    rope: RopeRows,
    pub inputs: StepInputs<B>,
    pub logits: B::Tensor,
    pub capture: Option<Capture<B>>,
    /// One way of attending for every forward (tests compare them); `None`: decompress where
    /// the forward's own tokens are at least half the slots it reads (a prefill), else absorb.
    pub attend: Option<Attend>,
}

impl<B: Backend> DeepseekModel<B> {
    /// Load the text model's tensors; the MTP layer (index `num_hidden_layers`) and a
    /// wrapper's vision parts stay unread.
    pub fn load(backend: Arc<B>, config: &DeepseekTargetConfig, ld: &mut Loader<'_, B>, cap: Capacity) -> Result<Self, BackendError> {
        let c = &config.text;
        let p = c.prefix();
        ld.check_layers(&format!("{p}model.layers."), "num_hidden_layers", c.layers)?;
        let embed = Linear::load(ld, &format!("{p}model.embed_tokens.weight"), c.vocab, c.hidden)?;
        let mut layers = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            let l = format!("{p}model.layers.{i}.");
            layers.push(DecoderLayer {
                input_ln: ld.host_f32(&format!("{l}input_layernorm.weight"), &[c.hidden])?,
                attn: Mla::load(ld, &format!("{l}self_attn."), c)?,
                post_ln: ld.host_f32(&format!("{l}post_attention_layernorm.weight"), &[c.hidden])?,
                ffn: FeedForward::load(ld, &format!("{l}mlp."), c, i)?,
            });
        }
        let norm = ld.host_f32(&format!("{p}model.norm.weight"), &[c.hidden])?;
        let head = format!("{p}lm_head.weight");
        let lm_head = if c.tie_embeddings && !ld.has(&head) { None } else { Some(Linear::load(ld, &head, c.vocab, c.hidden)?) };
        let (cos, sin) = config.rope.cos_sin(cap.positions);
        let b = &*backend;
        Ok(DeepseekModel {
            inputs: StepInputs::new(b, cap.rows)?,
            logits: b.tensor(cap.logit_rows, c.vocab)?,
            shape: MlaShape::new(c, config.softmax_scale),
            rope_params: config.rope.clone(),
            rope: RopeRows { cos, sin, half: c.qk_rope_head_dim / 2 },
            capture: None,
            attend: None,
            config: c.clone(),
            capacity: cap,
            embed,
            layers,
            norm,
            lm_head,
            backend,
        })
    }

    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// Weight elements as loaded: the text model's, all experts counted.
    pub fn parameters(&self) -> u64 {
        self.elements(None)
    }

    /// Bytes of weights one decode step reads: each MoE layer's router, shared experts and
    /// `num_experts_per_tok` routed experts, in f32.
    pub fn weight_bytes(&self) -> u64 {
        4 * self.elements(Some(self.config.moe.per_token))
    }

    fn elements(&self, routed: Option<usize>) -> u64 {
        let layers: usize =
            self.layers.iter().map(|l| l.input_ln.len() + l.attn.elements() + l.post_ln.len() + l.ffn.elements(routed)).sum();
        (self.embed.elements() + layers + self.norm.len() + self.lm_head.as_ref().map_or(0, Linear::elements)) as u64
    }

    /// f32 bytes of one token's latent over all layers.
    pub fn kv_bytes_per_token(&self) -> u64 {
        (self.config.layers * self.shape.width()) as u64 * 4
    }

    /// Cover positions `0 .. positions` with cos and sin; a table that covers them stays.
    pub fn ensure_positions(&mut self, positions: usize) {
        if positions > self.capacity.positions {
            let (cos, sin) = self.rope_params.cos_sin(positions);
            self.rope.cos = cos;
            self.rope.sin = sin;
            self.capacity.positions = positions;
        }
    }

    /// The latent cache: `kv_lora_rank + qk_rope_head_dim` values per token per layer.
    pub fn new_kv(&self, slots: usize) -> Result<KvCache<B>, BackendError> {
        KvCache::latent(&*self.backend, self.config.layers, slots, self.shape.width())
    }

    /// Capture the inputs of `layers` (ascending) from now on; `None` stops capturing.
    pub fn set_capture(&mut self, layers: Option<Vec<usize>>) -> Result<(), BackendError> {
        self.capture = match layers {
            Some(layers) => Some(Capture { aux: self.backend.tensor(self.capacity.rows, layers.len() * self.config.hidden)?, layers }),
            None => None,
        };
        Ok(())
    }

    /// Run `window.queries` tokens (ids and positions already in `self.inputs`).
    pub fn forward(&mut self, kv: &mut KvCache<B>, window: AttnWindow, mask: Mask<'_, B>, logits: Logits) -> Result<(), BackendError> {
        let n = window.queries;
        assert!(n > 0 && n <= self.capacity.rows, "forward of {n} rows (capacity {})", self.capacity.rows);
        let slots = window.prefix + window.region;
        assert!(slots <= kv.slots, "KV cache of {} slots is too small", kv.slots);
        let b = &*self.backend;
        let (c, hd, width) = (&self.config, self.config.hidden, self.shape.width());
        let ids = b.read_ids(&self.inputs.ids, n)?;
        let positions: Vec<usize> = b.read_ids(&self.inputs.positions, n)?.into_iter().map(|p| p as usize).collect();
        let mask = match mask {
            Mask::Causal => None,
            Mask::Explicit(m) => Some(b.read_ids(m, n * window.region)?),
        };
        let vis = Visibility { window, mask: mask.as_deref() };
        let attend = self.attend.unwrap_or(if 2 * n >= slots { Attend::Decompressed } else { Attend::Absorbed });
        let mut h: Vec<f32> = ids.iter().flat_map(|&t| self.embed.row(t as usize)).copied().collect();
        let captured = self.capture.as_ref().map_or(0, |cap| cap.layers.len());
        let mut aux = vec![0.0; n * captured * hd];
        let first = window.first_new_slot();
        for (i, layer) in self.layers.iter().enumerate() {
            if let Some(k) = self.capture.as_ref().and_then(|cap| cap.layers.iter().position(|&l| l == i)) {
                for (row, out) in h.chunks_exact(hd).zip(aux.chunks_exact_mut(captured * hd)) {
                    out[k * hd..][..hd].copy_from_slice(row);
                }
            }
            let mut cache = b.read_rows(&kv.k[i], 0, slots)?;
            let x = rms_norm(&h, &layer.input_ln, c.eps);
            add(&mut h, &layer.attn.forward(&self.shape, &self.rope, &x, &positions, &mut cache, &vis, attend));
            let written = b.tensor_from(width, &cache[first * width..(first + n) * width])?;
            b.copy_rows(&written, 0, &mut kv.k[i], first, n);
            let x = rms_norm(&h, &layer.post_ln, c.eps);
            add(&mut h, &layer.ffn.forward(&c.moe, &x, n));
        }
        if let Some(cap) = self.capture.as_mut() {
            cap.aux = b.tensor_from(captured * hd, &aux)?;
        }
        let rows = match logits {
            Logits::None => return Ok(()),
            Logits::Last => &h[(n - 1) * hd..],
            Logits::All => &h[..],
        };
        let normed = rms_norm(rows, &self.norm, c.eps);
        let out = self.lm_head.as_ref().unwrap_or(&self.embed).apply(&normed, rows.len() / hd);
        self.logits = b.tensor_from(c.vocab, &out)?;
        Ok(())
    }
}
