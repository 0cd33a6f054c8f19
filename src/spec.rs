//! The launch spec: SGLang-compatible flags plus environment, and the parse of a pasted
//! SGLang command line. Remedies change a `LaunchSpec`, never the user's files.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The env var SGLang reads to let the target context exceed the drafter's positions.
pub const ALLOW_LONGER_CONTEXT_ENV: &str = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Algorithm {
    Eagle3,
    Eagle,
    Standalone,
    None,
}

impl Algorithm {
    pub fn parse(s: &str) -> Option<Algorithm> {
        match s.to_ascii_uppercase().as_str() {
            "EAGLE3" => Some(Algorithm::Eagle3),
            "EAGLE" => Some(Algorithm::Eagle),
            "STANDALONE" => Some(Algorithm::Standalone),
            "NONE" => Some(Algorithm::None),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Eagle3 => "EAGLE3",
            Algorithm::Eagle => "EAGLE",
            Algorithm::Standalone => "STANDALONE",
            Algorithm::None => "NONE",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// CUDA when a driver and GPU are present, else the CPU reference (said in the log).
    #[default]
    Auto,
    Cpu,
    Cuda,
}

impl Device {
    pub fn parse(s: &str) -> Option<Device> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Some(Device::Auto),
            "cpu" => Some(Device::Cpu),
            "cuda" | "gpu" => Some(Device::Cuda),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Device::Auto => "auto",
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("{flag}: expected {expected}, got {value:?}")]
    BadValue { flag: String, expected: &'static str, value: String },
    #[error("{flag} needs a value")]
    MissingValue { flag: String },
    #[error("the pasted command line has unbalanced quotes")]
    BadQuoting,
}

/// One typed change to a `LaunchSpec`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum SpecChange {
    /// Set a launch flag, by its SGLang name (`--context-length`), to a value.
    SetFlag {
        flag: String,
        value: String,
    },
    /// Remove a launch flag.
    UnsetFlag {
        flag: String,
    },
    SetEnv {
        name: String,
        value: String,
    },
    UnsetEnv {
        name: String,
    },
    /// Override a key of the drafter's config in memory for this launch (the file on disk is
    /// never modified). `key` is a JSON pointer.
    OverrideDraftConfig {
        key: String,
        value: Value,
    },
}

impl SpecChange {
    /// A one-line, shell-like rendering: `--context-length 131072`, `SGLANG_X=1`, ...
    pub fn describe(&self) -> String {
        match self {
            SpecChange::SetFlag { flag, value } => format!("{flag} {value}"),
            SpecChange::UnsetFlag { flag } => format!("remove {flag}"),
            SpecChange::SetEnv { name, value } => format!("{name}={value}"),
            SpecChange::UnsetEnv { name } => format!("unset {name}"),
            SpecChange::OverrideDraftConfig { key, value } => format!("draft config {key} = {value} (in memory)"),
        }
    }
}

/// Everything that decides a launch: the flags (SGLang names) and the environment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LaunchSpec {
    pub model_path: Option<String>,
    pub draft_model_path: Option<String>,
    pub speculative_algorithm: Option<Algorithm>,
    pub tp_size: Option<u32>,
    pub context_length: Option<u64>,
    pub speculative_num_steps: Option<u32>,
    pub speculative_eagle_topk: Option<u32>,
    pub speculative_num_draft_tokens: Option<u32>,
    pub dtype: Option<String>,
    pub mem_fraction_static: Option<f64>,
    pub cuda_graph_max_bs: Option<u32>,
    pub max_running_requests: Option<u32>,
    /// `--max-total-tokens`: a cap on the KV cache's tokens below what memory allows.
    #[serde(default)]
    pub max_total_tokens: Option<u64>,
    /// `--chunked-prefill-size`: most prompt tokens one scheduler step prefills.
    #[serde(default)]
    pub chunked_prefill_size: Option<u32>,
    /// `--cpu-kv-cache-gib`: the KV cache's budget on the CPU backend (no device memory to size from).
    #[serde(default)]
    pub cpu_kv_cache_gib: Option<f64>,
    /// Memory per GPU for the budget when NVML has no GPU to ask.
    pub gpu_memory_gib: Option<f64>,
    pub device: Device,
    /// `--enable-deterministic-inference` (a switch, as in SGLang): every matmul goes through
    /// the batch-invariant kernels, prefill included, so output does not depend on how many
    /// rows a step has or, over 2 GPUs, on the tensor-parallel split.
    #[serde(default)]
    pub deterministic: bool,
    /// Environment variables that matter to the launch (SGLANG_*, CUDA_*, ...).
    pub env: BTreeMap<String, String>,
    /// In-memory overrides of the drafter's config.json, by JSON pointer.
    pub draft_overrides: BTreeMap<String, Value>,
    /// Remedy ids applied so far, in order (recorded so a relaunch is reproducible).
    pub applied: Vec<String>,
    /// Flags of a pasted command line that specdeck does not act on, kept for display.
    pub extra_flags: Vec<(String, Option<String>)>,
}

/// One launch flag specdeck acts on: its SGLang name, the other spellings SGLang accepts, its
/// help, and how it sets, shows and clears its field of `LaunchSpec`. `FLAGS` is the one table
/// that `set_flag`, the pasted-command parser and the command line (src/commands/flags.rs) read.
pub struct FlagDef {
    /// The canonical name, `--context-length`.
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    /// The value's placeholder in `--help` (`DIR`); empty for a switch, which takes no value.
    pub value_name: &'static str,
    /// The line `--help` shows; empty for none.
    pub help: &'static str,
    /// Set the field from a value, or say what value was expected.
    set: fn(&mut LaunchSpec, &str) -> Result<(), &'static str>,
    /// The value set, as a command line spells it (empty for a switch that is on); `None` at
    /// the default.
    get: fn(&LaunchSpec) -> Option<String>,
    /// Back to the default.
    clear: fn(&mut LaunchSpec),
}

impl FlagDef {
    pub fn is_switch(&self) -> bool {
        self.value_name.is_empty()
    }

    fn is_called(&self, flag: &str) -> bool {
        self.name == flag || self.aliases.contains(&flag)
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

/// The flags `LaunchSpec::set_flag` understands, in the order `LaunchSpec::flags` lists them.
pub const FLAGS: &[FlagDef] = &[
    FlagDef {
        name: "--model-path",
        aliases: &["--model"],
        value_name: "DIR",
        help: "",
        set: |s, v| text(v).map(|v| s.model_path = Some(v)),
        get: |s| s.model_path.clone(),
        clear: |s| s.model_path = None,
    },
    FlagDef {
        name: "--speculative-draft-model-path",
        aliases: &["--speculative-draft-model", "--speculative-draft"],
        value_name: "DIR",
        help: "",
        set: |s, v| text(v).map(|v| s.draft_model_path = Some(v)),
        get: |s| s.draft_model_path.clone(),
        clear: |s| s.draft_model_path = None,
    },
    FlagDef {
        name: "--speculative-algorithm",
        aliases: &[],
        value_name: "ALGO",
        help: "EAGLE3, EAGLE, STANDALONE or NONE",
        set: |s, v| Algorithm::parse(v).ok_or("EAGLE3, EAGLE, STANDALONE or NONE").map(|a| s.speculative_algorithm = Some(a)),
        get: |s| s.speculative_algorithm.map(|a| a.name().to_string()),
        clear: |s| s.speculative_algorithm = None,
    },
    FlagDef {
        name: "--tp-size",
        aliases: &["--tp", "--tensor-parallel-size"],
        value_name: "N",
        help: "",
        set: |s, v| positive(v).map(|n| s.tp_size = Some(n)),
        get: |s| s.tp_size.map(|v| v.to_string()),
        clear: |s| s.tp_size = None,
    },
    FlagDef {
        name: "--context-length",
        aliases: &[],
        value_name: "TOKENS",
        help: "",
        set: |s, v| positive(v).map(|n| s.context_length = Some(n)),
        get: |s| s.context_length.map(|v| v.to_string()),
        clear: |s| s.context_length = None,
    },
    FlagDef {
        name: "--speculative-num-steps",
        aliases: &[],
        value_name: "S",
        help: "",
        set: |s, v| num(v, INTEGER).map(|n| s.speculative_num_steps = Some(n)),
        get: |s| s.speculative_num_steps.map(|v| v.to_string()),
        clear: |s| s.speculative_num_steps = None,
    },
    FlagDef {
        name: "--speculative-eagle-topk",
        aliases: &[],
        value_name: "K",
        help: "",
        set: |s, v| num(v, INTEGER).map(|n| s.speculative_eagle_topk = Some(n)),
        get: |s| s.speculative_eagle_topk.map(|v| v.to_string()),
        clear: |s| s.speculative_eagle_topk = None,
    },
    FlagDef {
        name: "--speculative-num-draft-tokens",
        aliases: &[],
        value_name: "N",
        help: "",
        set: |s, v| num(v, INTEGER).map(|n| s.speculative_num_draft_tokens = Some(n)),
        get: |s| s.speculative_num_draft_tokens.map(|v| v.to_string()),
        clear: |s| s.speculative_num_draft_tokens = None,
    },
    FlagDef {
        name: "--dtype",
        aliases: &[],
        value_name: "DTYPE",
        help: "",
        set: |s, v| text(v).map(|v| s.dtype = Some(v)),
        get: |s| s.dtype.clone(),
        clear: |s| s.dtype = None,
    },
    FlagDef {
        name: "--mem-fraction-static",
        aliases: &[],
        value_name: "F",
        help: "",
        set: |s, v| within(v, f64::MIN_POSITIVE..=1.0, "a fraction in (0, 1], such as 0.85").map(|n| s.mem_fraction_static = Some(n)),
        get: |s| s.mem_fraction_static.map(|v| v.to_string()),
        clear: |s| s.mem_fraction_static = None,
    },
    FlagDef {
        name: "--cuda-graph-max-bs",
        aliases: &[],
        value_name: "B",
        help: "",
        set: |s, v| num(v, INTEGER).map(|n| s.cuda_graph_max_bs = Some(n)),
        get: |s| s.cuda_graph_max_bs.map(|v| v.to_string()),
        clear: |s| s.cuda_graph_max_bs = None,
    },
    FlagDef {
        name: "--max-running-requests",
        aliases: &[],
        value_name: "N",
        help: "",
        set: |s, v| num(v, INTEGER).map(|n| s.max_running_requests = Some(n)),
        get: |s| s.max_running_requests.map(|v| v.to_string()),
        clear: |s| s.max_running_requests = None,
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
        name: "--max-total-tokens",
        aliases: &[],
        value_name: "N",
        help: "Cap the KV cache at N tokens (below what memory allows)",
        set: |s, v| num(v, INTEGER).map(|n| s.max_total_tokens = Some(n)),
        get: |s| s.max_total_tokens.map(|v| v.to_string()),
        clear: |s| s.max_total_tokens = None,
    },
    FlagDef {
        name: "--chunked-prefill-size",
        aliases: &[],
        value_name: "N",
        help: "Most prompt tokens one scheduler step prefills",
        set: |s, v| num(v, INTEGER).map(|n| s.chunked_prefill_size = Some(n)),
        get: |s| s.chunked_prefill_size.map(|v| v.to_string()),
        clear: |s| s.chunked_prefill_size = None,
    },
    FlagDef {
        name: "--cpu-kv-cache-gib",
        aliases: &[],
        value_name: "GIB",
        help: "The KV cache's budget on the CPU backend (default 2 GiB)",
        set: |s, v| within(v, f64::MIN_POSITIVE.., "a finite number of GiB above 0").map(|n| s.cpu_kv_cache_gib = Some(n)),
        get: |s| s.cpu_kv_cache_gib.map(|v| v.to_string()),
        clear: |s| s.cpu_kv_cache_gib = None,
    },
];

/// The flag `flag` names, by its canonical name or an alias.
pub fn find_flag(flag: &str) -> Option<&'static FlagDef> {
    FLAGS.iter().find(|def| def.is_called(flag))
}

impl LaunchSpec {
    /// Set one flag by its SGLang name. Unknown flags are kept in `extra_flags`.
    pub fn set_flag(&mut self, flag: &str, value: &str) -> Result<(), SpecError> {
        let Some(def) = find_flag(flag) else {
            self.extra_flags.retain(|(f, _)| f != flag);
            self.extra_flags.push((flag.to_string(), Some(value.to_string())));
            return Ok(());
        };
        (def.set)(self, value).map_err(|expected| SpecError::BadValue { flag: def.name.to_string(), expected, value: value.to_string() })
    }

    pub fn unset_flag(&mut self, flag: &str) {
        match find_flag(flag) {
            Some(def) => (def.clear)(self),
            None => self.extra_flags.retain(|(f, _)| f != flag),
        }
    }

    /// The flags that are set, as (canonical flag, value) pairs in `FLAGS` order; a switch
    /// that is on has an empty value, which the command line leaves out.
    pub fn flags(&self) -> Vec<(&'static str, String)> {
        FLAGS.iter().filter_map(|def| (def.get)(self).map(|v| (def.name, v))).collect()
    }

    /// The tensor-parallel size (SGLang's default is 1).
    pub fn tp(&self) -> u32 {
        self.tp_size.unwrap_or(1).max(1)
    }

    /// SGLang's `get_bool_env_var`: true for "1" or "true" (any case).
    pub fn env_truthy(&self, name: &str) -> bool {
        self.env.get(name).is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true"))
    }

    pub fn apply_change(&mut self, change: &SpecChange) -> Result<(), SpecError> {
        match change {
            SpecChange::SetFlag { flag, value } => self.set_flag(flag, value)?,
            SpecChange::UnsetFlag { flag } => self.unset_flag(flag),
            SpecChange::SetEnv { name, value } => {
                self.env.insert(name.clone(), value.clone());
            }
            SpecChange::UnsetEnv { name } => {
                self.env.remove(name);
            }
            SpecChange::OverrideDraftConfig { key, value } => {
                self.draft_overrides.insert(key.clone(), value.clone());
            }
        }
        Ok(())
    }

    /// Apply every change of a remedy and record its id.
    pub fn apply_remedy(&mut self, id: &str, changes: &[SpecChange]) -> Result<(), SpecError> {
        for change in changes {
            self.apply_change(change)?;
        }
        self.applied.push(id.to_string());
        Ok(())
    }

    /// Parse a pasted launch command, e.g.
    /// `SGLANG_X=1 python3 -m sglang.launch_server --model-path M --tp 8 --trust-remote-code`.
    /// Leading `VAR=value` words become env; everything before the first `--flag` is the
    /// program; boolean flags (no value) are kept in `extra_flags`.
    pub fn from_command_line(line: &str) -> Result<LaunchSpec, SpecError> {
        let joined = line.replace("\\\r\n", " ").replace("\\\n", " ");
        let words = shlex::split(&joined).ok_or(SpecError::BadQuoting)?;
        Self::from_words(&words)
    }

    /// As `from_command_line`, for words already split by a shell.
    pub fn from_words<S: AsRef<str>>(words: &[S]) -> Result<LaunchSpec, SpecError> {
        let mut spec = LaunchSpec::default();
        let words: Vec<&str> = words.iter().map(|w| w.as_ref()).collect();
        let mut i = 0;
        while i < words.len() && !words[i].starts_with("--") {
            let w = words[i];
            if let Some((name, value)) = w.split_once('=') {
                if is_env_name(name) {
                    spec.env.insert(name.to_string(), value.to_string());
                }
            }
            i += 1;
        }
        while i < words.len() {
            let w = words[i];
            i += 1;
            if !w.starts_with("--") {
                continue; // a stray positional word; SGLang has none we act on
            }
            let (flag, value) = match w.split_once('=') {
                Some((f, v)) => (f, Some(v.to_string())),
                None if i < words.len() && !words[i].starts_with("--") => {
                    i += 1;
                    (w, Some(words[i - 1].to_string()))
                }
                None => (w, None),
            };
            match (value, find_flag(flag)) {
                (Some(v), _) => spec.set_flag(flag, &v)?,
                (None, Some(def)) if def.is_switch() => spec.set_flag(flag, "")?,
                (None, Some(_)) => return Err(SpecError::MissingValue { flag: flag.to_string() }),
                (None, None) => spec.extra_flags.push((flag.to_string(), None)),
            }
        }
        Ok(spec)
    }
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

impl fmt::Display for LaunchSpec {
    /// A shell-like line: env assignments, then the flags.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        parts.extend(self.flags().into_iter().map(|(flag, v)| if v.is_empty() { flag.to_string() } else { format!("{flag} {v}") }));
        f.write_str(&parts.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_pasted_sglang_command() {
        let line = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 CUDA_VISIBLE_DEVICES=0,1 python3 -m sglang.launch_server \\\n  --model-path /m/Kimi-K2.5 --speculative-algorithm EAGLE3 --speculative-draft-model-path=/m/draft \\\n  --tp 8 --trust-remote-code --speculative-num-steps 3 --host 0.0.0.0";
        let spec = LaunchSpec::from_command_line(line).unwrap();
        assert_eq!(spec.model_path.as_deref(), Some("/m/Kimi-K2.5"));
        assert_eq!(spec.draft_model_path.as_deref(), Some("/m/draft"));
        assert_eq!(spec.speculative_algorithm, Some(Algorithm::Eagle3));
        assert_eq!(spec.tp_size, Some(8));
        assert_eq!(spec.speculative_num_steps, Some(3));
        assert!(spec.env_truthy(ALLOW_LONGER_CONTEXT_ENV));
        assert_eq!(spec.env.get("CUDA_VISIBLE_DEVICES").map(String::as_str), Some("0,1"));
        assert_eq!(spec.extra_flags, vec![("--trust-remote-code".to_string(), None), ("--host".to_string(), Some("0.0.0.0".to_string()))]);
    }

    /// SGLang's deterministic switch takes no value on a command line, round-trips through
    /// the displayed line, and can be unset.
    #[test]
    fn the_deterministic_switch_is_a_flag_without_a_value() {
        let mut spec =
            LaunchSpec::from_command_line("python3 -m sglang.launch_server --model-path /m --enable-deterministic-inference --tp 2")
                .unwrap();
        assert!(spec.deterministic);
        assert_eq!((spec.tp_size, spec.extra_flags.len()), (Some(2), 0));
        assert_eq!(spec.to_string(), "--model-path /m --tp-size 2 --enable-deterministic-inference");
        assert_eq!(LaunchSpec::from_command_line(&spec.to_string()).unwrap(), spec);
        spec.unset_flag("--enable-deterministic-inference");
        assert!(!spec.deterministic);
        let err = LaunchSpec::from_command_line("x --enable-deterministic-inference=maybe").unwrap_err();
        assert_eq!(err.to_string(), "--enable-deterministic-inference: expected true or false, got \"maybe\"");
    }

    #[test]
    fn bad_values_name_the_flag() {
        let err = LaunchSpec::from_command_line("python -m sglang.launch_server --tp-size eight").unwrap_err();
        assert_eq!(err.to_string(), "--tp-size: expected a positive integer, got \"eight\"");
        let err = LaunchSpec::from_command_line("x --context-length").unwrap_err();
        assert_eq!(err.to_string(), "--context-length needs a value");
        assert_eq!(LaunchSpec::from_command_line("x --model-path 'unclosed").unwrap_err(), SpecError::BadQuoting);
    }

    #[test]
    fn env_truthiness_follows_sglang() {
        let mut spec = LaunchSpec::default();
        for (v, want) in [("1", true), ("true", true), ("True", true), ("0", false), ("yes", false)] {
            spec.env.insert(ALLOW_LONGER_CONTEXT_ENV.into(), v.into());
            assert_eq!(spec.env_truthy(ALLOW_LONGER_CONTEXT_ENV), want, "{v}");
        }
    }

    #[test]
    fn remedies_change_the_spec_and_are_recorded() {
        let mut spec = LaunchSpec::default();
        spec.apply_remedy(
            "allow-longer-context",
            &[
                SpecChange::SetEnv { name: ALLOW_LONGER_CONTEXT_ENV.into(), value: "1".into() },
                SpecChange::OverrideDraftConfig { key: "/max_position_embeddings".into(), value: 262144.into() },
            ],
        )
        .unwrap();
        spec.apply_remedy("clamp", &[SpecChange::SetFlag { flag: "--context-length".into(), value: "131072".into() }]).unwrap();
        assert!(spec.env_truthy(ALLOW_LONGER_CONTEXT_ENV));
        assert_eq!(spec.draft_overrides["/max_position_embeddings"], 262144);
        assert_eq!(spec.context_length, Some(131072));
        assert_eq!(spec.applied, vec!["allow-longer-context", "clamp"]);
        assert_eq!(spec.to_string(), "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 --context-length 131072");
    }
}
