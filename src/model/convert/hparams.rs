//! A GGUF's architecture and sizes, read from its metadata and checked against its tensors,
//! and the HF `config.json` / `generation_config.json` written from them.

use serde_json::{json, Map, Value as Json};

use super::ConvertError;
use crate::model::gguf::GgufFile;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
}

impl Arch {
    /// The GGUF metadata prefix (`llama.block_count`, ...).
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
        }
    }

    /// llama.cpp permutes Q/K rows only for the llama architecture.
    pub fn qk_permuted(self) -> bool {
        self == Arch::Llama
    }

    /// Qwen2 always has q/k/v biases; a llama has them only when the checkpoint did.
    pub fn requires_qkv_bias(self) -> bool {
        self == Arch::Qwen2
    }
}

/// The output element type of `model.safetensors`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutDtype {
    Bf16,
    F32,
}

impl OutDtype {
    pub fn parse(s: &str) -> Option<OutDtype> {
        match s {
            "bf16" | "bfloat16" => Some(OutDtype::Bf16),
            "f32" | "float32" => Some(OutDtype::F32),
            _ => None,
        }
    }

    pub fn torch_name(self) -> &'static str {
        match self {
            OutDtype::Bf16 => "bfloat16",
            OutDtype::F32 => "float32",
        }
    }

    pub fn size(self) -> u64 {
        match self {
            OutDtype::Bf16 => 2,
            OutDtype::F32 => 4,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Hparams {
    pub arch: Arch,
    pub n_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub context: u64,
    pub rms_eps: f64,
    pub rope_theta: f64,
    /// Rows of `token_embd.weight`.
    pub vocab: usize,
    /// No `output.weight`: the head shares the embeddings.
    pub tied: bool,
    /// `attn_q.bias` present.
    pub qkv_bias: bool,
    pub bos: Option<u64>,
    pub eos: Option<u64>,
    pub pad: Option<u64>,
    /// End-of-turn / end-of-message ids that also stop generation, when they differ from eos.
    pub extra_stop: Vec<u64>,
}

/// ggml caps a tensor's element count at i64::MAX.
const MAX_TENSOR_ELEMENTS: usize = i64::MAX as usize;

/// The layers a GGUF's tensors hold: the distinct N of `blk.N.` names.
fn layers_in(g: &GgufFile) -> usize {
    let ids: std::collections::BTreeSet<u64> =
        g.tensors().iter().filter_map(|t| t.name.strip_prefix("blk.")?.split_once('.')?.0.parse().ok()).collect();
    ids.len()
}

/// f32 metadata as the shortest decimal that round-trips (1e-5, not 9.999999747378752e-6).
fn tidy_f32(x: f64) -> f64 {
    (x as f32).to_string().parse().unwrap_or(x)
}

impl Hparams {
    pub fn read(g: &GgufFile) -> Result<Hparams, ConvertError> {
        let arch_key = "general.architecture";
        let arch = match g.require_str(arch_key)? {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            other => {
                return Err(ConvertError::Unsupported {
                    file: g.path.clone(),
                    key: arch_key.into(),
                    value: other.into(),
                    reason: "only llama and qwen2 models can be converted".into(),
                })
            }
        };
        let a = arch.gguf_name();
        let key = |k: &str| format!("{a}.{k}");
        let size = |k: &str| -> Result<usize, ConvertError> { Ok(g.require_u64(&key(k))? as usize) };
        let out_of_range =
            |k: &str, value: String, reason: String| ConvertError::Unsupported { file: g.path.clone(), key: key(k), value, reason };
        if let Some(kind) = g.str(&key("rope.scaling.type"))?.filter(|k| *k != "none") {
            return Err(ConvertError::Unsupported {
                file: g.path.clone(),
                key: key("rope.scaling.type"),
                value: kind.into(),
                reason: "rope scaling is not converted".into(),
            });
        }
        let hidden = size("embedding_length")?;
        let heads = size("attention.head_count")?;
        let kv_heads = match g.u64(&key("attention.head_count_kv"))? {
            Some(n) => n as usize,
            None => heads,
        };
        if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
            return Err(ConvertError::Unsupported {
                file: g.path.clone(),
                key: key("attention.head_count_kv"),
                value: format!("{kv_heads} (with {heads} attention heads)"),
                reason: "the attention heads must be a non-zero multiple of the key/value heads".into(),
            });
        }
        let head_dim = match g.u64(&key("attention.key_length"))? {
            Some(n) => n as usize,
            None => hidden / heads,
        };
        // Undoing llama.cpp's Q/K permutation pairs the two halves of each head.
        if arch.qk_permuted() && head_dim % 2 != 0 {
            return Err(ConvertError::Unsupported {
                file: g.path.clone(),
                key: key("embedding_length"),
                value: format!("{hidden} over {heads} heads (head_dim {head_dim})"),
                reason: "a llama head_dim must be even".into(),
            });
        }
        // Checked here, so the shapes built from these sizes never overflow.
        for (k, n) in [("attention.head_count", heads), ("attention.head_count_kv", kv_heads)] {
            if n.checked_mul(head_dim).and_then(|w| w.checked_mul(hidden.max(1))).is_none_or(|e| e > MAX_TENSOR_ELEMENTS) {
                return Err(out_of_range(
                    k,
                    format!("{n} heads of {head_dim} over hidden {hidden}"),
                    format!("the projection would exceed the {MAX_TENSOR_ELEMENTS} elements a tensor can hold (i64::MAX, as in ggml)"),
                ));
            }
        }
        let n_layers = size("block_count")?;
        let holds = layers_in(g);
        if n_layers > holds {
            return Err(out_of_range(
                "block_count",
                n_layers.to_string(),
                format!(
                    "exceeds what this engine loads (the file holds {holds} layer{} of blk.N tensors)",
                    if holds == 1 { "" } else { "s" }
                ),
            ));
        }
        let embed = g
            .tensor("token_embd.weight")
            .ok_or_else(|| ConvertError::MissingTensor { file: g.path.clone(), tensor: "token_embd.weight".into() })?;
        let vocab = embed.shape()[0];
        let token_id = |k: &str| g.u64(&format!("tokenizer.ggml.{k}"));
        let eos = token_id("eos_token_id")?;
        let mut extra_stop = Vec::new();
        for k in ["eot_token_id", "eom_token_id"] {
            if let Some(id) = token_id(k)? {
                if Some(id) != eos && !extra_stop.contains(&id) {
                    extra_stop.push(id);
                }
            }
        }
        let rms_eps = tidy_f32(g.require_f64(&key("attention.layer_norm_rms_epsilon"))?);
        let rope_theta = tidy_f32(g.f64(&key("rope.freq_base"))?.unwrap_or(10000.0));
        for (k, x) in [("attention.layer_norm_rms_epsilon", rms_eps), ("rope.freq_base", rope_theta)] {
            if !(x.is_finite() && x > 0.0) {
                return Err(out_of_range(k, x.to_string(), "must be a finite number above 0 (config.json cannot hold NaN or inf)".into()));
            }
        }
        Ok(Hparams {
            arch,
            n_layers,
            hidden,
            ffn: size("feed_forward_length")?,
            heads,
            kv_heads,
            head_dim,
            context: g.require_u64(&key("context_length"))?,
            rms_eps,
            rope_theta,
            vocab,
            tied: g.tensor("output.weight").is_none(),
            qkv_bias: g.tensor("blk.0.attn_q.bias").is_some(),
            bos: token_id("bos_token_id")?,
            eos,
            pad: token_id("padding_token_id")?,
            extra_stop,
        })
    }

    /// HF `config.json`.
    pub fn config_json(&self, dtype: OutDtype) -> Json {
        let (class, model_type) = match self.arch {
            Arch::Llama => ("LlamaForCausalLM", "llama"),
            Arch::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
        };
        let mut c = Map::new();
        c.insert("architectures".into(), json!([class]));
        c.insert("model_type".into(), json!(model_type));
        c.insert("hidden_size".into(), json!(self.hidden));
        c.insert("intermediate_size".into(), json!(self.ffn));
        c.insert("num_hidden_layers".into(), json!(self.n_layers));
        c.insert("num_attention_heads".into(), json!(self.heads));
        c.insert("num_key_value_heads".into(), json!(self.kv_heads));
        c.insert("head_dim".into(), json!(self.head_dim));
        c.insert("hidden_act".into(), json!("silu"));
        c.insert("max_position_embeddings".into(), json!(self.context));
        c.insert("rms_norm_eps".into(), json!(self.rms_eps));
        c.insert("rope_theta".into(), json!(self.rope_theta));
        c.insert("vocab_size".into(), json!(self.vocab));
        c.insert("tie_word_embeddings".into(), json!(self.tied));
        match self.arch {
            Arch::Llama => {
                c.insert("attention_bias".into(), json!(self.qkv_bias));
                c.insert("mlp_bias".into(), json!(false));
            }
            Arch::Qwen2 => {
                c.insert("use_sliding_window".into(), json!(false));
            }
        }
        if let Some(id) = self.bos {
            c.insert("bos_token_id".into(), json!(id));
        }
        if let Some(id) = self.eos {
            c.insert("eos_token_id".into(), json!(id));
        }
        c.insert("torch_dtype".into(), json!(dtype.torch_name()));
        Json::Object(c)
    }

    /// HF `generation_config.json`: the ids that start, stop and pad generation.
    pub fn generation_config_json(&self) -> Json {
        let mut c = Map::new();
        if let Some(id) = self.bos {
            c.insert("bos_token_id".into(), json!(id));
        }
        let stops: Vec<u64> = self.eos.into_iter().chain(self.extra_stop.iter().copied()).collect();
        match stops.as_slice() {
            [] => {}
            [one] => {
                c.insert("eos_token_id".into(), json!(one));
            }
            many => {
                c.insert("eos_token_id".into(), json!(many));
            }
        }
        if let Some(id) = self.pad {
            c.insert("pad_token_id".into(), json!(id));
        }
        Json::Object(c)
    }
}
