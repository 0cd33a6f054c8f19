//! The launch flags an engine prints at start (`server_args=ServerArgs(…)`, vLLM's
//! `non-default args: {…}`), as a `LaunchSpec`: the console shows it, and remedies start
//! from its values (the current `--mem-fraction-static`, `--tp-size`, …).

use std::sync::OnceLock;

use regex::Regex;

use crate::spec::LaunchSpec;

use super::rules::Engine;

/// Engine field name → the flag it is set by (SGLang names; vLLM's own where they differ).
static SGLANG_FIELDS: &[(&str, &str)] = &[
    ("model_path", "--model-path"),
    ("speculative_draft_model_path", "--speculative-draft-model-path"),
    ("speculative_algorithm", "--speculative-algorithm"),
    ("tp_size", "--tp-size"),
    ("context_length", "--context-length"),
    ("speculative_num_steps", "--speculative-num-steps"),
    ("speculative_eagle_topk", "--speculative-eagle-topk"),
    ("speculative_num_draft_tokens", "--speculative-num-draft-tokens"),
    ("dtype", "--dtype"),
    ("mem_fraction_static", "--mem-fraction-static"),
    ("cuda_graph_max_bs", "--cuda-graph-max-bs"),
    ("max_running_requests", "--max-running-requests"),
    ("page_size", "--page-size"),
    ("speculative_token_map", "--speculative-token-map"),
    ("attention_backend", "--attention-backend"),
];

static VLLM_FIELDS: &[(&str, &str)] = &[
    ("model", "--model-path"),
    ("tensor_parallel_size", "--tp-size"),
    ("max_model_len", "--max-model-len"),
    ("dtype", "--dtype"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
];

/// Inside vLLM's `'speculative_config': {…}`.
static VLLM_SPEC_FIELDS: &[(&str, &str)] = &[
    ("method", "--speculative-algorithm"),
    ("model", "--speculative-draft-model-path"),
    ("num_speculative_tokens", "--speculative-num-steps"),
];

fn pairs() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r#"'?(\w+)'?\s*[=:]\s*('[^']*'|"[^"]*"|[^,(){}\s]+)"#).expect("the field pattern compiles"))
}

fn apply(spec: &mut LaunchSpec, text: &str, fields: &[(&str, &str)]) {
    for c in pairs().captures_iter(text) {
        let Some(&(_, flag)) = fields.iter().find(|(name, _)| *name == &c[1]) else { continue };
        let value = c[2].trim_matches(|ch| ch == '\'' || ch == '"');
        if value == "None" || value.is_empty() {
            continue;
        }
        // A value the spec cannot hold (an algorithm specdeck does not run) is left out.
        let _ = spec.set_flag(flag, value);
    }
}

/// The spec an argument dump describes.
pub fn parse(engine: Engine, dump: &str) -> LaunchSpec {
    let mut spec = LaunchSpec::default();
    if engine != Engine::Vllm {
        apply(&mut spec, dump, SGLANG_FIELDS);
        return spec;
    }
    let (outer, speculative) = match dump.find("'speculative_config': {") {
        Some(at) => {
            let body = &dump[at..];
            let end = body.find('}').map_or(body.len(), |i| i + 1);
            (format!("{}{}", &dump[..at], &body[end..]), Some(&body[..end]))
        }
        None => (dump.to_string(), None),
    };
    apply(&mut spec, &outer, VLLM_FIELDS);
    if let Some(s) = speculative {
        apply(&mut spec, s, VLLM_SPEC_FIELDS);
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Algorithm;

    #[test]
    fn sglang_server_args_become_a_spec() {
        let dump = "server_args=ServerArgs(model_path='/m/Kimi-K2.5', tokenizer_path='/m/Kimi-K2.5', tp_size=8, \
                    context_length=None, mem_fraction_static=0.85, speculative_algorithm='EAGLE3', \
                    speculative_draft_model_path='/m/draft', speculative_num_steps=3, cuda_graph_max_bs=64, page_size=1)";
        let spec = parse(Engine::Sglang, dump);
        assert_eq!(spec.model_path.as_deref(), Some("/m/Kimi-K2.5"));
        assert_eq!(spec.tp_size, Some(8));
        assert_eq!(spec.context_length, None);
        assert_eq!(spec.mem_fraction_static, Some(0.85));
        assert_eq!(spec.speculative_algorithm, Some(Algorithm::Eagle3));
        assert_eq!(spec.cuda_graph_max_bs, Some(64));
        assert_eq!((spec.page_size, spec.extra_flags.len()), (Some(1), 0));
    }

    #[test]
    fn vllm_args_keep_target_and_draft_apart() {
        let dump = "non-default args: {'model': '/m/llama', 'speculative_config': {'method': 'eagle3', 'model': \
                    '/m/eagle3', 'num_speculative_tokens': 3}, 'tensor_parallel_size': 4}";
        let spec = parse(Engine::Vllm, dump);
        assert_eq!(spec.model_path.as_deref(), Some("/m/llama"));
        assert_eq!(spec.draft_model_path.as_deref(), Some("/m/eagle3"));
        assert_eq!(spec.speculative_algorithm, Some(Algorithm::Eagle3));
        assert_eq!(spec.speculative_num_steps, Some(3));
        assert_eq!(spec.tp_size, Some(4));
    }
}
