//! `memory-budget`: does the launch fit in `--mem-fraction-static` × GPU memory?
//!
//! Per GPU, the estimate is:
//!
//! - **weights ÷ TP**, target and drafter. From the safetensors headers (the sum of tensor
//!   byte sizes) when the folder has weights; otherwise from config.json:
//!   - embedding `V·H`, plus `V·H` for an untied lm_head;
//!   - attention per layer `H·nh·hd + 2·H·nkv·hd + nh·hd·H`; for MLA (`kv_lora_rank`),
//!     `H·q_lora + q_lora + q_lora·nh·(nope+rope)` (or `H·nh·(nope+rope)` without
//!     `q_lora_rank`) `+ H·(kv_lora+rope) + kv_lora + kv_lora·nh·(nope+v) + nh·v·H` (the
//!     `+ q_lora` and `+ kv_lora` are `q_a_layernorm` and `kv_a_layernorm`);
//!   - MLP per layer `3·H·I`; for MoE layers (after `first_k_dense_replace`)
//!     `(experts + shared)·3·H·I_moe + (H + 1)·experts` (the router and its correction bias);
//!   - an EAGLE-3 drafter: `fc` `H·n_aux·Ht`, one layer whose q/k/v read `2·H`, its MLP, and
//!     an lm_head of `draft_vocab_size` rows (none when absent: it uses the target's);
//!   - bytes per parameter: 1 for `quant_method: fp8`, `bits/8` for other quantized
//!     checkpoints, else 2 for bf16/fp16 and 4 for fp32 (`--dtype`, else the config's).
//! - **KV cache** for one request of the full context: the least a server must hold. Running
//!   requests share the paged pool (src/engine/paged.rs), as in SGLang, which admits them while
//!   its blocks last, so `--max-running-requests` does not multiply it. Per token: MLA targets keep
//!   the latent, `layers·(kv_lora_rank + qk_rope_head_dim)` elements, on every rank; others
//!   `layers·2·(nkv/TP, at least 1)·hd`. The drafter's own KV is added the same way. Bytes
//!   per element follow `--kv-cache-dtype` (fp8: 1), else the run dtype.
//! - **graph estimate** (rough): 512 MiB of fixed workspace plus, for the largest captured
//!   batch (`--cuda-graph-max-bs`, else 48) × tokens per verify step, f32 logits over the
//!   vocab shard and 16 hidden-sized activations.
//!
//! The budget is `--mem-fraction-static` (0.85 assumed when absent) × GPU memory (NVML, or
//! `--gpu-memory-gib`). Remedies: a larger `--tp-size`, a shorter `--context-length`.

use serde_json::{json, Value};

use crate::engine::context::target_context;
use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::model::config::{ConfigError, ModelConfig};
use crate::phase::PhaseId;
use crate::preflight::architecture::DraftFamily;
use crate::preflight::gpu::GIB;
use crate::preflight::inputs::ModelFiles;
use crate::preflight::parallel::{set_tp, splits_evenly, tp_capacity};
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::{Algorithm, SpecChange};

pub const ID: &str = "memory-budget";
pub const INCREASE_TP: &str = "increase-tp-size";
pub const SHORTEN_CONTEXT: &str = "reduce-context-length";

pub const ASSUMED_MEM_FRACTION: f64 = 0.85;
const DEFAULT_GRAPH_MAX_BS: f64 = 48.0;
const GRAPH_WORKSPACE_BYTES: f64 = 512.0 * 1024.0 * 1024.0;
/// Context lengths a remedy proposes are multiples of this.
const CONTEXT_STEP: u64 = 1024;

/// The sizes the estimate reads from a config.
struct Dims {
    hidden: f64,
    layers: f64,
    heads: f64,
    kv_heads: f64,
    head_dim: f64,
    intermediate: f64,
    vocab: f64,
    tied: bool,
    moe: Option<(f64, f64, f64, f64)>,
    /// (q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)
    mla: Option<(f64, f64, f64, f64, f64)>,
    /// Keys the estimate needed but did not find (counted as zero).
    missing: Vec<&'static str>,
}

impl Dims {
    fn read(cfg: &ModelConfig) -> Result<Dims, ConfigError> {
        let mut missing = Vec::new();
        let mut need = |key: &'static str| -> Result<f64, ConfigError> {
            let v = cfg.u64(key)?.map(|f| f.value as f64);
            if v.is_none() {
                missing.push(key);
            }
            Ok(v.unwrap_or(0.0))
        };
        let hidden = need("hidden_size")?;
        let layers = need("num_hidden_layers")?;
        let heads = need("num_attention_heads")?;
        let intermediate = need("intermediate_size")?;
        let vocab = need("vocab_size")?;
        let opt = |key: &str| -> Result<Option<f64>, ConfigError> { Ok(cfg.u64(key)?.map(|f| f.value as f64)) };
        let kv_heads = opt("num_key_value_heads")?.unwrap_or(heads);
        let head_dim = match opt("head_dim")? {
            Some(d) => d,
            None if heads > 0.0 => (hidden / heads).floor(),
            None => 0.0,
        };
        let moe = match cfg.routed_experts()? {
            Some(e) => Some((
                e.value as f64,
                opt("n_shared_experts")?.unwrap_or(0.0),
                opt("moe_intermediate_size")?.unwrap_or(intermediate),
                opt("first_k_dense_replace")?.unwrap_or(0.0),
            )),
            None => None,
        };
        let mla = match opt("kv_lora_rank")? {
            Some(kv_lora) => Some((
                opt("q_lora_rank")?.unwrap_or(0.0),
                kv_lora,
                opt("qk_nope_head_dim")?.unwrap_or(head_dim),
                opt("qk_rope_head_dim")?.unwrap_or(0.0),
                opt("v_head_dim")?.unwrap_or(head_dim),
            )),
            None => None,
        };
        Ok(Dims { hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, tied: cfg.tie_word_embeddings(), moe, mla, missing })
    }

    fn attention_params(&self, input: f64) -> f64 {
        let (h, nh) = (self.hidden, self.heads);
        match self.mla {
            Some((q_lora, kv_lora, nope, rope, v)) => {
                let q = if q_lora > 0.0 { input * q_lora + q_lora + q_lora * nh * (nope + rope) } else { input * nh * (nope + rope) };
                q + input * (kv_lora + rope) + kv_lora + kv_lora * nh * (nope + v) + nh * v * h
            }
            None => input * nh * self.head_dim + 2.0 * input * self.kv_heads * self.head_dim + nh * self.head_dim * h,
        }
    }

    fn dense_mlp_params(&self) -> f64 {
        3.0 * self.hidden * self.intermediate
    }

    /// MLP parameters over all layers: MoE layers after the first `first_k_dense_replace`.
    fn all_mlp_params(&self) -> f64 {
        match self.moe {
            Some((experts, shared, moe_i, dense)) => {
                let dense = dense.min(self.layers);
                let moe = (experts + shared) * 3.0 * self.hidden * moe_i + (self.hidden + 1.0) * experts;
                dense * self.dense_mlp_params() + (self.layers - dense) * moe
            }
            None => self.layers * self.dense_mlp_params(),
        }
    }

    /// A full decoder-only model.
    fn model_params(&self) -> f64 {
        let attention_and_norms = self.layers * (self.attention_params(self.hidden) + 2.0 * self.hidden);
        let embed = self.vocab * self.hidden * if self.tied { 1.0 } else { 2.0 };
        embed + attention_and_norms + self.all_mlp_params() + self.hidden
    }

    /// An EAGLE drafter: fc over `fc_in`, one layer reading `2·H`, its own lm_head rows.
    fn drafter_params(&self, fc_in: f64, lm_head_rows: f64) -> f64 {
        let h = self.hidden;
        h * fc_in + self.attention_params(2.0 * h) + self.dense_mlp_params() + 4.0 * h + lm_head_rows * h
    }

    /// KV elements per token on one rank.
    fn kv_elements_per_token(&self, tp: f64) -> f64 {
        match self.mla {
            Some((_, kv_lora, _, rope, _)) => self.layers * (kv_lora + rope),
            None => {
                let per_rank = if self.kv_heads >= tp { (self.kv_heads / tp).ceil() } else { 1.0 };
                self.layers * 2.0 * per_rank * self.head_dim
            }
        }
    }
}

/// Bytes per element at the dtype the launch runs in (`--dtype`, else the config's).
fn dtype_bytes(cfg: &ModelConfig, flag: Option<&str>) -> f64 {
    let name = flag.filter(|d| *d != "auto").map(str::to_string).or_else(|| cfg.dtype().map(|f| f.value)).unwrap_or_default();
    match name.as_str() {
        "float32" | "float" | "fp32" => 4.0,
        _ => 2.0,
    }
}

/// Bytes per KV element: `--kv-cache-dtype` (fp8 kinds 1, fp4 half a byte), else the run
/// dtype's, as SGLang's "auto" is.
fn kv_bytes(cfg: &ModelConfig, flag: Option<&str>, kv_dtype: Option<&str>) -> f64 {
    match kv_dtype {
        Some(d) if d.starts_with("fp8") => 1.0,
        Some(d) if d.starts_with("fp4") => 0.5,
        Some("bf16" | "bfloat16") => 2.0,
        _ => dtype_bytes(cfg, flag),
    }
}

/// Bytes per weight: quantized checkpoints by their bits, else the run dtype.
fn weight_bytes_per_param(cfg: &ModelConfig, flag: Option<&str>) -> f64 {
    let Some(q) = cfg.value("quantization_config").map(|f| f.value) else { return dtype_bytes(cfg, flag) };
    if q.get("quant_method").and_then(Value::as_str) == Some("fp8") {
        return 1.0;
    }
    let bits = q
        .get("bits")
        .and_then(Value::as_f64)
        .or_else(|| q.get("config_groups")?.as_object()?.values().find_map(|g| g.pointer("/weights/num_bits")?.as_f64()));
    bits.map(|b| b / 8.0).unwrap_or_else(|| dtype_bytes(cfg, flag))
}

/// Weight bytes of a model folder: from the headers, else from its config.
fn weight_bytes(files: &ModelFiles, cfg: &ModelConfig, params: f64, flag: Option<&str>) -> (f64, String) {
    match files.weight_bytes() {
        Some(b) => (b as f64, "safetensors headers".into()),
        None => {
            let per = weight_bytes_per_param(cfg, flag);
            (params * per, format!("config estimate: {:.2} B params × {per} bytes", params / 1e9))
        }
    }
}

/// The per-GPU estimate, recomputable at another TP size or context.
struct Estimate {
    target_weights: f64,
    target_source: String,
    draft_weights: f64,
    kv_bytes: f64,
    target: Dims,
    draft: Option<Dims>,
    tokens_per_step: f64,
    graph_bs: f64,
    weight_width: f64,
}

impl Estimate {
    fn kv_per_token(&self, tp: f64) -> f64 {
        let draft = self.draft.as_ref().map(|d| d.kv_elements_per_token(tp)).unwrap_or(0.0);
        (self.target.kv_elements_per_token(tp) + draft) * self.kv_bytes
    }

    fn graph(&self, tp: f64) -> f64 {
        let per_token = self.target.vocab / tp * 4.0 + 16.0 * self.target.hidden * self.weight_width;
        GRAPH_WORKSPACE_BYTES + self.graph_bs * self.tokens_per_step * per_token
    }

    /// Everything but the KV cache, per GPU.
    fn fixed(&self, tp: f64) -> f64 {
        (self.target_weights + self.draft_weights) / tp + self.graph(tp)
    }

    fn per_gpu(&self, tp: f64, context: f64) -> f64 {
        self.fixed(tp) + context * self.kv_per_token(tp)
    }
}

fn estimate(ctx: &RuleContext) -> Result<Estimate, ConfigError> {
    let spec = ctx.spec;
    let flag = spec.dtype.as_deref();
    let tcfg = &ctx.target.config;
    let target = Dims::read(tcfg)?;
    let (target_weights, target_source) = weight_bytes(ctx.target, tcfg, target.model_params(), flag);
    let speculating = ctx.algorithm != Algorithm::None;
    let (draft, draft_weights) = match ctx.draft.filter(|_| speculating) {
        Some(d) => {
            let dims = Dims::read(&d.effective)?;
            let params = match ctx.draft_kind.as_ref().map(|k| k.family) {
                Some(DraftFamily::Eagle3) => {
                    let n_aux = d.effective.eagle_aux_layer_ids()?.map(|f| f.value.len()).unwrap_or(3) as f64;
                    let ht = d.effective.target_hidden_size()?.map(|f| f.value as f64).unwrap_or(target.hidden);
                    let rows = d.effective.draft_vocab_size()?.map(|f| f.value as f64).unwrap_or(0.0);
                    dims.drafter_params(n_aux * ht, rows)
                }
                Some(DraftFamily::Eagle) => dims.drafter_params(2.0 * dims.hidden, 0.0),
                _ => dims.model_params(),
            };
            let (bytes, _) = weight_bytes(&d.files, &d.effective, params, flag);
            (Some(dims), bytes)
        }
        None => (None, 0.0),
    };
    let steps = spec.speculative_num_steps.map(f64::from).unwrap_or(3.0);
    let tokens_per_step = match (speculating, spec.speculative_num_draft_tokens) {
        (false, _) => 1.0,
        (true, Some(n)) => f64::from(n),
        (true, None) => steps + 1.0,
    };
    Ok(Estimate {
        target_weights,
        target_source,
        draft_weights,
        kv_bytes: kv_bytes(tcfg, flag, spec.kv_cache_dtype.as_deref()),
        target,
        draft,
        tokens_per_step,
        graph_bs: spec.cuda_graph_max_bs.map(f64::from).unwrap_or(DEFAULT_GRAPH_MAX_BS),
        weight_width: dtype_bytes(tcfg, flag),
    })
}

fn gib(bytes: f64) -> String {
    format!("{:.1} GiB", bytes / GIB)
}

pub fn check(ctx: &RuleContext) -> RuleResult {
    let est = estimate(ctx)?;
    let tgt_ctx = target_context(&ctx.target.config, ctx.spec)?;
    let tp = f64::from(ctx.spec.tp());
    let context = tgt_ctx.length as f64;
    let need = est.per_gpu(tp, context);
    let kv = context * est.kv_per_token(tp);
    let kv_kind = if est.target.mla.is_some() { "MLA latent, kv_lora_rank + qk_rope_head_dim per layer" } else { "K and V per layer" };
    let missing = if est.target.missing.is_empty() {
        String::new()
    } else {
        format!(" (not in the target config, counted as 0: {})", est.target.missing.join(", "))
    };
    let breakdown = format!(
        "target weights {} ÷ {tp} = {} ({}){missing}; drafter weights {} ÷ {tp} = {}; KV cache {} tokens (one request \
         of the full context) × {:.1} KiB/token ({kv_kind}) = {}; graph estimate {}",
        gib(est.target_weights),
        gib(est.target_weights / tp),
        est.target_source,
        gib(est.draft_weights),
        gib(est.draft_weights / tp),
        tgt_ctx.length,
        est.kv_per_token(tp) / 1024.0,
        gib(kv),
        gib(est.graph(tp)),
    );
    let fraction = ctx.spec.mem_fraction_static;
    let mut evidence = vec![ctx.launch_evidence("--tp-size", ctx.spec.tp()), tgt_ctx.evidence.clone()];
    evidence.push(ctx.launch_evidence("--mem-fraction-static", json!(fraction)));
    // With no GPU memory known (no NVML, no --gpu-memory-gib) there is no budget to judge:
    // the finding exists only for a launch that does not fit.
    let Some(memory) = ctx.gpus.memory_bytes.map(|m| m as f64) else { return Ok(Vec::new()) };
    let fraction_value = fraction.unwrap_or(ASSUMED_MEM_FRACTION);
    let budget = fraction_value * memory;
    if need <= budget {
        return Ok(Vec::new());
    }
    evidence.push(Evidence::new(Side::Launch, "GPU inventory", "memory per GPU (GiB)", json!((memory / GIB * 10.0).round() / 10.0)));
    let mut f = Finding::new(
        ID,
        Severity::Error,
        PhaseId::KvAlloc,
        format!(
            "The launch needs about {} per GPU, more than --mem-fraction-static {fraction_value}{} × {} = {} ({}): \
             {breakdown}.",
            gib(need),
            if fraction.is_none() { " (assumed)" } else { "" },
            gib(memory),
            gib(budget),
            ctx.gpus.source
        ),
    );
    f.evidence = evidence;
    if let Some(remedy) = larger_tp(ctx, &est, context, budget)? {
        f = f.with_remedy(remedy);
    }
    if let Some(remedy) = shorter_context(&est, tp, tgt_ctx.length, budget) {
        f = f.with_remedy(remedy);
    }
    Ok(vec![f])
}

/// The smallest power-of-two multiple of the TP size that fits, splits evenly and has GPUs.
fn larger_tp(ctx: &RuleContext, est: &Estimate, context: f64, budget: f64) -> Result<Option<Remedy>, ConfigError> {
    let tp = u64::from(ctx.spec.tp());
    let capacity = tp_capacity(ctx);
    for t in (1..=6).map(|k| tp << k).filter(|t| *t <= capacity) {
        if est.per_gpu(t as f64, context) <= budget && splits_evenly(ctx, t)? {
            return Ok(Some(set_tp(
                INCREASE_TP,
                t,
                format!("Spread the weights over {t} GPUs: about {} per GPU.", gib(est.per_gpu(t as f64, context))),
            )));
        }
    }
    Ok(None)
}

/// The longest context (a multiple of 1024) whose KV cache fits beside the weights.
fn shorter_context(est: &Estimate, tp: f64, current: u64, budget: f64) -> Option<Remedy> {
    let room = budget - est.fixed(tp);
    let per_token = est.kv_per_token(tp);
    if room <= 0.0 || per_token <= 0.0 {
        return None;
    }
    let fits = ((room / per_token) as u64) / CONTEXT_STEP * CONTEXT_STEP;
    (fits >= CONTEXT_STEP && fits < current).then(|| {
        Remedy::new(
            SHORTEN_CONTEXT,
            "--context-length",
            format!("Shorten the context to {fits} tokens so its KV cache fits beside the weights."),
            vec![SpecChange::SetFlag { flag: "--context-length".into(), value: fits.to_string() }],
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(v: Value) -> ModelConfig {
        ModelConfig::from_value("config.json", v)
    }

    #[test]
    fn bytes_per_weight_follow_the_quantization() {
        let fp8 = cfg(json!({"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8"}}));
        assert_eq!(weight_bytes_per_param(&fp8, None), 1.0);
        // compressed-tensors (Kimi-K2.5's int4 experts) names its bits per config group.
        let int4 = cfg(json!({"text_config": {"quantization_config": {"quant_method": "compressed-tensors",
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}}}}}));
        assert_eq!(weight_bytes_per_param(&int4, None), 0.5);
        let gptq = cfg(json!({"quantization_config": {"quant_method": "gptq", "bits": 8}}));
        assert_eq!(weight_bytes_per_param(&gptq, None), 1.0);
        let plain = cfg(json!({"torch_dtype": "bfloat16"}));
        assert_eq!(weight_bytes_per_param(&plain, None), 2.0);
        assert_eq!(weight_bytes_per_param(&plain, Some("float32")), 4.0);
    }

    #[test]
    fn moe_and_mla_parameter_counts() {
        // DeepSeek-V3's model card: 685B on Hugging Face = 671B main model + 14B MTP module
        // (which num_hidden_layers excludes). The estimate lands within 0.5% of 671B.
        let v3 = cfg(json!({"hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
            "intermediate_size": 18432, "moe_intermediate_size": 2048, "vocab_size": 129280,
            "n_routed_experts": 256, "n_shared_experts": 1, "first_k_dense_replace": 3,
            "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128}));
        let params = Dims::read(&v3).unwrap().model_params();
        assert!((params / 671e9 - 1.0).abs() < 0.005, "{params}");
    }

    /// The estimate from config.json counts exactly the parameters the engine loads, for
    /// every DeepSeek-V3-family fixture (the MTP layer and the Kimi wrapper's vision parts,
    /// which the engine leaves unread, are not in it).
    #[test]
    fn the_mla_moe_estimate_is_what_the_engine_loads() {
        use crate::backend::cpu::CpuBackend;
        use crate::engine::deepseek::{DeepseekModel, DeepseekTargetConfig};
        use crate::engine::llama::Capacity;
        use crate::engine::weights::Loader;
        use crate::model::checkpoint::Checkpoint;
        for case in ["dsv3-qlora", "dsv3-noqlora", "kimi-k25", "dsv3-fp8", "kimi-int4"] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/deepseek").join(case);
            let cfg = ModelConfig::load_dir(&dir).unwrap();
            let ck = Checkpoint::open(&dir).unwrap();
            let mut progress = |_| {};
            let mut ld = Loader::new(&CpuBackend, &ck, &mut progress);
            let config = DeepseekTargetConfig::from_config(&cfg).unwrap();
            let model =
                DeepseekModel::load(std::sync::Arc::new(CpuBackend), &config, &mut ld, Capacity { rows: 1, logit_rows: 1, positions: 1 })
                    .unwrap();
            let estimate = Dims::read(&cfg).unwrap().model_params();
            assert_eq!((estimate as u64, estimate.fract()), (model.parameters(), 0.0), "{case}");
            assert_eq!(config.text.parameters(), model.parameters(), "{case}");
        }
    }
}
