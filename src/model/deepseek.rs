//! The DeepSeek-V3 family's `config.json`: `DeepseekV3ForCausalLM` (model_type deepseek_v3 or
//! kimi_k2: DeepSeek-V3/R1, Kimi-K2, Moonlight) and the Kimi-K2.5 wrapper
//! `KimiK25ForConditionalGeneration`, whose text model sits under `text_config` and whose
//! weights sit under `language_model.` beside a vision tower the text model ignores.
//!
//! The keys are read as the real checkpoints write them (and as transformers'
//! `DeepseekV3Config` reads them): `q_lora_rank` null or set, the MLA ranks, the sigmoid
//! `noaux_tc` router over `n_group` groups, shared experts, the first dense layers.

use serde_json::Value;

use crate::model::config::{ConfigError, ModelConfig};
use crate::model::quantized::WeightFormats;

/// The wrapper class whose text model and weights sit one level down.
pub const KIMI_K25: &str = "KimiK25ForConditionalGeneration";
/// `model_type` values of the family's text model.
pub const MODEL_TYPES: [&str; 2] = ["deepseek_v3", "kimi_k2"];
/// Where the wrapper keeps the text model's tensors.
const WRAPPER_PREFIX: &str = "language_model.";

/// The MoE half of the config.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// `n_routed_experts`.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub per_token: usize,
    /// `n_group`: the experts split into this many groups of equal size.
    pub groups: usize,
    /// `topk_group`: the groups a token's experts are chosen from.
    pub topk_groups: usize,
    pub norm_topk_prob: bool,
    pub routed_scaling_factor: f32,
    /// `n_shared_experts`: one MLP of `n_shared_experts × moe_intermediate_size` every token runs.
    pub shared_experts: usize,
    /// `moe_intermediate_size`: the width of one routed expert.
    pub intermediate: usize,
    /// `first_k_dense_replace`: the first layers keep a dense MLP.
    pub first_dense: usize,
    /// `moe_layer_freq`: of the later layers, every this-many-th is MoE.
    pub layer_freq: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DeepseekConfig {
    /// `architectures[0]`, to tell the wrapper from the bare text model.
    pub architecture: String,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub vocab: usize,
    /// The dense layers' MLP width.
    pub intermediate: usize,
    /// None: q is one `q_proj`; else `q_a_proj`, `q_a_layernorm`, `q_b_proj`.
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
    pub moe: MoeConfig,
    pub eps: f32,
    pub tie_embeddings: bool,
    /// How quantized linear weights are laid out (`quantization_config`).
    pub weights: WeightFormats,
}

impl DeepseekConfig {
    /// Whether `cfg` is this family's (by the wrapper class or the text model's `model_type`).
    pub fn is_family(cfg: &ModelConfig) -> bool {
        cfg.architecture().is_some_and(|a| a.value == KIMI_K25) || cfg.model_type().is_some_and(|t| MODEL_TYPES.contains(&t.value.as_str()))
    }

    pub fn from_config(cfg: &ModelConfig) -> Result<DeepseekConfig, ConfigError> {
        if let Some(act) = cfg.str("hidden_act") {
            if act.value != "silu" {
                return Err(cfg.wrong_type(&act.pointer, &Value::from(act.value), "silu"));
            }
        }
        expect_str(cfg, "topk_method", "noaux_tc")?;
        expect_str(cfg, "scoring_func", "sigmoid")?;
        let experts = cfg.size("n_routed_experts")?;
        let groups = cfg.optional_size("n_group")?.unwrap_or(1);
        if experts % groups != 0 || experts / groups < 2 {
            let at = cfg.locate("n_group").unwrap_or_else(|| "/n_group".into());
            return Err(cfg.out_of_range(&at, groups, format!("must split n_routed_experts {experts} into groups of at least 2")));
        }
        let topk_groups = cfg.optional_size("topk_group")?.unwrap_or(groups);
        if topk_groups > groups {
            let at = cfg.locate("topk_group").unwrap_or_default();
            return Err(cfg.out_of_range(&at, topk_groups, format!("is more than n_group {groups}")));
        }
        let per_token = cfg.size("num_experts_per_tok")?;
        if per_token > topk_groups * (experts / groups) {
            let at = cfg.locate("num_experts_per_tok").unwrap_or_default();
            return Err(cfg.out_of_range(&at, per_token, format!("is more than the {topk_groups} chosen groups hold")));
        }
        let moe = MoeConfig {
            experts,
            per_token,
            groups,
            topk_groups,
            norm_topk_prob: cfg.bool("norm_topk_prob").is_some_and(|f| f.value),
            routed_scaling_factor: cfg.f64("routed_scaling_factor")?.map_or(1.0, |f| f.value) as f32,
            shared_experts: cfg.u64("n_shared_experts")?.map_or(0, |f| f.value as usize),
            intermediate: cfg.size("moe_intermediate_size")?,
            first_dense: cfg.u64("first_k_dense_replace")?.map_or(0, |f| f.value as usize),
            layer_freq: cfg.optional_size("moe_layer_freq")?.unwrap_or(1),
        };
        Ok(DeepseekConfig {
            architecture: cfg.architecture().map(|a| a.value).unwrap_or_default(),
            hidden: cfg.size("hidden_size")?,
            layers: cfg.size("num_hidden_layers")?,
            heads: cfg.size("num_attention_heads")?,
            vocab: cfg.size("vocab_size")?,
            intermediate: cfg.size("intermediate_size")?,
            q_lora_rank: cfg.optional_size("q_lora_rank")?,
            kv_lora_rank: cfg.size("kv_lora_rank")?,
            qk_nope_head_dim: cfg.size("qk_nope_head_dim")?,
            qk_rope_head_dim: cfg.size("qk_rope_head_dim")?,
            v_head_dim: cfg.size("v_head_dim")?,
            moe,
            eps: cfg.rms_norm_eps()? as f32,
            tie_embeddings: cfg.tie_word_embeddings(),
            weights: WeightFormats::from_config(cfg)?,
        })
    }

    /// The prefix of every text-model tensor: `language_model.` in the Kimi-K2.5 wrapper.
    pub fn prefix(&self) -> &'static str {
        if self.architecture == KIMI_K25 {
            WRAPPER_PREFIX
        } else {
            ""
        }
    }

    /// Whether layer `i` routes over experts (DeepSeek's rule: after the first dense layers,
    /// every `moe_layer_freq`-th).
    pub fn is_moe_layer(&self, i: usize) -> bool {
        i >= self.moe.first_dense && i % self.moe.layer_freq == 0
    }

    /// q and k's width per head.
    pub fn qk_head_dim(&self) -> usize {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }

    /// Values per token per layer in the latent KV cache.
    pub fn latent_width(&self) -> usize {
        self.kv_lora_rank + self.qk_rope_head_dim
    }

    /// Parameters of the text model as loaded (the MTP layer and any vision parts left out).
    pub fn parameters(&self) -> u64 {
        let (h, nh) = (self.hidden as u64, self.heads as u64);
        let q = match self.q_lora_rank {
            Some(r) => h * r as u64 + r as u64 + r as u64 * nh * self.qk_head_dim() as u64,
            None => h * nh * self.qk_head_dim() as u64,
        };
        let kv = self.kv_lora_rank as u64;
        let attention = q
            + h * self.latent_width() as u64
            + kv
            + kv * nh * (self.qk_nope_head_dim + self.v_head_dim) as u64
            + nh * self.v_head_dim as u64 * h;
        let m = &self.moe;
        let moe = (m.experts + m.shared_experts) as u64 * 3 * h * m.intermediate as u64 + (h + 1) * m.experts as u64;
        let dense = 3 * h * self.intermediate as u64;
        let mlps: u64 = (0..self.layers).map(|i| if self.is_moe_layer(i) { moe } else { dense }).sum();
        let embed = self.vocab as u64 * h * if self.tie_embeddings { 1 } else { 2 };
        embed + self.layers as u64 * (attention + 2 * h) + mlps + h
    }
}

/// A string key that, when present, must have the one value this engine implements.
fn expect_str(cfg: &ModelConfig, key: &str, want: &'static str) -> Result<(), ConfigError> {
    match cfg.str(key) {
        Some(f) if f.value != want => Err(cfg.wrong_type(&f.pointer, &Value::from(f.value), want)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn load(case: &str) -> ModelConfig {
        ModelConfig::load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/deepseek").join(case)).unwrap()
    }

    #[test]
    fn the_fixtures_read_as_transformers_reads_them() {
        let q = DeepseekConfig::from_config(&load("dsv3-qlora")).unwrap();
        assert_eq!((q.q_lora_rank, q.kv_lora_rank, q.qk_head_dim(), q.latent_width()), (Some(48), 32, 24, 40));
        assert_eq!((q.moe.groups, q.moe.topk_groups, q.moe.per_token, q.moe.norm_topk_prob), (4, 2, 2, true));
        assert_eq!((q.moe.routed_scaling_factor, q.moe.shared_experts, q.moe.first_dense), (2.5, 1, 1));
        assert_eq!((0..3).map(|i| q.is_moe_layer(i)).collect::<Vec<_>>(), [false, true, true]);
        assert_eq!(q.prefix(), "");
        let n = DeepseekConfig::from_config(&load("dsv3-noqlora")).unwrap();
        assert_eq!((n.q_lora_rank, n.moe.groups, n.moe.shared_experts, n.moe.norm_topk_prob), (None, 1, 2, false));
        let kimi_config = load("kimi-k25");
        assert!(DeepseekConfig::is_family(&kimi_config));
        let k = DeepseekConfig::from_config(&kimi_config).unwrap();
        assert_eq!(k.prefix(), "language_model.");
        assert_eq!(DeepseekConfig { architecture: q.architecture.clone(), ..k }, q);
    }

    #[test]
    fn a_router_this_engine_does_not_run_is_named_by_its_key() {
        let mut v = load("kimi-k25").root;
        v["text_config"]["scoring_func"] = Value::from("softmax");
        let e = DeepseekConfig::from_config(&ModelConfig::from_value("config.json", v)).unwrap_err().to_string();
        assert_eq!(e, "config.json: /text_config/scoring_func = \"softmax\" is not sigmoid");
    }
}
