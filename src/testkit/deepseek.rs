//! `TinyDeepseek`: a DeepSeek-V3 target with seeded random weights in the original layout
//! (per-expert tensors, the router's `e_score_correction_bias`, interleaved rope, yarn), sized
//! to split over 1, 2, 4 and 8 ranks: 8 heads, 8 routed experts, MLP widths divisible by 8.
//! transformers' own outputs on fixed checkpoints of this family are testdata/deepseek's; this
//! one is for checks against the engine itself (one rank against many).

use std::io;
use std::path::Path;

use serde_json::{json, Value};

use super::{put, write_folder, write_tokenizer, DiskDtype, Init, Tensors};

#[derive(Clone, Debug, PartialEq)]
pub struct TinyDeepseek {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub experts: usize,
    /// `None`: one `q_proj`.
    pub q_lora_rank: Option<usize>,
    pub seed: u64,
}

const KV_LORA: usize = 32;
const NOPE: usize = 16;
const ROPE: usize = 8;
const V_HEAD: usize = 16;
const DENSE: usize = 64;
const EXPERT: usize = 16;
const SHARED: usize = 1;

impl TinyDeepseek {
    pub fn new(seed: u64) -> TinyDeepseek {
        TinyDeepseek { vocab: 64, hidden: 64, layers: 4, heads: 8, experts: 8, q_lora_rank: Some(48), seed }
    }

    pub fn config(&self) -> Value {
        json!({
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "vocab_size": self.vocab,
            "hidden_size": self.hidden,
            "intermediate_size": DENSE,
            "moe_intermediate_size": EXPERT,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.heads,
            "n_routed_experts": self.experts,
            "num_experts_per_tok": 2,
            "n_group": 4,
            "topk_group": 2,
            "n_shared_experts": SHARED,
            "first_k_dense_replace": 1,
            "norm_topk_prob": true,
            "routed_scaling_factor": 2.5,
            "topk_method": "noaux_tc",
            "scoring_func": "sigmoid",
            "q_lora_rank": self.q_lora_rank,
            "kv_lora_rank": KV_LORA,
            "qk_nope_head_dim": NOPE,
            "qk_rope_head_dim": ROPE,
            "v_head_dim": V_HEAD,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0,
            "rope_scaling": {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64,
                             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
            "max_position_embeddings": 512,
            "tie_word_embeddings": false,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "torch_dtype": "float32",
        })
    }

    pub fn tensors(&self) -> Tensors {
        let mut r = Init::new(self.seed);
        let mut t = Tensors::new();
        let (h, heads) = (self.hidden, self.heads);
        put(&mut t, "model.embed_tokens.weight", vec![self.vocab, h], r.uniform(self.vocab * h, 1.7));
        let mlp = |t: &mut Tensors, r: &mut Init, p: String, inner: usize| {
            t.insert(format!("{p}gate_proj.weight"), r.linear(inner, h, 1.0));
            t.insert(format!("{p}up_proj.weight"), r.linear(inner, h, 1.0));
            t.insert(format!("{p}down_proj.weight"), r.linear(h, inner, 0.5));
        };
        for i in 0..self.layers {
            let p = format!("model.layers.{i}.");
            put(&mut t, format!("{p}input_layernorm.weight"), vec![h], r.norm(h));
            put(&mut t, format!("{p}post_attention_layernorm.weight"), vec![h], r.norm(h));
            let a = format!("{p}self_attn.");
            let q_out = heads * (NOPE + ROPE);
            match self.q_lora_rank {
                None => drop(t.insert(format!("{a}q_proj.weight"), r.linear(q_out, h, 1.0))),
                Some(rank) => {
                    t.insert(format!("{a}q_a_proj.weight"), r.linear(rank, h, 1.0));
                    put(&mut t, format!("{a}q_a_layernorm.weight"), vec![rank], r.norm(rank));
                    t.insert(format!("{a}q_b_proj.weight"), r.linear(q_out, rank, 1.0));
                }
            }
            t.insert(format!("{a}kv_a_proj_with_mqa.weight"), r.linear(KV_LORA + ROPE, h, 1.0));
            put(&mut t, format!("{a}kv_a_layernorm.weight"), vec![KV_LORA], r.norm(KV_LORA));
            t.insert(format!("{a}kv_b_proj.weight"), r.linear(heads * (NOPE + V_HEAD), KV_LORA, 1.0));
            t.insert(format!("{a}o_proj.weight"), r.linear(h, heads * V_HEAD, 0.5));
            if i == 0 {
                mlp(&mut t, &mut r, format!("{p}mlp."), DENSE);
                continue;
            }
            t.insert(format!("{p}mlp.gate.weight"), r.linear(self.experts, h, 1.0));
            put(&mut t, format!("{p}mlp.gate.e_score_correction_bias"), vec![self.experts], r.uniform(self.experts, 0.1));
            for e in 0..self.experts {
                mlp(&mut t, &mut r, format!("{p}mlp.experts.{e}."), EXPERT);
            }
            mlp(&mut t, &mut r, format!("{p}mlp.shared_experts."), SHARED * EXPERT);
        }
        put(&mut t, "model.norm.weight", vec![h], r.norm(h));
        t.insert("lm_head.weight".into(), r.linear(self.vocab, h, 3.0));
        t
    }

    /// Write the folder (with the word-level tokenizer beside it).
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        write_folder(dir, &self.config(), &self.tensors(), DiskDtype::F32)?;
        write_tokenizer(dir, self.vocab)
    }
}
