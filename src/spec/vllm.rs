//! vLLM's launch line (`vllm serve MODEL …`, `python -m vllm.entrypoints.openai.api_server`)
//! read into SGLang's terms: the flags that have an SGLang twin set it, `--speculative-config
//! JSON` (and the older `--speculative-model` / `--num-speculative-tokens`) sets the drafter,
//! the algorithm and the steps. `LaunchSpec::server` says the line is vLLM's, whose semantics
//! some rules follow (src/engine/context.rs).

use serde_json::Value;

use super::{Algorithm, LaunchSpec, LineArg, SpecError};

/// vLLM flag → the `FLAGS` name it sets (vllm/engine/arg_utils.py spellings).
pub const VLLM_FLAGS: &[(&str, &str)] = &[
    ("--model", "--model-path"),
    ("--tensor-parallel-size", "--tp-size"),
    ("-tp", "--tp-size"),
    ("--max-model-len", "--context-length"),
    ("--speculative-model", "--speculative-draft-model-path"),
    ("--num-speculative-tokens", "--speculative-num-steps"),
    ("--dtype", "--dtype"),
    ("--quantization", "--quantization"),
    ("-q", "--quantization"),
    ("--kv-cache-dtype", "--kv-cache-dtype"),
    ("--served-model-name", "--served-model-name"),
    ("--revision", "--revision"),
    ("--data-parallel-size", "--dp-size"),
    ("-dp", "--dp-size"),
];

pub const SPECULATIVE_CONFIG: &str = "--speculative-config";

/// Keys of `--speculative-config` (vllm/config/speculative.py) → the `FLAGS` name each sets.
pub const SPECULATIVE_KEYS: &[(&str, &str)] = &[
    ("model", "--speculative-draft-model-path"),
    ("method", "--speculative-algorithm"),
    ("num_speculative_tokens", "--speculative-num-steps"),
    ("revision", "--speculative-draft-model-revision"),
];

/// vLLM's `method` as an SGLang algorithm: EAGLE-3, EAGLE, the MTP family (run as EAGLE, as
/// SGLang runs NEXTN) and a separate draft model (STANDALONE).
fn algorithm(method: &str) -> Option<Algorithm> {
    match method {
        "eagle3" => Some(Algorithm::Eagle3),
        "eagle" => Some(Algorithm::Eagle),
        "draft_model" => Some(Algorithm::Standalone),
        m if m == "mtp" || m.ends_with("_mtp") => Some(Algorithm::Eagle),
        _ => None,
    }
}

/// The vLLM spelling of an SGLang flag, when vLLM has one (the first in `VLLM_FLAGS`).
pub fn vllm_flag(canonical: &str) -> Option<&'static str> {
    VLLM_FLAGS.iter().find(|(_, c)| *c == canonical).map(|(v, _)| *v)
}

/// A JSON value as a flag value: strings bare, the rest as JSON.
pub fn json_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl LaunchSpec {
    /// Apply one `--speculative-config` object; keys specdeck does not read are kept as
    /// `--speculative-config.KEY` extra flags (listed as not checked).
    fn read_speculative_config(&mut self, json: &str) -> Result<(), SpecError> {
        let bad = |expected| SpecError::BadValue { flag: SPECULATIVE_CONFIG.into(), expected, value: json.to_string() };
        let config: serde_json::Map<String, Value> = serde_json::from_str(json).map_err(|_| bad("a JSON object"))?;
        for (key, value) in &config {
            let text = json_text(value);
            match SPECULATIVE_KEYS.iter().find(|(k, _)| k == key) {
                Some((_, "--speculative-algorithm")) => {
                    let a = algorithm(&text).ok_or_else(|| bad("a method of eagle3, eagle, mtp or draft_model"))?;
                    self.speculative_algorithm = Some(a);
                }
                Some((_, flag)) => self.set_flag(flag, &text)?,
                None => self.set_extra(&format!("{SPECULATIVE_CONFIG}.{key}"), Some(text)),
            }
        }
        Ok(())
    }

    /// vLLM's arguments: the model as the first positional word of `vllm serve`, flags by
    /// vLLM's names (underscores read as dashes, as vLLM's parser does).
    pub(super) fn read_vllm_args(&mut self, args: &[String]) -> Result<Vec<LineArg>, SpecError> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let w = &args[i];
            i += 1;
            if !w.starts_with('-') {
                let sets = self.model_path.is_none().then(|| "--model-path".to_string());
                if sets.is_some() {
                    self.model_path = Some(w.clone());
                }
                out.push(LineArg { spelling: String::new(), sets, value: Some(w.clone()), joined: false });
                continue;
            }
            let (typed, joined_value) = match w.split_once('=') {
                Some((f, v)) => (f, Some(v.to_string())),
                None => (w.as_str(), None),
            };
            let flag = format!("-{}", typed[1..].replace('_', "-"));
            let joined = joined_value.is_some();
            let value = joined_value.or_else(|| {
                let next = args.get(i).filter(|n| !n.starts_with('-') || n.parse::<f64>().is_ok())?;
                i += 1;
                Some(next.clone())
            });
            let sets = match (VLLM_FLAGS.iter().find(|(v, _)| *v == flag), &value) {
                (Some((_, canonical)), Some(v)) => {
                    self.set_flag(canonical, v)?;
                    canonical.to_string()
                }
                (Some(_), None) => return Err(SpecError::MissingValue { flag: typed.to_string() }),
                (None, Some(v)) if flag == SPECULATIVE_CONFIG => {
                    self.read_speculative_config(v)?;
                    flag
                }
                (None, _) => {
                    self.set_extra(&flag, value.clone());
                    flag
                }
            };
            out.push(LineArg { spelling: typed.to_string(), sets: Some(sets), value, joined });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Server;

    #[test]
    fn vllm_serve_with_a_speculative_config_is_read_in_sglang_terms() {
        let spec = LaunchSpec::from_command_line(
            r#"vllm serve org/target --tensor-parallel-size 4 --max-model-len=65536 --trust-remote-code \
               --speculative-config '{"model": "org/draft", "num_speculative_tokens": 3, "method": "eagle3", "draft_tensor_parallel_size": 1}'"#,
        )
        .unwrap();
        assert_eq!(spec.server, Server::Vllm);
        assert_eq!((spec.model_path.as_deref(), spec.draft_model_path.as_deref()), (Some("org/target"), Some("org/draft")));
        assert_eq!((spec.tp_size, spec.context_length, spec.speculative_num_steps), (Some(4), Some(65536), Some(3)));
        assert_eq!(spec.speculative_algorithm, Some(Algorithm::Eagle3));
        assert_eq!(
            spec.extra_flags,
            [("--trust-remote-code".to_string(), None), ("--speculative-config.draft_tensor_parallel_size".to_string(), Some("1".into()))]
        );
    }

    #[test]
    fn older_vllm_flags_and_bad_configs() {
        let spec = LaunchSpec::from_command_line(
            "python -m vllm.entrypoints.openai.api_server --model /t --speculative_model /d --num-speculative-tokens 5",
        )
        .unwrap();
        assert_eq!(
            (spec.model_path.as_deref(), spec.draft_model_path.as_deref(), spec.speculative_num_steps),
            (Some("/t"), Some("/d"), Some(5))
        );
        let err = LaunchSpec::from_command_line("vllm serve /t --speculative-config '{\"method\": \"ngram\"}'").unwrap_err();
        assert_eq!(
            err.to_string(),
            "--speculative-config: expected a method of eagle3, eagle, mtp or draft_model, got \"{\\\"method\\\": \\\"ngram\\\"}\""
        );
    }
}
