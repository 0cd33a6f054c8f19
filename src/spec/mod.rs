//! The launch spec: SGLang-compatible flags plus environment, and the parse of a pasted
//! launch line (SGLang's or vLLM's, wrapped in docker or env, or in a script). Remedies
//! change a `LaunchSpec`, never the user's files; `fixed_command` writes the user's line back
//! with them.

mod argparse;
mod fixed;
mod flags;
mod line;
mod vllm;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use flags::{find_flag, FlagDef, FLAGS, SPECDECK_ONLY};
pub use line::{LaunchLine, LineArg, Server};

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
            // SGLang runs NEXTN as EAGLE (server_args.py: `if self.speculative_algorithm ==
            // "NEXTN": self.speculative_algorithm = "EAGLE"`); MTP is the name other stacks
            // give the same multi-token-prediction drafting.
            "EAGLE" | "NEXTN" | "MTP" => Some(Algorithm::Eagle),
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
    #[error("{flag}: ambiguous option: could match {} (SGLang accepts a prefix of one option only)", candidates.join(", "))]
    Ambiguous { flag: String, candidates: Vec<String> },
    #[error("no line of the script runs sglang or vllm (python -m sglang.launch_server, vllm serve, ...)")]
    NoServerLine,
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
    pub page_size: Option<u32>,
    pub attention_backend: Option<String>,
    pub draft_attention_backend: Option<String>,
    pub kv_cache_dtype: Option<String>,
    pub quantization: Option<String>,
    /// `--speculative-draft-model-quantization`: the drafter's method (`unquant`: none); by
    /// default SGLang loads the drafter with the target's.
    pub draft_quantization: Option<String>,
    pub dp_size: Option<u32>,
    /// `--enable-dp-attention` (a switch): the `--dp-size` ranks split attention inside the TP
    /// group instead of each running a replica of the model.
    #[serde(default)]
    pub enable_dp_attention: bool,
    pub ep_size: Option<u32>,
    /// -1 turns chunked prefill off, as in SGLang.
    pub chunked_prefill_size: Option<i64>,
    pub max_total_tokens: Option<u64>,
    pub served_model_name: Option<String>,
    /// The target's revision in the Hugging Face cache.
    pub revision: Option<String>,
    /// The drafter's revision in the Hugging Face cache.
    pub draft_revision: Option<String>,
    /// The server the launch line starts (its semantics differ: see src/engine/context.rs).
    #[serde(default)]
    pub server: Server,
    /// The pasted line as typed, for `fixed_command`.
    pub line: Option<LaunchLine>,
    /// `--cpu-kv-cache-gib`: the KV cache's budget on the CPU backend (no device memory to size from).
    #[serde(default)]
    pub cpu_kv_cache_gib: Option<f64>,
}

impl LaunchSpec {
    /// Set one flag by its SGLang name. Unknown flags are kept in `extra_flags`.
    pub fn set_flag(&mut self, flag: &str, value: &str) -> Result<(), SpecError> {
        let Some(def) = find_flag(flag) else {
            self.set_extra(flag, Some(value.to_string()));
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

    /// The expert-parallel size (SGLang's default is 1).
    pub fn ep(&self) -> u32 {
        self.ep_size.unwrap_or(1).max(1)
    }

    /// The data-parallel size (SGLang's default is 1).
    pub fn dp(&self) -> u32 {
        self.dp_size.unwrap_or(1).max(1)
    }

    /// Copies of the model the launch runs, each on its own `tp()` GPUs: `--dp-size` of them,
    /// or one with `--enable-dp-attention`, whose DP ranks live inside the TP group.
    pub fn replicas(&self) -> u32 {
        if self.enable_dp_attention {
            1
        } else {
            self.dp()
        }
    }

    /// The GPUs the launch occupies: `tp()` for each replica.
    pub fn gpus_needed(&self) -> u64 {
        u64::from(self.tp()) * u64::from(self.replicas())
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

    /// Set a flag specdeck does not act on (kept, echoed as not checked).
    fn set_extra(&mut self, flag: &str, value: Option<String>) {
        self.extra_flags.retain(|(f, _)| f != flag);
        self.extra_flags.push((flag.to_string(), value));
    }

    /// A variable of the environment the launch runs in (this process's), unless the line
    /// sets it: part of the line's own environment, so no fix reports it as added.
    pub fn inherit_env(&mut self, name: &str, value: &str) {
        if !self.env.contains_key(name) {
            self.env.insert(name.to_string(), value.to_string());
            if let Some(line) = &mut self.line {
                line.env.insert(name.to_string(), value.to_string());
            }
        }
    }

    /// Parse a pasted launch command, e.g.
    /// `SGLANG_X=1 python3 -m sglang.launch_server --model-path M --tp 8 --trust-remote-code`:
    /// one line, a line with backslash-newlines, or a shell script (the line that runs the
    /// server is taken, with the variables exported before it).
    pub fn from_command_line(text: &str) -> Result<LaunchSpec, SpecError> {
        let (words, exports) = line::command_words(text)?;
        Self::from_line_words(words, exports)
    }

    /// As `from_command_line`, for words already split by a shell; one word holding a whole
    /// line (a quoted paste) is split again.
    pub fn from_words<S: AsRef<str>>(words: &[S]) -> Result<LaunchSpec, SpecError> {
        match words {
            [one] if one.as_ref().trim().contains(char::is_whitespace) => Self::from_command_line(one.as_ref()),
            _ => Self::from_line_words(words.iter().map(|w| w.as_ref().to_string()).collect(), BTreeMap::new()),
        }
    }

    /// The spec of a launch line: the environment of its wrapper, and its arguments read as
    /// the server it starts reads them. No words, no line: an empty spec.
    fn from_line_words(words: Vec<String>, exports: BTreeMap<String, String>) -> Result<LaunchSpec, SpecError> {
        let mut spec = LaunchSpec::default();
        if words.is_empty() {
            return Ok(spec);
        }
        let (start, server, len) = line::find_program(&words).unwrap_or_else(|| {
            // No known program: what precedes the first flag is the program, after its
            // leading assignments.
            let first_flag = words.iter().position(|w| w.starts_with("--")).unwrap_or(words.len());
            let start = words[..first_flag].iter().take_while(|w| line::env_slots(std::slice::from_ref(w)).len() == 1).count();
            (start, Server::Sglang, first_flag - start)
        });
        let end = words[start + len..].iter().position(|w| line::is_shell_operator(w)).map_or(words.len(), |n| start + len + n);
        let mut launch = LaunchLine {
            server,
            wrapper: words[..start].to_vec(),
            program: words[start..start + len].to_vec(),
            tail: words[end..].to_vec(),
            ..LaunchLine::default()
        };
        spec.env = exports;
        spec.env.extend(line::env_slots(&launch.wrapper).into_iter().map(|slot| (slot.name, slot.value)));
        let args = &words[start + len..end];
        launch.args = match server {
            Server::Sglang => spec.read_sglang_args(args)?,
            Server::Vllm => spec.read_vllm_args(args)?,
        };
        launch.flags = spec.flags().into_iter().map(|(f, v)| (f.to_string(), v)).collect();
        launch.extra_flags = spec.extra_flags.clone();
        launch.env = spec.env.clone();
        spec.server = server;
        spec.line = Some(launch);
        Ok(spec)
    }

    /// SGLang's arguments, read as its argparse reads them (prefixes included).
    fn read_sglang_args(&mut self, args: &[String]) -> Result<Vec<LineArg>, SpecError> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let w = &args[i];
            i += 1;
            if !w.starts_with("--") {
                // A stray positional word; SGLang has none, but the line keeps it.
                out.push(LineArg { spelling: String::new(), sets: None, value: Some(w.clone()), joined: false });
                continue;
            }
            let (flag, joined_value) = match w.split_once('=') {
                Some((f, v)) => (f, Some(v.to_string())),
                None => (w.as_str(), None),
            };
            let resolved = argparse::resolve(flag)?;
            let takes_value = !matches!(&resolved, argparse::Resolved::Known(def) if def.is_switch());
            let joined = joined_value.is_some();
            let value = match joined_value {
                Some(v) => Some(v),
                None if takes_value && i < args.len() && !args[i].starts_with("--") => {
                    i += 1;
                    Some(args[i - 1].clone())
                }
                None => None,
            };
            let sets = match resolved {
                argparse::Resolved::Known(def) => {
                    match &value {
                        Some(v) => self.set_flag(def.name, v)?,
                        None if def.is_switch() => self.set_flag(def.name, "")?,
                        None => return Err(SpecError::MissingValue { flag: flag.to_string() }),
                    }
                    def.name.to_string()
                }
                argparse::Resolved::Other(name) => {
                    self.set_extra(&name, value.clone());
                    name
                }
            };
            out.push(LineArg { spelling: flag.to_string(), sets: Some(sets), value, joined });
        }
        Ok(out)
    }
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
        assert_eq!(LaunchSpec::from_command_line(&spec.to_string()).unwrap().flags(), spec.flags());
        spec.unset_flag("--enable-deterministic-inference");
        assert!(!spec.deterministic);
        let err = LaunchSpec::from_command_line("x --enable-deterministic-inference=maybe").unwrap_err();
        assert_eq!(err.to_string(), "--enable-deterministic-inference: expected true or false, got \"maybe\"");
    }

    /// The drafter's quantization and SGLang's DP-attention switch are read from a pasted
    /// line, listed with the flags, and written back by `fixed_command`.
    #[test]
    fn draft_quantization_and_dp_attention_are_launch_flags() {
        let line = "python3 -m sglang.launch_server --model-path /m --tp 4 --dp 2 --enable-dp-attention --quantization awq";
        let mut spec = LaunchSpec::from_command_line(line).unwrap();
        assert_eq!((spec.dp_size, spec.enable_dp_attention, spec.extra_flags.len()), (Some(2), true, 0));
        assert_eq!((spec.replicas(), spec.gpus_needed()), (1, 4));
        spec.apply_change(&SpecChange::SetFlag { flag: "--speculative-draft-model-quantization".into(), value: "unquant".into() }).unwrap();
        assert_eq!(spec.draft_quantization.as_deref(), Some("unquant"));
        assert!(spec.flags().contains(&("--speculative-draft-model-quantization", "unquant".to_string())));
        assert_eq!(spec.fixed_command(), format!("{line} --speculative-draft-model-quantization unquant"));
        spec.unset_flag("--enable-dp-attention");
        assert_eq!((spec.replicas(), spec.gpus_needed()), (2, 8));
        assert_eq!(
            spec.fixed_command(),
            "python3 -m sglang.launch_server --model-path /m --tp 4 --dp 2 --quantization awq --speculative-draft-model-quantization unquant"
        );
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
