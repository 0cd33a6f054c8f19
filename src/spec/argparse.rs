//! Long options as SGLang's argparse reads them: an exact name or alias, else an unambiguous
//! prefix of one option (`--speculative-algo` is `--speculative-algorithm`, `--tp` is
//! `--tp-size`); a prefix of several options is an error that names them, as argparse's
//! "ambiguous option" is.

use super::flags::{find_flag, FlagDef, FLAGS};
use super::SpecError;

/// SGLang's long options (python/sglang/srt/server_args.py, 0.5.x), one option per word with
/// its aliases joined by `|`. Only the names: prefix matching needs every option to know
/// which prefixes are ambiguous, and the options `FLAGS` reads are among them.
const SGLANG_OPTIONS: &str = "
    --model-path|--model --tokenizer-path --tokenizer-mode --tokenizer-worker-num --skip-tokenizer-init
    --load-format --model-loader-extra-config --trust-remote-code --context-length --is-embedding
    --enable-multimodal --revision --model-impl --host --port --grpc-mode --skip-server-warmup --warmups
    --nccl-port --checkpoint-engine-wait-weights-before-ready --dtype --quantization --quantization-param-path
    --kv-cache-dtype --enable-fp32-lm-head --modelopt-quant --modelopt-checkpoint-restore-path
    --modelopt-checkpoint-save-path --modelopt-export-path --quantize-and-serve --mem-fraction-static
    --max-running-requests --max-queued-requests --max-total-tokens --chunked-prefill-size --max-prefill-tokens
    --schedule-policy --enable-priority-scheduling --abort-on-priority-when-disabled
    --schedule-low-priority-values-first --priority-scheduling-preemption-threshold --schedule-conservativeness
    --page-size --hybrid-kvcache-ratio --swa-full-tokens-ratio --disable-hybrid-swa-memory --radix-eviction-policy
    --device --tensor-parallel-size|--tp-size --pipeline-parallel-size|--pp-size --pp-max-micro-batch-size
    --stream-interval --stream-output --random-seed --constrained-json-whitespace-pattern
    --constrained-json-disable-any-whitespace --watchdog-timeout --dist-timeout --download-dir --base-gpu-id
    --gpu-id-step --sleep-on-idle --log-level --log-level-http --log-requests --log-requests-level
    --crash-dump-folder --show-time-cost --enable-metrics --enable-metrics-for-all-schedulers
    --tokenizer-metrics-custom-labels-header --tokenizer-metrics-allowed-custom-labels
    --bucket-time-to-first-token --bucket-inter-token-latency --bucket-e2e-request-latency
    --collect-tokens-histogram --prompt-tokens-buckets --generation-tokens-buckets --gc-warning-threshold-secs
    --decode-log-interval --enable-request-time-stats-logging --kv-events-config --enable-trace
    --otlp-traces-endpoint --api-key --served-model-name --weight-version --chat-template --completion-template
    --file-storage-path --enable-cache-report --reasoning-parser --tool-call-parser --tool-server
    --sampling-defaults --data-parallel-size|--dp-size --load-balance-method --load-watch-interval
    --prefill-round-robin-balance --dist-init-addr|--nccl-init-addr --nnodes --node-rank
    --json-model-override-args --preferred-sampling-params --enable-lora --max-lora-rank --lora-target-modules
    --lora-paths --max-loras-per-batch --max-loaded-loras --lora-eviction-policy --lora-backend
    --max-lora-chunk-size --attention-backend --prefill-attention-backend --decode-attention-backend
    --sampling-backend --grammar-backend --mm-attention-backend --nsa-prefill-backend --nsa-decode-backend
    --speculative-algorithm --speculative-draft-model-path|--speculative-draft-model
    --speculative-draft-model-revision --speculative-draft-load-format --speculative-num-steps
    --speculative-eagle-topk --speculative-num-draft-tokens --speculative-accept-threshold-single
    --speculative-accept-threshold-acc --speculative-token-map --speculative-attention-mode
    --speculative-draft-attention-backend --speculative-moe-runner-backend --speculative-draft-model-quantization
    --speculative-ngram-min-match-window-size --speculative-ngram-max-match-window-size
    --speculative-ngram-min-bfs-breadth --speculative-ngram-max-bfs-breadth --speculative-ngram-match-type
    --speculative-ngram-branch-length --speculative-ngram-capacity --expert-parallel-size|--ep-size|--ep
    --moe-a2a-backend --moe-runner-backend --flashinfer-mxfp4-moe-precision --enable-flashinfer-allreduce-fusion
    --deepep-mode --ep-num-redundant-experts --ep-dispatch-algorithm --init-expert-location --enable-eplb
    --eplb-algorithm --eplb-rebalance-num-iterations --eplb-rebalance-layers-per-chunk
    --eplb-min-rebalancing-utilization-threshold --expert-distribution-recorder-mode
    --expert-distribution-recorder-buffer-size --enable-expert-distribution-metrics --deepep-config
    --moe-dense-tp-size --elastic-ep-backend --mooncake-ib-device --max-mamba-cache-size --mamba-ssm-dtype
    --mamba-full-memory-ratio --enable-hierarchical-cache --hicache-ratio --hicache-size --hicache-write-policy
    --hicache-io-backend --hicache-mem-layout --hicache-storage-backend --hicache-storage-prefetch-policy
    --hicache-storage-backend-extra-config --enable-lmcache --enable-double-sparsity --ds-channel-config-path
    --ds-heavy-channel-num --ds-heavy-token-num --ds-heavy-channel-type --ds-sparse-decode-threshold
    --cpu-offload-gb --offload-group-size --offload-num-in-group --offload-prefetch-step --offload-mode
    --disable-radix-cache --cuda-graph-max-bs --cuda-graph-bs --disable-cuda-graph --disable-cuda-graph-padding
    --enable-profile-cuda-graph --enable-cudagraph-gc --enable-nccl-nvls --enable-symm-mem
    --disable-flashinfer-cutlass-moe-fp4-allgather --enable-tokenizer-batch-encode --disable-outlines-disk-cache
    --disable-custom-all-reduce --enable-mscclpp --enable-torch-symm-mem --disable-overlap-schedule
    --enable-mixed-chunk --enable-dp-attention --enable-dp-lm-head --enable-two-batch-overlap
    --enable-single-batch-overlap --tbo-token-distribution-threshold --enable-torch-compile
    --enable-piecewise-cuda-graph --torch-compile-max-bs --piecewise-cuda-graph-max-tokens
    --piecewise-cuda-graph-tokens --piecewise-cuda-graph-compiler --torchao-config --enable-nan-detection
    --enable-p2p-check --triton-attention-reduce-in-fp32 --triton-attention-num-kv-splits
    --triton-attention-split-tile-size --num-continuous-decode-steps --delete-ckpt-after-loading
    --enable-memory-saver --enable-weights-cpu-backup --allow-auto-truncate --enable-custom-logit-processor
    --flashinfer-mla-disable-ragged --disable-shared-experts-fusion --disable-chunked-prefix-cache
    --disable-fast-image-processor --keep-mm-feature-on-device --enable-return-hidden-states
    --scheduler-recv-interval --numa-node --enable-deterministic-inference --rl-on-policy-target
    --enable-dynamic-batch-tokenizer --dynamic-batch-tokenizer-batch-size --dynamic-batch-tokenizer-batch-timeout
    --debug-tensor-dump-output-folder --debug-tensor-dump-input-file --debug-tensor-dump-inject
    --disaggregation-mode --disaggregation-transfer-backend --disaggregation-bootstrap-port
    --disaggregation-decode-tp --disaggregation-decode-dp --disaggregation-prefill-pp --disaggregation-ib-device
    --disaggregation-decode-enable-offload-kvcache --num-reserved-decode-tokens
    --disaggregation-decode-polling-interval --custom-weight-loader --weight-loader-disable-mmap
    --remote-instance-weight-loader-seed-instance-ip --remote-instance-weight-loader-seed-instance-service-port
    --remote-instance-weight-loader-send-weights-group-ports --enable-pdmux --sm-group-num --config
";

/// What a long option on a pasted line names.
#[derive(Debug)]
pub enum Resolved {
    /// A flag of `FLAGS`.
    Known(&'static FlagDef),
    /// Another SGLang option, by its first name, or an option SGLang does not have, as typed.
    Other(String),
}

/// One option: its spellings, the first the name argparse stores it under.
fn options() -> impl Iterator<Item = Vec<&'static str>> {
    let ours = FLAGS.iter().map(|def| std::iter::once(def.name).chain(def.aliases.iter().copied()).collect());
    SGLANG_OPTIONS.split_whitespace().map(|group| group.split('|').collect()).chain(ours)
}

/// The option `spellings` describe: the `FLAGS` entry any of them names, else the first.
fn named(spellings: &[&'static str]) -> Resolved {
    match spellings.iter().find_map(|s| find_flag(s)) {
        Some(def) => Resolved::Known(def),
        None => Resolved::Other(spellings[0].to_string()),
    }
}

impl PartialEq for Resolved {
    fn eq(&self, other: &Resolved) -> bool {
        match (self, other) {
            (Resolved::Known(a), Resolved::Known(b)) => a.name == b.name,
            (Resolved::Other(a), Resolved::Other(b)) => a == b,
            _ => false,
        }
    }
}

/// The option `flag` (the part before any `=`) names on a pasted SGLang line.
pub fn resolve(flag: &str) -> Result<Resolved, SpecError> {
    if let Some(exact) = options().find(|o| o.contains(&flag)) {
        return Ok(named(&exact));
    }
    let mut found: Vec<(Resolved, Vec<&'static str>)> = Vec::new();
    for option in options() {
        let matching: Vec<&'static str> = option.iter().copied().filter(|s| s.starts_with(flag)).collect();
        if matching.is_empty() {
            continue;
        }
        let resolved = named(&option);
        match found.iter_mut().find(|(r, _)| *r == resolved) {
            Some((_, spellings)) => {
                for s in matching {
                    if !spellings.contains(&s) {
                        spellings.push(s);
                    }
                }
            }
            None => found.push((resolved, matching)),
        }
    }
    match found.len() {
        0 => Ok(Resolved::Other(flag.to_string())),
        1 => Ok(found.pop().expect("one option").0),
        _ => Err(SpecError::Ambiguous {
            flag: flag.to_string(),
            candidates: found.into_iter().flat_map(|(_, spellings)| spellings).map(String::from).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(flag: &str) -> &'static str {
        match resolve(flag).unwrap() {
            Resolved::Known(def) => def.name,
            other => panic!("{flag}: {other:?}"),
        }
    }

    #[test]
    fn exact_names_aliases_and_unambiguous_prefixes_name_their_flag() {
        assert_eq!(known("--speculative-algo"), "--speculative-algorithm");
        assert_eq!(known("--tp"), "--tp-size");
        assert_eq!(known("--tensor-parallel"), "--tp-size");
        assert_eq!(known("--dp"), "--dp-size");
        assert_eq!(known("--ep"), "--ep-size");
        assert_eq!(known("--speculative-draft-model"), "--speculative-draft-model-path");
        assert_eq!(known("--page"), "--page-size");
        assert_eq!(resolve("--trust-remote").unwrap(), Resolved::Other("--trust-remote-code".into()));
        assert_eq!(resolve("--no-such-option").unwrap(), Resolved::Other("--no-such-option".into()));
    }

    #[test]
    fn a_prefix_of_several_options_is_ambiguous_and_names_them() {
        let err = resolve("--speculative-draft").unwrap_err();
        assert_eq!(
            err.to_string(),
            "--speculative-draft: ambiguous option: could match --speculative-draft-model-path, --speculative-draft-model, \
             --speculative-draft-model-revision, --speculative-draft-load-format, --speculative-draft-attention-backend, \
             --speculative-draft-model-quantization (SGLang accepts a prefix of one option only)"
        );
        assert!(matches!(resolve("--speculative-num"), Err(SpecError::Ambiguous { .. })));
    }
}
