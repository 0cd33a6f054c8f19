//! Every finding id and remedy id the code reports, as the tables README.md lists (tests/cli.rs
//! checks both the README and the source against them), and the one check every command runs
//! on its `--apply` ids before anything starts.

/// Finding ids: from `check`'s rules, from the engine at launch, and from a replay's diagnosis.
pub const FINDINGS: &[&str] = &[
    "algorithm-mismatch",
    "attention-backend",
    "aux-layer-out-of-range",
    "backend-error",
    "context-length-exceeds-draft",
    "context-length-exceeds-target",
    "cuda-graph-capture-failed",
    "cuda-start-failed",
    "cuda-unavailable",
    "device-unavailable",
    "draft-architecture",
    "draft-attention-backend",
    "draft-layers",
    "draft-vocab-map",
    "dtype-mismatch",
    "env-typo",
    "gpu-memory-unbalanced",
    "gpu-unsupported",
    "hidden-size-mismatch",
    "illegal-memory-access",
    "kernel-compile-error",
    "low-acceptance",
    "memory-budget",
    "nan-logits",
    "nccl-error",
    "out-of-memory",
    "quantization-mismatch",
    "request-too-long",
    "rope-mismatch",
    "scheduler-killed",
    "speculative-args",
    "target-no-capture-support",
    "tokenizer-mismatch",
    "tp-divisibility",
    "unreadable-input",
    "unrecognized-failure",
    "unsupported-algorithm",
    "unsupported-architecture",
    "vocab-mismatch",
];

/// Remedy ids `--apply` takes: those `check`'s rules and the engine offer for a launch.
pub const REMEDIES: &[&str] = &[
    "align-chunked-prefill-size",
    "allow-longer-context",
    "clamp-context-length",
    "draft-attention-backend-flashinfer",
    "eagle-topk-1",
    "fit-dp-size",
    "fit-ep-size",
    "fit-visible-gpus",
    "fix-env-typo",
    "increase-tp-size",
    "page-size-1",
    "reduce-context-length",
    "reduce-cuda-graph-max-bs",
    "reduce-dp-size",
    "reduce-tp-size",
    "set-draft-architecture",
    "set-draft-quantization-unquant",
    "set-dtype-bfloat16",
    "set-num-draft-tokens",
    "set-speculative-algorithm",
    "set-speculative-num-steps",
    "single-gpu",
    "unset-attention-backend",
    "unset-ep-size",
    "unset-quantization",
    "unset-speculative-algorithm",
    "untie-draft-lm-head",
    "use-chain-drafting",
    "use-cpu-device",
    "use-default-speculative-args",
];

/// Remedy ids a replay's diagnosis offers for the SGLang or vLLM launch that wrote the log
/// (changes to that engine's command line, which specdeck does not launch).
pub const REPLAY_REMEDIES: &[&str] = &[
    "algorithm-eagle",
    "algorithm-eagle3",
    "allow-long-max-model-len",
    "allow-longer-context",
    "clamp-context-length",
    "clamp-max-model-len",
    "cuda-launch-blocking",
    "disable-cuda-graph",
    "disable-mixed-chunk",
    "disable-spec-v2",
    "draft-architecture-eagle3",
    "draft-attention-backend-flashinfer",
    "draft-attention-backend-trtllm-mha",
    "draft-fc-bias",
    "draft-quantization",
    "draft-tokens-steps-plus-1",
    "eagle-topk-1",
    "enforce-eager",
    "increase-tp-size",
    "lower-cuda-graph-max-bs",
    "lower-gpu-memory-utilization",
    "lower-mem-fraction-static",
    "nccl-debug-info",
    "page-size-1",
    "pp-size-1",
    "raise-mem-fraction-static",
    "skip-memory-balance-check",
    "tp-size-1",
    "tp-size-divisor",
];

/// An `--apply` id that no remedy has.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("--apply {id}: no remedy has this id; the known ids: {}", REMEDIES.join(", "))]
pub struct UnknownRemedy {
    pub id: String,
}

/// The one check of `--apply` ids, run by `check`, `launch`, the bare demo, `generate` and
/// `bench` before anything starts: every id must be one a remedy has. (Whether a finding of
/// this launch offers it is known only later: at once for `check`, `generate` and `bench`,
/// once the launch reports its findings for the console.)
pub fn known_remedies(ids: &[String]) -> Result<(), UnknownRemedy> {
    match ids.iter().find(|id| !REMEDIES.contains(&id.as_str())) {
        Some(id) => Err(UnknownRemedy { id: id.clone() }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_id_is_named_with_every_known_one_and_known_ids_pass() {
        assert_eq!(known_remedies(&["clamp-context-length".into(), "use-cpu-device".into()]), Ok(()));
        let err = known_remedies(&["clamp-context-length".into(), "clamp-context".into()]).unwrap_err();
        assert_eq!(err, UnknownRemedy { id: "clamp-context".into() });
        let text = err.to_string();
        assert!(
            text.starts_with(
                "--apply clamp-context: no remedy has this id; the known ids: align-chunked-prefill-size, allow-longer-context, "
            ),
            "{text}"
        );
        assert!(text.ends_with(", use-default-speculative-args"), "{text}");
    }

    #[test]
    fn the_tables_are_sorted_without_repeats() {
        for table in [FINDINGS, REMEDIES, REPLAY_REMEDIES] {
            assert!(table.windows(2).all(|w| w[0] < w[1]), "{table:?}");
        }
    }
}
