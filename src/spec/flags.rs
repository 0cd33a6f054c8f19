//! The one flag table: every launch flag specdeck reads into `LaunchSpec`, with SGLang's name,
//! the other spellings SGLang accepts, its help line and how it sets, shows and clears its field.

use std::fmt;

use super::{Algorithm, Device, LaunchSpec};

/// One launch flag specdeck acts on: its SGLang name, the other spellings SGLang accepts, its
/// help, and how it sets, shows and clears its field of `LaunchSpec`. `FLAGS` is the one table
/// that `set_flag`, the pasted-command parser and the command line (src/commands/flags.rs) read.
pub struct FlagDef {
    /// The canonical name, `--context-length`.
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    /// The value's placeholder in `--help` (`DIR`); empty for a switch, which takes no value.
    pub value_name: &'static str,
    /// The line `--help` shows.
    pub help: &'static str,
    /// Set the field from a value, or say what value was expected.
    pub(super) set: fn(&mut LaunchSpec, &str) -> Result<(), &'static str>,
    /// The value set, as a command line spells it (empty for a switch that is on); `None` at
    /// the default.
    pub(super) get: fn(&LaunchSpec) -> Option<String>,
    /// Back to the default.
    pub(super) clear: fn(&mut LaunchSpec),
}

impl FlagDef {
    pub fn is_switch(&self) -> bool {
        self.value_name.is_empty()
    }

    pub(super) fn is_called(&self, flag: &str) -> bool {
        self.name == flag || self.aliases.contains(&flag)
    }

    /// The value this flag has in `spec`, as a command line spells it.
    pub fn value_in(&self, spec: &LaunchSpec) -> Option<String> {
        (self.get)(spec)
    }
}

impl fmt::Debug for FlagDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

fn text(value: &str) -> Result<String, &'static str> {
    Ok(value.to_string())
}

fn num<T: std::str::FromStr>(value: &str, expected: &'static str) -> Result<T, &'static str> {
    value.trim().parse().map_err(|_| expected)
}

/// A switch's value: none (on), or an explicit `--flag=true|false|1|0`.
fn switch(value: &str) -> Result<bool, &'static str> {
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err("true or false"),
    }
}

const INTEGER: &str = "an integer";
const POSITIVE: &str = "a positive integer";

/// An integer above 0 (`--tp-size 0` or `--context-length 0` describe no launch).
fn positive<T: std::str::FromStr + PartialOrd + Default>(value: &str) -> Result<T, &'static str> {
    num(value, POSITIVE).and_then(|n: T| if n > T::default() { Ok(n) } else { Err(POSITIVE) })
}

/// A finite number in `range` (NaN and infinities are outside every range).
fn within(value: &str, range: impl std::ops::RangeBounds<f64>, expected: &'static str) -> Result<f64, &'static str> {
    num(value, expected).and_then(|n: f64| if n.is_finite() && range.contains(&n) { Ok(n) } else { Err(expected) })
}

const ALGORITHMS: &str = "EAGLE3, EAGLE, NEXTN, MTP, STANDALONE or NONE";

/// The flags `LaunchSpec::set_flag` understands, in the order `LaunchSpec::flags` lists them.
pub const FLAGS: &[FlagDef] = &[
    FlagDef {
        name: "--model-path",
        aliases: &["--model"],
        value_name: "DIR",
        help: "The target model: a folder holding config.json, or a Hugging Face repo id found in the local cache",
        set: |s, v| text(v).map(|v| s.model_path = Some(v)),
        get: |s| s.model_path.clone(),
        clear: |s| s.model_path = None,
    },
    FlagDef {
        name: "--speculative-draft-model-path",
        aliases: &["--speculative-draft-model"],
        value_name: "DIR",
        help: "The drafter: a folder holding config.json, or a Hugging Face repo id found in the local cache",
        set: |s, v| text(v).map(|v| s.draft_model_path = Some(v)),
        get: |s| s.draft_model_path.clone(),
        clear: |s| s.draft_model_path = None,
    },
    FlagDef {
        name: "--speculative-algorithm",
        aliases: &[],
        value_name: "ALGO",
        help: "EAGLE3, EAGLE, NEXTN or MTP (both run as EAGLE, as SGLang does), STANDALONE or NONE",
        set: |s, v| Algorithm::parse(v).ok_or(ALGORITHMS).map(|a| s.speculative_algorithm = Some(a)),
        get: |s| s.speculative_algorithm.map(|a| a.name().to_string()),
        clear: |s| s.speculative_algorithm = None,
    },
    FlagDef {
        name: "--tp-size",
        aliases: &["--tp", "--tensor-parallel-size"],
        value_name: "N",
        help: "Tensor-parallel size: GPUs the target is split over",
        set: |s, v| positive(v).map(|n| s.tp_size = Some(n)),
        get: |s| s.tp_size.map(|v| v.to_string()),
        clear: |s| s.tp_size = None,
    },
    FlagDef {
        name: "--context-length",
        aliases: &[],
        value_name: "TOKENS",
        help: "The context the target runs at (default: derived from its config.json)",
        set: |s, v| positive(v).map(|n| s.context_length = Some(n)),
        get: |s| s.context_length.map(|v| v.to_string()),
        clear: |s| s.context_length = None,
    },
    FlagDef {
        name: "--speculative-num-steps",
        aliases: &[],
        value_name: "S",
        help: "Draft steps per verify",
        set: |s, v| num(v, INTEGER).map(|n| s.speculative_num_steps = Some(n)),
        get: |s| s.speculative_num_steps.map(|v| v.to_string()),
        clear: |s| s.speculative_num_steps = None,
    },
    FlagDef {
        name: "--speculative-eagle-topk",
        aliases: &[],
        value_name: "K",
        help: "Candidates kept per draft step (1: a chain; above 1: a tree)",
        set: |s, v| num(v, INTEGER).map(|n| s.speculative_eagle_topk = Some(n)),
        get: |s| s.speculative_eagle_topk.map(|v| v.to_string()),
        clear: |s| s.speculative_eagle_topk = None,
    },
    FlagDef {
        name: "--speculative-num-draft-tokens",
        aliases: &[],
        value_name: "N",
        help: "Tokens verified per step, the root included",
        set: |s, v| num(v, INTEGER).map(|n| s.speculative_num_draft_tokens = Some(n)),
        get: |s| s.speculative_num_draft_tokens.map(|v| v.to_string()),
        clear: |s| s.speculative_num_draft_tokens = None,
    },
    FlagDef {
        name: "--dtype",
        aliases: &[],
        value_name: "DTYPE",
        help: "Weight and activation dtype (auto, bfloat16, float16, ...)",
        set: |s, v| text(v).map(|v| s.dtype = Some(v)),
        get: |s| s.dtype.clone(),
        clear: |s| s.dtype = None,
    },
    FlagDef {
        name: "--mem-fraction-static",
        aliases: &[],
        value_name: "F",
        help: "Fraction of GPU memory for weights and the KV pool",
        set: |s, v| within(v, f64::MIN_POSITIVE..=1.0, "a fraction in (0, 1], such as 0.85").map(|n| s.mem_fraction_static = Some(n)),
        get: |s| s.mem_fraction_static.map(|v| v.to_string()),
        clear: |s| s.mem_fraction_static = None,
    },
    FlagDef {
        name: "--cuda-graph-max-bs",
        aliases: &[],
        value_name: "B",
        help: "Largest batch size captured in a CUDA graph",
        set: |s, v| num(v, INTEGER).map(|n| s.cuda_graph_max_bs = Some(n)),
        get: |s| s.cuda_graph_max_bs.map(|v| v.to_string()),
        clear: |s| s.cuda_graph_max_bs = None,
    },
    FlagDef {
        name: "--max-running-requests",
        aliases: &[],
        value_name: "N",
        help: "Most requests decoded at once",
        set: |s, v| num(v, INTEGER).map(|n| s.max_running_requests = Some(n)),
        get: |s| s.max_running_requests.map(|v| v.to_string()),
        clear: |s| s.max_running_requests = None,
    },
    FlagDef {
        name: "--page-size",
        aliases: &[],
        value_name: "TOKENS",
        help: "Tokens per KV-cache page",
        set: |s, v| positive(v).map(|n| s.page_size = Some(n)),
        get: |s| s.page_size.map(|v| v.to_string()),
        clear: |s| s.page_size = None,
    },
    FlagDef {
        name: "--attention-backend",
        aliases: &[],
        value_name: "BACKEND",
        help: "The target's attention kernels (flashinfer, fa3, triton, trtllm_mha, ...)",
        set: |s, v| text(v).map(|v| s.attention_backend = Some(v)),
        get: |s| s.attention_backend.clone(),
        clear: |s| s.attention_backend = None,
    },
    FlagDef {
        name: "--speculative-draft-attention-backend",
        aliases: &[],
        value_name: "BACKEND",
        help: "The drafter's attention kernels (default: the target's)",
        set: |s, v| text(v).map(|v| s.draft_attention_backend = Some(v)),
        get: |s| s.draft_attention_backend.clone(),
        clear: |s| s.draft_attention_backend = None,
    },
    FlagDef {
        name: "--kv-cache-dtype",
        aliases: &[],
        value_name: "DTYPE",
        help: "KV-cache storage dtype (auto, fp8_e4m3, fp8_e5m2, bf16, ...)",
        set: |s, v| text(v).map(|v| s.kv_cache_dtype = Some(v)),
        get: |s| s.kv_cache_dtype.clone(),
        clear: |s| s.kv_cache_dtype = None,
    },
    FlagDef {
        name: "--quantization",
        aliases: &[],
        value_name: "METHOD",
        help: "The target's quantization method (fp8, awq, gptq, ...)",
        set: |s, v| text(v).map(|v| s.quantization = Some(v)),
        get: |s| s.quantization.clone(),
        clear: |s| s.quantization = None,
    },
    FlagDef {
        name: "--speculative-draft-model-quantization",
        aliases: &[],
        value_name: "METHOD",
        help: "The drafter's quantization method (default: the target's; unquant: none)",
        set: |s, v| text(v).map(|v| s.draft_quantization = Some(v)),
        get: |s| s.draft_quantization.clone(),
        clear: |s| s.draft_quantization = None,
    },
    FlagDef {
        name: "--dp-size",
        aliases: &["--dp", "--data-parallel-size"],
        value_name: "N",
        help: "Data-parallel size: replicas of the model",
        set: |s, v| positive(v).map(|n| s.dp_size = Some(n)),
        get: |s| s.dp_size.map(|v| v.to_string()),
        clear: |s| s.dp_size = None,
    },
    FlagDef {
        name: "--enable-dp-attention",
        aliases: &[],
        value_name: "",
        help: "Split attention over the --dp-size ranks inside the TP group (SGLang's switch) instead of running --dp-size \
               replicas of the model",
        set: |s, v| switch(v).map(|on| s.enable_dp_attention = on),
        get: |s| s.enable_dp_attention.then(String::new),
        clear: |s| s.enable_dp_attention = false,
    },
    FlagDef {
        name: "--ep-size",
        aliases: &["--ep", "--expert-parallel-size"],
        value_name: "N",
        help: "Expert-parallel size: GPUs the experts of a MoE target are spread over",
        set: |s, v| positive(v).map(|n| s.ep_size = Some(n)),
        get: |s| s.ep_size.map(|v| v.to_string()),
        clear: |s| s.ep_size = None,
    },
    FlagDef {
        name: "--chunked-prefill-size",
        aliases: &[],
        value_name: "TOKENS",
        help: "Tokens per prefill chunk (-1: no chunking)",
        set: |s, v| num(v, INTEGER).map(|n| s.chunked_prefill_size = Some(n)),
        get: |s| s.chunked_prefill_size.map(|v| v.to_string()),
        clear: |s| s.chunked_prefill_size = None,
    },
    FlagDef {
        name: "--max-total-tokens",
        aliases: &[],
        value_name: "TOKENS",
        help: "Tokens the KV pool holds (default: from the memory fraction)",
        set: |s, v| positive(v).map(|n| s.max_total_tokens = Some(n)),
        get: |s| s.max_total_tokens.map(|v| v.to_string()),
        clear: |s| s.max_total_tokens = None,
    },
    FlagDef {
        name: "--served-model-name",
        aliases: &[],
        value_name: "NAME",
        help: "The model name the OpenAI API reports",
        set: |s, v| text(v).map(|v| s.served_model_name = Some(v)),
        get: |s| s.served_model_name.clone(),
        clear: |s| s.served_model_name = None,
    },
    FlagDef {
        name: "--revision",
        aliases: &[],
        value_name: "REV",
        help: "The target's revision in the Hugging Face cache: a branch, a tag or a commit (default: main)",
        set: |s, v| text(v).map(|v| s.revision = Some(v)),
        get: |s| s.revision.clone(),
        clear: |s| s.revision = None,
    },
    FlagDef {
        name: "--speculative-draft-model-revision",
        aliases: &[],
        value_name: "REV",
        help: "The drafter's revision in the Hugging Face cache: a branch, a tag or a commit (default: main)",
        set: |s, v| text(v).map(|v| s.draft_revision = Some(v)),
        get: |s| s.draft_revision.clone(),
        clear: |s| s.draft_revision = None,
    },
    FlagDef {
        name: "--gpu-memory-gib",
        aliases: &[],
        value_name: "GIB",
        help: "GPU memory per device for the budget when NVML has no GPU to ask",
        set: |s, v| within(v, f64::MIN_POSITIVE.., "a finite number of GiB above 0").map(|n| s.gpu_memory_gib = Some(n)),
        get: |s| s.gpu_memory_gib.map(|v| v.to_string()),
        clear: |s| s.gpu_memory_gib = None,
    },
    FlagDef {
        name: "--device",
        aliases: &[],
        value_name: "DEVICE",
        help: "auto (CUDA when present, else CPU), cpu or cuda",
        set: |s, v| Device::parse(v).ok_or("auto, cpu or cuda").map(|d| s.device = d),
        get: |s| (s.device != Device::Auto).then(|| s.device.name().to_string()),
        clear: |s| s.device = Device::Auto,
    },
    FlagDef {
        name: "--enable-deterministic-inference",
        aliases: &[],
        value_name: "",
        help: "Batch-invariant matmuls everywhere, prefill included (SGLang's switch): output no longer depends on a step's \
               row count or, over 2 GPUs, on the tensor-parallel split",
        set: |s, v| switch(v).map(|on| s.deterministic = on),
        get: |s| s.deterministic.then(String::new),
        clear: |s| s.deterministic = false,
    },
    FlagDef {
        name: "--cpu-kv-cache-gib",
        aliases: &[],
        value_name: "GIB",
        help: "The KV cache's budget on the CPU backend (default 2 GiB; specdeck's own flag)",
        set: |s, v| within(v, f64::MIN_POSITIVE.., "a finite number of GiB above 0").map(|n| s.cpu_kv_cache_gib = Some(n)),
        get: |s| s.cpu_kv_cache_gib.map(|v| v.to_string()),
        clear: |s| s.cpu_kv_cache_gib = None,
    },
];

/// Flags of specdeck's own that no server has: left out of a fixed launch line.
pub const SPECDECK_ONLY: &[&str] = &["--gpu-memory-gib", "--cpu-kv-cache-gib"];

/// The flag `flag` names, by its canonical name or an alias.
pub fn find_flag(flag: &str) -> Option<&'static FlagDef> {
    FLAGS.iter().find(|def| def.is_called(flag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_has_a_help_line_and_one_owner_per_spelling() {
        let mut spellings = Vec::new();
        for def in FLAGS {
            assert!(!def.help.is_empty(), "{} has no help", def.name);
            spellings.push(def.name);
            spellings.extend(def.aliases);
        }
        let count = spellings.len();
        spellings.sort();
        spellings.dedup();
        assert_eq!(spellings.len(), count, "a spelling names two flags");
    }
}
