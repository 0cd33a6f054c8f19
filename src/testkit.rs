//! Tiny real model folders with seeded random weights, for tests, demos and benchmarks of the
//! engine's logic: `config.json`, `model.safetensors` and a word-level `tokenizer.json`
//! (ids `0 <unk>`, `1 <s>`, `2 </s>`, then words `w3`, `w4`, …) with a chat template.
//!
//! * `TinyLlama`: a Llama, Qwen2 (q/k/v bias) or Qwen3 (q/k norm) target. `mixing` scales the
//!   attention and MLP outputs: small values make the next token depend mostly on the current
//!   one (a near-bigram model), which is what lets the drafters below predict it. With tied
//!   embeddings such a model mostly repeats its input token (untrained, nothing moves the
//!   residual stream away from the input embedding), so tests wanting varied output untie.
//! * `TinyEagle3`: an EAGLE-3 drafter for a `TinyLlama`, built to imitate a trained one. Its
//!   attention copies the current token's normalised embedding (v = o = identity on the
//!   embedding half, q = k = λ·identity so each token attends to itself), and it reuses the
//!   target's final norm and lm_head rows, so it predicts what the target's bigram part
//!   would. Optional draft vocabulary (with `d2t`), aux layer ids and context length.
//! * `TinyStandalone`: a one-layer Llama sharing the target's embeddings, final norm and
//!   lm_head (a "distilled" small model with the same tokenizer).
//! * `TinyDeepseek` (`deepseek`): a DeepSeek-V3 target (MLA + MoE) that splits over 8 ranks.
//!
//! `edit` hooks let tests corrupt a folder (drop a tensor, change a shape) before writing.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use safetensors::tensor::{Dtype, TensorView};
use serde_json::{json, Value};

use crate::engine::llama::Family;

mod deepseek;
pub use deepseek::TinyDeepseek;

/// A tensor to write.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

/// Named tensors with shapes, in name order.
pub type Tensors = BTreeMap<String, (Vec<usize>, TensorData)>;

/// Store float tensors as f32 or bf16 on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskDtype {
    F32,
    BF16,
}

/// Write `tensors` to a safetensors file.
pub fn write_safetensors(path: &Path, tensors: &Tensors, dtype: DiskDtype) -> io::Result<()> {
    let bytes: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, (shape, data))| {
            let (dt, b) = match (data, dtype) {
                (TensorData::F32(v), DiskDtype::F32) => (Dtype::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
                (TensorData::F32(v), DiskDtype::BF16) => {
                    (Dtype::BF16, v.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect())
                }
                (TensorData::I64(v), _) => (Dtype::I64, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            };
            (name.clone(), dt, shape.clone(), b)
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(n, d, s, b)| TensorView::new(*d, s.clone(), b).map(|v| (n.clone(), v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io::Error::other)?;
    safetensors::serialize_to_file(views, None, path).map_err(io::Error::other)
}

fn write_json(path: &Path, v: &Value) -> io::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(v).map_err(io::Error::other)?)
}

/// The word for a token id.
/// A model folder: its config.json and one safetensors file.
fn write_folder(dir: &Path, config: &Value, t: &Tensors, dtype: DiskDtype) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    write_json(&dir.join("config.json"), config)?;
    write_safetensors(&dir.join("model.safetensors"), t, dtype)
}

pub fn word(id: u32) -> String {
    match id {
        0 => "<unk>".into(),
        1 => "<s>".into(),
        2 => "</s>".into(),
        i => format!("w{i}"),
    }
}

/// `tokenizer.json`, `tokenizer_config.json` (chat template) for a `vocab`-word tokenizer.
pub fn write_tokenizer(dir: &Path, vocab: usize) -> io::Result<()> {
    let words: serde_json::Map<String, Value> = (0..vocab as u32).map(|i| (word(i), json!(i))).collect();
    let special = |id: u32| {
        json!({"id": id, "content": word(id), "single_word": false, "lstrip": false, "rstrip": false,
               "normalized": false, "special": true})
    };
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0), special(1), special(2)],
        "normalizer": null,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "<unk>"}
    });
    write_json(&dir.join("tokenizer.json"), &tokenizer)?;
    let template = "{% for m in messages %}<s> {{ m['role'] }} {{ m['content'].strip() }} </s> {% endfor %}\
                    {% if add_generation_prompt %}<s> assistant {% endif %}";
    write_json(&dir.join("tokenizer_config.json"), &json!({"bos_token": "<s>", "eos_token": "</s>", "chat_template": template}))
}

struct Init(ChaCha8Rng);

impl Init {
    fn new(seed: u64) -> Init {
        Init(ChaCha8Rng::seed_from_u64(seed))
    }

    /// Uniform in `[-a, a]`.
    fn uniform(&mut self, len: usize, a: f32) -> Vec<f32> {
        (0..len).map(|_| self.0.random_range(-a..=a)).collect()
    }

    /// A norm weight near 1.
    fn norm(&mut self, len: usize) -> Vec<f32> {
        self.uniform(len, 0.1).into_iter().map(|x| 1.0 + x).collect()
    }

    /// A linear layer `[out, in]` at the usual `1/sqrt(in)` scale times `gain`.
    fn linear(&mut self, out: usize, inp: usize, gain: f32) -> (Vec<usize>, TensorData) {
        (vec![out, inp], TensorData::F32(self.uniform(out * inp, gain / (inp as f32).sqrt())))
    }
}

fn put(t: &mut Tensors, name: impl Into<String>, shape: Vec<usize>, data: Vec<f32>) {
    t.insert(name.into(), (shape, TensorData::F32(data)));
}

#[derive(Clone, Debug, PartialEq)]
pub struct TinyLlama {
    pub family: Family,
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub intermediate: usize,
    pub max_positions: usize,
    pub rope_theta: f64,
    pub rope_scaling: Option<Value>,
    pub tie_embeddings: bool,
    /// Scale of the attention and MLP outputs added to the residual stream.
    pub mixing: f32,
    /// Scale of the lm_head (larger = sharper next-token distributions).
    pub logit_scale: f32,
    pub dtype: DiskDtype,
    pub seed: u64,
}

impl TinyLlama {
    pub fn new(family: Family, seed: u64) -> TinyLlama {
        TinyLlama {
            family,
            vocab: 64,
            hidden: 32,
            layers: 8,
            heads: 4,
            kv_heads: 2,
            intermediate: 64,
            max_positions: 512,
            rope_theta: 10000.0,
            rope_scaling: None,
            tie_embeddings: false,
            mixing: 0.5,
            logit_scale: 3.0,
            dtype: DiskDtype::F32,
            seed,
        }
    }

    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    pub fn config(&self) -> Value {
        let (arch, model_type) = match self.family {
            Family::Llama => ("LlamaForCausalLM", "llama"),
            Family::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
            Family::Qwen3 => ("Qwen3ForCausalLM", "qwen3"),
        };
        let mut c = json!({
            "architectures": [arch],
            "model_type": model_type,
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim(),
            "vocab_size": self.vocab,
            "max_position_embeddings": self.max_positions,
            "rms_norm_eps": 1e-6,
            "rope_theta": self.rope_theta,
            "hidden_act": "silu",
            "tie_word_embeddings": self.tie_embeddings,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "torch_dtype": if self.dtype == DiskDtype::F32 { "float32" } else { "bfloat16" },
        });
        if let Some(s) = &self.rope_scaling {
            c["rope_scaling"] = s.clone();
        }
        c
    }

    /// The weights, from the seed.
    pub fn tensors(&self) -> Tensors {
        let mut r = Init::new(self.seed);
        let mut t = Tensors::new();
        let (h, hd) = (self.hidden, self.head_dim());
        let (q_out, kv_out) = (self.heads * hd, self.kv_heads * hd);
        put(&mut t, "model.embed_tokens.weight", vec![self.vocab, h], r.uniform(self.vocab * h, 1.7));
        for i in 0..self.layers {
            let p = format!("model.layers.{i}.");
            put(&mut t, format!("{p}input_layernorm.weight"), vec![h], r.norm(h));
            t.insert(format!("{p}self_attn.q_proj.weight"), r.linear(q_out, h, 1.0));
            t.insert(format!("{p}self_attn.k_proj.weight"), r.linear(kv_out, h, 1.0));
            t.insert(format!("{p}self_attn.v_proj.weight"), r.linear(kv_out, h, 1.0));
            t.insert(format!("{p}self_attn.o_proj.weight"), r.linear(h, q_out, self.mixing));
            if self.family == Family::Qwen2 {
                put(&mut t, format!("{p}self_attn.q_proj.bias"), vec![q_out], r.uniform(q_out, 0.1));
                put(&mut t, format!("{p}self_attn.k_proj.bias"), vec![kv_out], r.uniform(kv_out, 0.1));
                put(&mut t, format!("{p}self_attn.v_proj.bias"), vec![kv_out], r.uniform(kv_out, 0.1));
            }
            if self.family == Family::Qwen3 {
                put(&mut t, format!("{p}self_attn.q_norm.weight"), vec![hd], r.norm(hd));
                put(&mut t, format!("{p}self_attn.k_norm.weight"), vec![hd], r.norm(hd));
            }
            put(&mut t, format!("{p}post_attention_layernorm.weight"), vec![h], r.norm(h));
            t.insert(format!("{p}mlp.gate_proj.weight"), r.linear(self.intermediate, h, 1.0));
            t.insert(format!("{p}mlp.up_proj.weight"), r.linear(self.intermediate, h, 1.0));
            t.insert(format!("{p}mlp.down_proj.weight"), r.linear(h, self.intermediate, self.mixing));
        }
        put(&mut t, "model.norm.weight", vec![h], r.norm(h));
        if !self.tie_embeddings {
            t.insert("lm_head.weight".into(), r.linear(self.vocab, h, self.logit_scale));
        }
        t
    }

    /// Write the folder; returns the weights (drafters copy some of them).
    pub fn write(&self, dir: &Path) -> io::Result<Tensors> {
        self.write_edited(dir, |_| {})
    }

    /// Write the folder after `edit` has changed the weights (to make a bad checkpoint).
    pub fn write_edited(&self, dir: &Path, edit: impl FnOnce(&mut Tensors)) -> io::Result<Tensors> {
        let mut t = self.tensors();
        let weights = t.clone();
        edit(&mut t);
        write_folder(dir, &self.config(), &t, self.dtype)?;
        write_tokenizer(dir, self.vocab)?;
        Ok(weights)
    }

    /// The lm_head rows the target predicts with (the embeddings when tied).
    fn lm_head(&self, weights: &Tensors) -> Vec<f32> {
        f32s(weights, if self.tie_embeddings { "model.embed_tokens.weight" } else { "lm_head.weight" })
    }
}

fn f32s(t: &Tensors, name: &str) -> Vec<f32> {
    match &t[name].1 {
        TensorData::F32(v) => v.clone(),
        TensorData::I64(_) => panic!("{name} is not a float tensor"),
    }
}

/// `scale · [I | 0]`: `rows` outputs reading the first `rows` of `cols` inputs.
fn identity_block(rows: usize, cols: usize, scale: f32) -> Vec<f32> {
    let mut m = vec![0.0; rows * cols];
    for i in 0..rows {
        m[i * cols + i] = scale;
    }
    m
}

#[derive(Clone, Debug, PartialEq)]
pub struct TinyEagle3 {
    /// `Some(vd)`: an lm_head over `vd` target ids (a seeded sorted subset) and `d2t`.
    pub draft_vocab: Option<usize>,
    pub head_dim: usize,
    pub intermediate: usize,
    pub max_positions: usize,
    /// `eagle_config.eagle_aux_hidden_state_layer_ids`; SGLang's default when `None`.
    pub aux_layer_ids: Option<Vec<i64>>,
    /// `rope_theta` in the config (absent = 10000).
    pub rope_theta: Option<f64>,
    /// Attention sharpness of the self-copying layer.
    pub lambda: f32,
    /// `true`: the self-copying layer that imitates the target (see the module doc); `false`:
    /// every weight random, for checking the forward pass against a reference.
    pub imitate: bool,
    pub seed: u64,
}

impl TinyEagle3 {
    pub fn new(seed: u64) -> TinyEagle3 {
        TinyEagle3 {
            draft_vocab: None,
            head_dim: 8,
            intermediate: 32,
            max_positions: 512,
            aux_layer_ids: None,
            rope_theta: None,
            lambda: 3.0,
            imitate: true,
            seed,
        }
    }

    /// The target ids the draft vocabulary covers (all of them without `draft_vocab`).
    pub fn hot_ids(&self, target_vocab: usize) -> Vec<u32> {
        let Some(vd) = self.draft_vocab else { return (0..target_vocab as u32).collect() };
        let mut r = ChaCha8Rng::seed_from_u64(self.seed ^ 0xd27);
        let mut ids: Vec<u32> = (0..target_vocab as u32).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, r.random_range(0..=i));
        }
        let mut hot = ids[..vd].to_vec();
        hot.sort_unstable();
        hot
    }

    pub fn config(&self, target: &TinyLlama) -> Value {
        self.config_for(target.hidden, target.vocab)
    }

    /// The config beside a target of `h` hidden and `vocab` ids (any family).
    pub fn config_for(&self, h: usize, vocab: usize) -> Value {
        let mut c = json!({
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "hidden_size": h,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": 1,
            "num_attention_heads": h / self.head_dim,
            "num_key_value_heads": h / self.head_dim,
            "head_dim": self.head_dim,
            "vocab_size": vocab,
            "max_position_embeddings": self.max_positions,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "tie_word_embeddings": false,
            "torch_dtype": "float32",
        });
        if let Some(vd) = self.draft_vocab {
            c["draft_vocab_size"] = json!(vd);
        }
        if let Some(ids) = &self.aux_layer_ids {
            c["eagle_config"] = json!({"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": true});
        }
        if let Some(theta) = self.rope_theta {
            c["rope_theta"] = json!(theta);
        }
        c
    }

    pub fn tensors(&self, target: &TinyLlama, weights: &Tensors) -> Tensors {
        self.tensors_for(target.hidden, &f32s(weights, "model.norm.weight"), &target.lm_head(weights))
    }

    /// The weights beside a target whose final norm is `norm` and lm_head `head`
    /// (`[vocab, h]`, which the draft vocabulary's rows are taken from).
    pub fn tensors_for(&self, h: usize, norm: &[f32], head: &[f32]) -> Tensors {
        let mut r = Init::new(self.seed);
        let vocab = head.len() / h;
        let mut t = Tensors::new();
        let (fc_gain, mlp_gain) = if self.imitate { (0.05, 0.1) } else { (1.0, 1.0) };
        t.insert("fc.weight".into(), r.linear(h, 3 * h, fc_gain));
        let p = "midlayer.";
        for norm in ["input_layernorm", "hidden_norm", "post_attention_layernorm"] {
            let w = if self.imitate { vec![1.0; h] } else { r.norm(h) };
            put(&mut t, format!("{p}{norm}.weight"), vec![h], w);
        }
        for (proj, gain) in [("q_proj", self.lambda), ("k_proj", self.lambda), ("v_proj", 1.0)] {
            let name = format!("{p}self_attn.{proj}.weight");
            if self.imitate {
                put(&mut t, name, vec![h, 2 * h], identity_block(h, 2 * h, gain));
            } else {
                t.insert(name, r.linear(h, 2 * h, 1.0));
            }
        }
        if self.imitate {
            put(&mut t, format!("{p}self_attn.o_proj.weight"), vec![h, h], identity_block(h, h, 1.0));
        } else {
            t.insert(format!("{p}self_attn.o_proj.weight"), r.linear(h, h, 1.0));
        }
        t.insert(format!("{p}mlp.gate_proj.weight"), r.linear(self.intermediate, h, mlp_gain));
        t.insert(format!("{p}mlp.up_proj.weight"), r.linear(self.intermediate, h, mlp_gain));
        t.insert(format!("{p}mlp.down_proj.weight"), r.linear(h, self.intermediate, mlp_gain));
        put(&mut t, "norm.weight", vec![h], norm.to_vec());
        let hot = self.hot_ids(vocab);
        let rows: Vec<f32> = hot.iter().flat_map(|&id| head[id as usize * h..][..h].to_vec()).collect();
        put(&mut t, "lm_head.weight", vec![hot.len(), h], rows);
        if self.draft_vocab.is_some() {
            let d2t = hot.iter().enumerate().map(|(i, &id)| id as i64 - i as i64).collect();
            t.insert("d2t".into(), (vec![hot.len()], TensorData::I64(d2t)));
        }
        t
    }

    pub fn write(&self, dir: &Path, target: &TinyLlama, weights: &Tensors) -> io::Result<()> {
        self.write_edited(dir, target, weights, |_| {})
    }

    pub fn write_edited(&self, dir: &Path, target: &TinyLlama, weights: &Tensors, edit: impl FnOnce(&mut Tensors)) -> io::Result<()> {
        let mut t = self.tensors(target, weights);
        edit(&mut t);
        write_folder(dir, &self.config(target), &t, DiskDtype::F32)
    }

    /// The drafter beside any target of `h` hidden: its final norm and lm_head given.
    pub fn write_for(&self, dir: &Path, h: usize, norm: &[f32], head: &[f32]) -> io::Result<()> {
        write_folder(dir, &self.config_for(h, head.len() / h), &self.tensors_for(h, norm, head), DiskDtype::F32)
    }
}

/// A one-layer Llama with the target's embeddings, final norm and lm_head.
#[derive(Clone, Debug, PartialEq)]
pub struct TinyStandalone {
    pub layers: usize,
    pub mixing: f32,
    pub seed: u64,
}

impl TinyStandalone {
    pub fn new(seed: u64) -> TinyStandalone {
        TinyStandalone { layers: 1, mixing: 0.3, seed }
    }

    pub fn write(&self, dir: &Path, target: &TinyLlama, weights: &Tensors) -> io::Result<()> {
        let small = TinyLlama {
            family: Family::Llama,
            layers: self.layers,
            mixing: self.mixing,
            seed: self.seed,
            tie_embeddings: false,
            dtype: DiskDtype::F32,
            ..target.clone()
        };
        let head = target.lm_head(weights);
        small.write_edited(dir, |t| {
            for name in ["model.embed_tokens.weight", "model.norm.weight"] {
                t.insert(name.into(), weights[name].clone());
            }
            put(t, "lm_head.weight", vec![target.vocab, target.hidden], head);
        })?;
        Ok(())
    }
}
