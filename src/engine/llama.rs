//! Llama-family decoder models over the backend seam: Llama (with llama3 or YaRN rope
//! scaling), Qwen2 (q/k/v bias) and Qwen3 (per-head q/k RMSNorm); tied or separate lm_head;
//! GQA. Used as the target and as a STANDALONE drafter. A target can capture the residual
//! stream at the input of chosen layers for an EAGLE-3 drafter.

use std::sync::Arc;

use serde_json::Value;

use crate::backend::rope::{yarn_mscale, RopeParams, RopeScaling};
use crate::backend::{
    AttnGeometry, AttnWindow, Backend, BackendError, KvDtype, KvStore, Mask, PagedBatch, PagedScratch, Projection, RopeStyle, RopeTable,
    Shard,
};
use crate::engine::kv::KvCache;
use crate::engine::weights::Loader;
use crate::model::config::{ConfigError, ModelConfig};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Llama,
    Qwen2,
    Qwen3,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub family: Family,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub eps: f32,
    pub rope: RopeParams,
    pub qkv_bias: bool,
    pub qk_norm: bool,
    pub tie_embeddings: bool,
}

pub(crate) fn required(cfg: &ModelConfig, key: &str) -> Result<usize, ConfigError> {
    let f = cfg.require_u64(key)?;
    if f.value == 0 {
        return Err(cfg.wrong_type(&f.pointer, &Value::from(0), "a positive integer"));
    }
    usize::try_from(f.value)
        .map_err(|_| cfg.out_of_range(&f.pointer, f.value, format!("exceeds what this engine addresses ({})", usize::MAX)))
}

/// The most elements one weight may have: Rust's largest allocation (isize::MAX bytes) of
/// f32, the widest element the backends hold.
const MAX_TENSOR_ELEMENTS: u128 = isize::MAX as u128 / 4;

/// Refuse sizes whose product (one weight's element count) no allocation could hold, so
/// the shapes built from them never overflow; the error names the first key.
pub(crate) fn check_tensor_size(cfg: &ModelConfig, dims: &[(&str, usize)]) -> Result<(), ConfigError> {
    let elements = dims.iter().try_fold(1u128, |acc, (_, d)| acc.checked_mul(*d as u128));
    if elements.is_some_and(|e| e <= MAX_TENSOR_ELEMENTS) {
        return Ok(());
    }
    let (key, value) = dims[0];
    let factors: Vec<String> = dims.iter().map(|(k, d)| format!("{k} {d}")).collect();
    Err(cfg.out_of_range(
        &cfg.locate(key).unwrap_or_else(|| format!("/{key}")),
        value,
        format!(
            "exceeds what this engine loads: {} make a weight of more than {MAX_TENSOR_ELEMENTS} elements (isize::MAX bytes of f32)",
            factors.join(" × ")
        ),
    ))
}

/// `head_dim` when given (at least 1), else hidden / heads.
pub(crate) fn head_dim(cfg: &ModelConfig, hidden: usize, heads: usize) -> Result<usize, ConfigError> {
    match cfg.positive_u64("head_dim")? {
        Some(f) => Ok(f.value as usize),
        None => Ok(hidden / heads),
    }
}

/// The model's RoPE from `rope_theta` (default 10000) and `rope_scaling`/`rope_parameters`.
pub fn rope_from_config(cfg: &ModelConfig, head_dim: usize) -> Result<RopeParams, ConfigError> {
    let theta = cfg.rope_theta()?.map(|f| f.value).unwrap_or(10000.0);
    let scaling = match cfg.rope_scaling() {
        None => RopeScaling::None,
        Some(s) => {
            let num = |key: &str, default: Option<f64>| -> Result<f64, ConfigError> {
                let pointer = format!("{}/{key}", s.pointer);
                match s.raw.get(key).filter(|v| !v.is_null()) {
                    Some(v) => v.as_f64().ok_or_else(|| cfg.wrong_type(&pointer, v, "a number")),
                    None => default.ok_or_else(|| ConfigError::Missing { file: cfg.file.clone(), key: pointer }),
                }
            };
            match s.kind.as_str() {
                "default" => RopeScaling::None,
                "linear" => RopeScaling::Linear { factor: num("factor", None)? },
                "llama3" => RopeScaling::Llama3 {
                    factor: num("factor", None)?,
                    low_freq_factor: num("low_freq_factor", Some(1.0))?,
                    high_freq_factor: num("high_freq_factor", Some(4.0))?,
                    original_max_positions: num("original_max_position_embeddings", Some(8192.0))?,
                },
                "yarn" => {
                    let factor = num("factor", None)?;
                    let max_pos = cfg.u64("max_position_embeddings")?.map(|f| f.value as f64);
                    let attn_factor = num("attn_factor", Some(1.0))?;
                    // DeepSeek-style configs give both mscales; SGLang divides one by the other.
                    let mscale = match (s.raw.get("mscale"), s.raw.get("mscale_all_dim")) {
                        (Some(_), Some(_)) => yarn_mscale(factor, num("mscale", None)?) / yarn_mscale(factor, num("mscale_all_dim", None)?),
                        _ => yarn_mscale(factor, 1.0),
                    };
                    RopeScaling::Yarn {
                        factor,
                        original_max_positions: num("original_max_position_embeddings", max_pos)?,
                        beta_fast: num("beta_fast", Some(32.0))?,
                        beta_slow: num("beta_slow", Some(1.0))?,
                        mscale: mscale * attn_factor,
                    }
                }
                _ => {
                    return Err(cfg.wrong_type(
                        &format!("{}/rope_type", s.pointer),
                        &Value::from(s.kind.clone()),
                        "a supported rope scaling (default, linear, llama3, yarn)",
                    ))
                }
            }
        }
    };
    Ok(RopeParams { theta, head_dim, scaling, style: RopeStyle::NeoX })
}

impl LlamaConfig {
    pub fn from_config(cfg: &ModelConfig) -> Result<LlamaConfig, ConfigError> {
        let model_type = cfg.model_type().ok_or_else(|| ConfigError::Missing { file: cfg.file.clone(), key: "/model_type".into() })?;
        let family = match model_type.value.as_str() {
            "llama" | "mistral" => Family::Llama,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            other => return Err(cfg.wrong_type(&model_type.pointer, &Value::from(other), "llama, mistral, qwen2 or qwen3")),
        };
        if let Some(act) = cfg.str("hidden_act") {
            if act.value != "silu" {
                return Err(cfg.wrong_type(&act.pointer, &Value::from(act.value.clone()), "silu"));
            }
        }
        let hidden = required(cfg, "hidden_size")?;
        let heads = required(cfg, "num_attention_heads")?;
        let kv_heads = cfg.num_key_value_heads()?.map(|f| f.value as usize).unwrap_or(heads);
        if kv_heads == 0 || heads % kv_heads != 0 {
            let f = cfg.value("num_key_value_heads").map(|f| (f.pointer, f.value)).unwrap_or(("/num_key_value_heads".into(), Value::Null));
            return Err(cfg.wrong_type(&f.0, &f.1, "a divisor of num_attention_heads"));
        }
        let head_dim = head_dim(cfg, hidden, heads)?;
        let (intermediate, vocab) = (required(cfg, "intermediate_size")?, required(cfg, "vocab_size")?);
        check_tensor_size(cfg, &[("num_attention_heads", heads), ("head_dim", head_dim), ("hidden_size", hidden)])?;
        check_tensor_size(cfg, &[("intermediate_size", intermediate), ("hidden_size", hidden)])?;
        check_tensor_size(cfg, &[("vocab_size", vocab), ("hidden_size", hidden)])?;
        let bias_default = family == Family::Qwen2;
        Ok(LlamaConfig {
            family,
            hidden,
            layers: required(cfg, "num_hidden_layers")?,
            heads,
            kv_heads,
            head_dim,
            intermediate,
            vocab,
            eps: cfg.rms_norm_eps()? as f32,
            rope: rope_from_config(cfg, head_dim)?,
            qkv_bias: cfg.bool("attention_bias").map(|f| f.value).unwrap_or(bias_default),
            qk_norm: family == Family::Qwen3,
            tie_embeddings: cfg.tie_word_embeddings(),
        })
    }

    pub fn geometry(&self) -> AttnGeometry {
        AttnGeometry { heads: self.heads, kv_heads: self.kv_heads, head_dim: self.head_dim, scale: 1.0 / (self.head_dim as f32).sqrt() }
    }

    /// SGLang's default EAGLE-3 capture layers `[2, L/2, L-3]` (inputs of those layers).
    pub fn default_capture_layers(&self) -> Vec<usize> {
        let l = self.layers;
        vec![2, l / 2, l.saturating_sub(3)]
    }
}

/// Buffer sizes fixed at load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Most tokens in one forward (a prefill chunk, a verify tree, a draft level).
    pub rows: usize,
    /// Most rows that need logits in one forward.
    pub logit_rows: usize,
    /// Positions covered by the RoPE table.
    pub positions: usize,
}

/// Which rows of a forward get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    None,
    Last,
    All,
}

pub(crate) struct Attention<B: Backend> {
    pub q: B::Weight,
    pub k: B::Weight,
    pub v: B::Weight,
    pub o: B::Weight,
    pub q_bias: Option<B::Weight>,
    pub k_bias: Option<B::Weight>,
    pub v_bias: Option<B::Weight>,
    pub q_norm: Option<B::Weight>,
    pub k_norm: Option<B::Weight>,
}

pub(crate) struct Mlp<B: Backend> {
    pub gate: B::Weight,
    pub up: B::Weight,
    pub down: B::Weight,
}

pub(crate) struct Layer<B: Backend> {
    pub input_ln: B::Weight,
    pub attn: Attention<B>,
    pub post_ln: B::Weight,
    pub mlp: Mlp<B>,
}

/// Shapes of one decoder layer's tensors, for loading (the whole model's; `for_rank` gives
/// one tensor-parallel rank's).
#[derive(Clone, Copy)]
pub(crate) struct LayerShape {
    pub hidden: usize,
    /// Width of the attention input (2×hidden for EAGLE-3's fused layer).
    pub attn_in: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub qkv_bias: bool,
    pub qk_norm: bool,
}

impl<B: Backend> Layer<B> {
    pub(crate) fn load(ld: &mut Loader<'_, B>, prefix: &str, s: &LayerShape) -> Result<Self, BackendError> {
        let (q_out, kv_out) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
        let name = |t: &str| format!("{prefix}{t}");
        let bias = |ld: &mut Loader<'_, B>, t: &str, len: usize| -> Result<Option<B::Weight>, BackendError> {
            if s.qkv_bias {
                ld.weight(&name(t), &[len], Shard::Column).map(Some)
            } else {
                Ok(None)
            }
        };
        let norm = |ld: &mut Loader<'_, B>, t: &str| -> Result<Option<B::Weight>, BackendError> {
            if s.qk_norm {
                ld.weight(&name(t), &[s.head_dim], Shard::Replicated).map(Some)
            } else {
                Ok(None)
            }
        };
        let (qn, kn, vn) = (name("self_attn.q_proj.weight"), name("self_attn.k_proj.weight"), name("self_attn.v_proj.weight"));
        let [q, k, v] =
            ld.stacked([(&qn, &[q_out, s.attn_in]), (&kn, &[kv_out, s.attn_in]), (&vn, &[kv_out, s.attn_in])], Shard::Column)?;
        let (gn, un) = (name("mlp.gate_proj.weight"), name("mlp.up_proj.weight"));
        Ok(Layer {
            input_ln: ld.weight(&name("input_layernorm.weight"), &[s.hidden], Shard::Replicated)?,
            attn: Attention {
                q,
                k,
                v,
                o: ld.weight(&name("self_attn.o_proj.weight"), &[s.hidden, q_out], Shard::Row)?,
                q_bias: bias(ld, "self_attn.q_proj.bias", q_out)?,
                k_bias: bias(ld, "self_attn.k_proj.bias", kv_out)?,
                v_bias: bias(ld, "self_attn.v_proj.bias", kv_out)?,
                q_norm: norm(ld, "self_attn.q_norm.weight")?,
                k_norm: norm(ld, "self_attn.k_norm.weight")?,
            },
            post_ln: ld.weight(&name("post_attention_layernorm.weight"), &[s.hidden], Shard::Replicated)?,
            mlp: {
                let [gate, up] = ld.stacked([(&gn, &[s.intermediate, s.hidden]), (&un, &[s.intermediate, s.hidden])], Shard::Column)?;
                Mlp { gate, up, down: ld.weight(&name("mlp.down_proj.weight"), &[s.hidden, s.intermediate], Shard::Row)? }
            },
        })
    }
}

/// Scratch buffers for the attention and MLP halves of a layer, sized at load.
pub(crate) struct LayerScratch<B: Backend> {
    pub q: B::Tensor,
    pub k: B::Tensor,
    pub v: B::Tensor,
    pub attn: B::Tensor,
    pub gate: B::Tensor,
    pub up: B::Tensor,
    pub act: B::Tensor,
    /// The norm of the residual stream that a matmul reads, `[rows, hidden]`.
    pub normed: B::Tensor,
    /// Output of o_proj / down_proj, `[rows, hidden]`.
    pub delta: B::Tensor,
    /// For a batched forward over a paged pool on a backend that gathers (`LlamaModel::set_batch_capacity`).
    pub paged: Option<PagedScratch<B>>,
}

impl<B: Backend> LayerScratch<B> {
    pub(crate) fn new(b: &B, rows: usize, s: &LayerShape) -> Result<Self, BackendError> {
        let (q_out, kv_out) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
        let widest_in = s.attn_in.max(s.hidden).max(q_out).max(s.intermediate);
        b.reserve_matmuls(rows, widest_in, (q_out + 2 * kv_out).max(2 * s.intermediate))?;
        Ok(LayerScratch {
            q: b.tensor(rows, q_out)?,
            k: b.tensor(rows, kv_out)?,
            v: b.tensor(rows, kv_out)?,
            attn: b.tensor(rows, q_out)?,
            gate: b.tensor(rows, s.intermediate)?,
            up: b.tensor(rows, s.intermediate)?,
            act: b.tensor(rows, s.intermediate)?,
            normed: b.tensor(rows, s.hidden)?,
            delta: b.tensor(rows, s.hidden)?,
            paged: None,
        })
    }
}

/// Which KV a layer's queries attend over.
pub(crate) enum Attend<'a, B: Backend> {
    /// One sequence at contiguous slots.
    Window { window: AttnWindow, mask: Mask<'a, B> },
    /// Several sequences, each at its slots of a paged pool; the rows are theirs in order.
    Paged(&'a PagedBatch<'a, B>),
}

impl<B: Backend> Attend<'_, B> {
    fn rows(&self) -> usize {
        match self {
            Attend::Window { window, .. } => window.queries,
            Attend::Paged(batch) => batch.rows,
        }
    }
}

/// Everything one layer's forward needs besides the weights.
pub(crate) struct LayerStep<'a, B: Backend> {
    pub geometry: AttnGeometry,
    pub eps: f32,
    pub rope: &'a RopeTable<B>,
    pub positions: &'a B::Ids,
    pub attend: Attend<'a, B>,
}

/// What a layer's attention reads.
pub(crate) enum AttnInput<'a, B: Backend> {
    /// The layer's input norm of the residual stream (a decoder layer).
    Residual,
    /// Rows the caller prepared, `[n, attn_in]` (EAGLE-3's `[norm(embed); norm(hidden)]`).
    Rows(&'a B::Tensor),
}

impl<B: Backend> Layer<B> {
    /// Attention on `input`, its output added to the residual stream `h`, then the MLP on
    /// the post-attention norm of `h`, its output added to `h` as well.
    pub(crate) fn forward(
        &self,
        b: &B,
        st: &LayerStep<'_, B>,
        kv: (&mut B::Tensor, &mut B::Tensor),
        input: AttnInput<'_, B>,
        h: &mut B::Tensor,
        s: &mut LayerScratch<B>,
    ) {
        let n = st.attend.rows();
        let a = &self.attn;
        let x = match input {
            AttnInput::Residual => {
                b.rms_norm(h, &self.input_ln, st.eps, n, &mut s.normed);
                &s.normed
            }
            AttnInput::Rows(x) => x,
        };
        // Fused where the backend can (one launch for q, k and v, RoPE and the cache write;
        // o with the residual add; gate, up and SiLU; down with the residual add): a decode
        // step is mostly launches of little work.
        let mut qkv = [
            Projection { w: &a.q, bias: a.q_bias.as_ref(), out: &mut s.q },
            Projection { w: &a.k, bias: a.k_bias.as_ref(), out: &mut s.k },
            Projection { w: &a.v, bias: a.v_bias.as_ref(), out: &mut s.v },
        ];
        let qk_norm = a.q_norm.as_ref().zip(a.k_norm.as_ref());
        match &st.attend {
            Attend::Window { window, mask } => {
                let slot = window.first_new_slot();
                if let Some((qn, kn)) = qk_norm {
                    // Qwen3 normalises each q and k head between the projection and RoPE.
                    b.matmul_many(x, n, &mut qkv);
                    b.head_rms_norm(&mut s.q, qn, st.eps, n);
                    b.head_rms_norm(&mut s.k, kn, st.eps, n);
                    b.rope_store_kv(&mut s.q, &mut s.k, &s.v, st.rope, st.positions, n, (&mut *kv.0, &mut *kv.1), slot);
                } else {
                    let store = KvStore { table: st.rope, positions: st.positions, cache: (&mut *kv.0, &mut *kv.1), slot };
                    b.qkv_rope_store_kv(x, n, &mut qkv, store);
                }
                b.attention(&s.q, kv.0, kv.1, &st.geometry, *window, *mask, &mut s.attn);
            }
            Attend::Paged(batch) => {
                if let Some((qn, kn)) = qk_norm {
                    b.matmul_many(x, n, &mut qkv);
                    b.head_rms_norm(&mut s.q, qn, st.eps, n);
                    b.head_rms_norm(&mut s.k, kn, st.eps, n);
                    b.rope(&mut s.q, st.rope, st.positions, n);
                    b.rope(&mut s.k, st.rope, st.positions, n);
                } else {
                    b.qkv_rope(x, n, &mut qkv, st.rope, st.positions);
                }
                let scratch = s.paged.as_mut().expect("set_batch_capacity sizes the paged scratch");
                b.paged_attention_batch(&s.q, (&s.k, &s.v), (&mut *kv.0, &mut *kv.1), &st.geometry, batch, scratch, &mut s.attn);
            }
        }
        b.matmul_residual(&s.attn, &a.o, n, &mut s.delta, h);
        b.rms_norm(h, &self.post_ln, st.eps, n, &mut s.normed);
        b.gate_up_silu(&s.normed, &self.mlp.gate, &self.mlp.up, n, &mut s.gate, &mut s.up, &mut s.act);
        b.matmul_residual(&s.act, &self.mlp.down, n, &mut s.delta, h);
    }
}

/// Token ids and positions of the next forward, written by the caller before `forward`.
pub struct StepInputs<B: Backend> {
    pub ids: B::Ids,
    pub positions: B::Ids,
}

impl<B: Backend> StepInputs<B> {
    pub fn new(b: &B, rows: usize) -> Result<Self, BackendError> {
        Ok(StepInputs { ids: b.ids(rows)?, positions: b.ids(rows)? })
    }

    pub fn set(&mut self, b: &B, ids: &[u32], positions: &[usize]) {
        let ids: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
        b.write_ids(&mut self.ids, &ids);
        self.set_positions(b, positions);
    }

    /// The positions alone, where the ids are already on the device.
    pub fn set_positions(&mut self, b: &B, positions: &[usize]) {
        let pos: Vec<i32> = positions.iter().map(|&p| p as i32).collect();
        b.write_ids(&mut self.positions, &pos);
    }
}

/// The residual stream captured at the input of chosen layers, side by side: `[rows, k·hidden]`.
pub struct Capture<B: Backend> {
    /// Input-of-layer indices, ascending (the concatenation order).
    pub layers: Vec<usize>,
    pub aux: B::Tensor,
}

pub struct LlamaModel<B: Backend> {
    pub config: LlamaConfig,
    pub capacity: Capacity,
    backend: Arc<B>,
    pub(crate) embed: Arc<B::Weight>,
    pub(crate) lm_head: Arc<B::Weight>,
    layers: Vec<Layer<B>>,
    norm: B::Weight,
    rope: RopeTable<B>,
    pub inputs: StepInputs<B>,
    h: B::Tensor,
    /// The residual stream's last row, for the logits of that row alone.
    last: B::Tensor,
    scratch: LayerScratch<B>,
    pub logits: B::Tensor,
    pub capture: Option<Capture<B>>,
    weight_bytes: u64,
    /// This rank's heads (all of them at tp = 1).
    geometry: AttnGeometry,
    /// What `new_kv` keeps K and V in.
    kv_dtype: KvDtype,
    /// (rows, positions) the paged scratch holds, while there is one.
    paged_size: (usize, usize),
}

impl<B: Backend> LlamaModel<B> {
    pub fn load(backend: Arc<B>, config: LlamaConfig, ld: &mut Loader<'_, B>, cap: Capacity) -> Result<Self, BackendError> {
        let c = &config;
        ld.check_layers("model.layers.", "num_hidden_layers", c.layers)?;
        let embed = Arc::new(ld.weight("model.embed_tokens.weight", &[c.vocab, c.hidden], Shard::Replicated)?);
        let shape = layer_shape(c);
        let local = shape.for_rank(backend.tp_world())?;
        let mut layers = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            layers.push(Layer::load(ld, &format!("model.layers.{i}."), &shape)?);
        }
        let norm = ld.weight("model.norm.weight", &[c.hidden], Shard::Replicated)?;
        // A separate lm_head wins when present (GGUF conversions keep `output.weight` even
        // for tied models); otherwise tied embeddings stand in.
        let lm_head = match ld.optional("lm_head.weight", &[c.vocab, c.hidden], Shard::Replicated)? {
            Some(w) => Arc::new(w),
            None if c.tie_embeddings => embed.clone(),
            None => ld.weight("lm_head.weight", &[c.vocab, c.hidden], Shard::Replicated).map(Arc::new)?,
        };
        let b = &*backend;
        let mut weight_bytes = b.weight_bytes(&embed) + b.weight_bytes(&norm);
        if !Arc::ptr_eq(&lm_head, &embed) {
            weight_bytes += b.weight_bytes(&lm_head);
        }
        for l in &layers {
            weight_bytes += layer_bytes(b, l);
        }
        Ok(LlamaModel {
            rope: c.rope.table(b, cap.positions)?,
            inputs: StepInputs::new(b, cap.rows)?,
            h: b.tensor(cap.rows, c.hidden)?,
            last: b.tensor(1, c.hidden)?,
            scratch: LayerScratch::new(b, cap.rows, &local)?,
            logits: b.tensor(cap.logit_rows, c.vocab)?,
            geometry: AttnGeometry { heads: local.heads, kv_heads: local.kv_heads, ..c.geometry() },
            capture: None,
            embed,
            lm_head,
            layers,
            norm,
            weight_bytes,
            capacity: cap,
            kv_dtype: backend.kv_dtype(),
            paged_size: (0, 0),
            config,
            backend,
        })
    }

    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// Bytes of weights one decode step reads (the embedding gather aside).
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// Bytes of KV one token takes in this rank's cache.
    pub fn kv_bytes_per_token(&self) -> u64 {
        crate::engine::kv::bytes_per_token(self.config.layers, self.geometry.kv_heads * self.geometry.head_dim, self.kv_dtype)
    }

    pub fn kv_dtype(&self) -> KvDtype {
        self.kv_dtype
    }

    /// Keep the KV caches made from now on in `dtype` (`--kv-cache-dtype`); the gather
    /// scratch of batched forwards is sized again with them.
    pub fn set_kv_dtype(&mut self, dtype: KvDtype) {
        if dtype != self.kv_dtype {
            self.kv_dtype = dtype;
            self.scratch.paged = None;
        }
    }

    /// Cover positions `0 .. positions` with the RoPE table (a longer context than the one
    /// it was loaded for); a table that covers them already stays.
    pub fn ensure_positions(&mut self, positions: usize) -> Result<(), BackendError> {
        if positions > self.capacity.positions {
            self.rope = self.config.rope.table(&*self.backend, positions)?;
            self.capacity.positions = positions;
        }
        Ok(())
    }

    pub fn new_kv(&self, slots: usize) -> Result<KvCache<B>, BackendError> {
        KvCache::new(&*self.backend, self.config.layers, slots, self.geometry.kv_heads * self.geometry.head_dim, self.kv_dtype)
    }

    /// Capture the inputs of `layers` (ascending) from now on; `None` stops capturing.
    pub fn set_capture(&mut self, layers: Option<Vec<usize>>) -> Result<(), BackendError> {
        self.capture = match layers {
            Some(layers) => {
                let aux = self.backend.tensor(self.capacity.rows, layers.len() * self.config.hidden)?;
                Some(Capture { layers, aux })
            }
            None => None,
        };
        Ok(())
    }

    /// Run `window.queries` tokens (ids and positions already in `self.inputs`).
    pub fn forward(&mut self, kv: &mut KvCache<B>, window: AttnWindow, mask: Mask<'_, B>, logits: Logits) {
        let n = window.queries;
        assert!(window.prefix + window.region <= kv.slots, "KV cache of {} slots is too small", kv.slots);
        self.run_layers(kv, Attend::Window { window, mask });
        let b = &*self.backend;
        let c = &self.config;
        let (h, rows) = match logits {
            Logits::None => return,
            Logits::Last => {
                b.copy_rows(&self.h, n - 1, &mut self.last, 0, 1);
                (&self.last, 1)
            }
            Logits::All => {
                assert!(n <= self.capacity.logit_rows, "logits for {n} rows (capacity {})", self.capacity.logit_rows);
                (&self.h, n)
            }
        };
        b.rms_norm(h, &self.norm, c.eps, rows, &mut self.scratch.normed);
        b.matmul(&self.scratch.normed, &self.lm_head, None, rows, &mut self.logits);
    }

    /// Run a batch of sequences over the paged pool `kv`: the ids and positions of all its
    /// rows are in `self.inputs`, each sequence's at its `row`. Logits of the rows
    /// `logit_rows` land in rows `0..` of `self.logits`, in that order.
    pub fn forward_batch(&mut self, kv: &mut KvCache<B>, batch: &PagedBatch<'_, B>, logit_rows: &[usize]) {
        self.run_layers(kv, Attend::Paged(batch));
        let n = logit_rows.len();
        if n == 0 {
            return;
        }
        assert!(n <= self.capacity.logit_rows, "logits for {n} rows (capacity {})", self.capacity.logit_rows);
        let b = &*self.backend;
        // The layers are done with `delta`: it holds the picked rows.
        b.gather_rows(&self.h, logit_rows, &mut self.scratch.delta);
        b.rms_norm(&self.scratch.delta, &self.norm, self.config.eps, n, &mut self.scratch.normed);
        b.matmul(&self.scratch.normed, &self.lm_head, None, n, &mut self.logits);
    }

    /// Embed the inputs and run every layer, capturing the residual stream where asked.
    fn run_layers(&mut self, kv: &mut KvCache<B>, attend: Attend<'_, B>) {
        let n = attend.rows();
        assert!(n > 0 && n <= self.capacity.rows, "forward of {n} rows (capacity {})", self.capacity.rows);
        let b = &*self.backend;
        let c = &self.config;
        b.embed(&self.embed, &self.inputs.ids, n, &mut self.h);
        let step = LayerStep { geometry: self.geometry, eps: c.eps, rope: &self.rope, positions: &self.inputs.positions, attend };
        for (i, layer) in self.layers.iter().enumerate() {
            if let Some(cap) = &mut self.capture {
                if let Some(slot) = cap.layers.iter().position(|&l| l == i) {
                    b.copy_cols(&self.h, n, &mut cap.aux, slot * c.hidden);
                }
            }
            layer.forward(b, &step, (&mut kv.k[i], &mut kv.v[i]), AttnInput::Residual, &mut self.h, &mut self.scratch);
        }
    }

    /// Size the buffers for batched forwards (`forward_batch`): `rows` rows a forward, logits
    /// for `logit_rows` of them, and one sequence's `seq_rows` queries over `positions`
    /// positions for a backend that gathers the pool. Buffers already large enough stay.
    pub fn set_batch_capacity(&mut self, rows: usize, logit_rows: usize, seq_rows: usize, positions: usize) -> Result<(), BackendError> {
        let b = self.backend.clone();
        if rows > self.capacity.rows {
            let local = layer_shape(&self.config).for_rank(b.tp_world())?;
            self.inputs = StepInputs::new(&*b, rows)?;
            self.h = b.tensor(rows, self.config.hidden)?;
            self.scratch = LayerScratch::new(&*b, rows, &local)?;
            self.capacity.rows = rows;
            let layers = self.capture.as_ref().map(|c| c.layers.clone());
            self.set_capture(layers)?;
        }
        if logit_rows > self.capacity.logit_rows {
            self.logits = b.tensor(logit_rows, self.config.vocab)?;
            self.capacity.logit_rows = logit_rows;
        }
        self.ensure_positions(positions)?;
        // Buffers that already hold the sizes stay where they are: graph steps captured at
        // launch over them (`scheduler::capture_steps`) replay when serving starts.
        let (rows_now, positions_now) = self.paged_size;
        if self.scratch.paged.is_none() || seq_rows > rows_now || positions > positions_now {
            self.scratch.paged = Some(PagedScratch::new(&*b, seq_rows, positions, &self.geometry, self.kv_dtype)?);
            self.paged_size = (seq_rows, positions);
        }
        Ok(())
    }

    /// The final pre-norm hidden states of the last forward, `[rows, hidden]`.
    pub fn final_hidden(&self) -> &B::Tensor {
        &self.h
    }
}

pub(crate) fn layer_shape(c: &LlamaConfig) -> LayerShape {
    LayerShape {
        hidden: c.hidden,
        attn_in: c.hidden,
        heads: c.heads,
        kv_heads: c.kv_heads,
        head_dim: c.head_dim,
        intermediate: c.intermediate,
        qkv_bias: c.qkv_bias,
        qk_norm: c.qk_norm,
    }
}

pub(crate) fn layer_bytes<B: Backend>(b: &B, l: &Layer<B>) -> u64 {
    let a = &l.attn;
    let optional = [&a.q_bias, &a.k_bias, &a.v_bias, &a.q_norm, &a.k_norm];
    [&l.input_ln, &a.q, &a.k, &a.v, &a.o, &l.post_ln, &l.mlp.gate, &l.mlp.up, &l.mlp.down]
        .into_iter()
        .chain(optional.into_iter().flatten())
        .map(|w| b.weight_bytes(w))
        .sum()
}
