//! SGLang logs: the rule table (phase markers and failure messages of the three
//! wordings: classic ≤0.5.2, mid 0.5.9, new 0.5.23), and the traceback frames that place a
//! failure in a phase. Texts are those of docs/research/failure_catalogue.md §1.

use crate::finding::Severity::{Error, Info, Warning};
use crate::phase::PhaseId::*;
use crate::preflight::paging;

use super::remedies as fix;
use super::rules::Action::*;
use super::rules::Edge::{Begin, End};
use super::rules::{failure, rule, Engine, Failure, FramePhase, Rule, C, M, N};

const S: Engine = Engine::Sglang;

/// The draft-context finding, as `check` names it.
pub const CONTEXT_DRAFT_ID: &str = crate::engine::context::ID;

static CTX_DRAFT_ERROR: Failure = failure(
    CONTEXT_DRAFT_ID,
    Error,
    Some(DrafterInit),
    "The target's context length ($target) is greater than the drafter's derived context length ($draft). \
     SGLang's draft worker refuses it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (off by default since 0.5.1).",
    fix::clamp_or_allow_draft,
);
static CTX_DRAFT_WARNING: Failure = failure(
    CONTEXT_DRAFT_ID,
    Warning,
    Some(DrafterInit),
    "The target's context length ($target) is greater than the drafter's derived context length ($draft); \
     SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is on, so SGLang only warns. Acceptance drops past $draft tokens, and \
     SGLang ≤0.5.2 keeps the drafter's short rotary cache (index errors on long prompts).",
    fix::clamp_draft,
);
static CTX_TARGET_ERROR: Failure = failure(
    "context-length-exceeds-target",
    Error,
    Some(Preflight),
    "--context-length ($target) is greater than the target's derived context length ($derived).",
    fix::clamp_or_allow_target,
);
static CTX_TARGET_WARNING: Failure = failure(
    "context-length-exceeds-target",
    Warning,
    Some(Preflight),
    "--context-length ($target) is greater than the target's derived context length ($derived); the override is \
     on, so SGLang only warns (incorrect outputs or CUDA errors are possible).",
    fix::clamp_or_allow_target,
);
static NO_CAPTURE_HOOK: Failure = failure(
    "target-no-capture-support",
    Error,
    Some(TargetGraphCapture),
    "The target class $cls has no set_eagle3_layers_to_capture, so SGLang cannot capture the hidden states EAGLE-3 \
     needs. Classes with it: 0.4.10 llama, qwen3, qwen3_moe, mllama4; 0.5.2 adds qwen2, qwen2_moe, qwen2_5_vl, \
     gpt_oss; 0.5.9 adds glm4_moe, bailing_moe, longcat_flash, minimax_m2, deepseek_v2, qwen3_next, exaone_moe, \
     apertus; 0.5.23 has 29 (kimi_k25, qwen3_5, gemma3/4 …). Upgrade SGLang to one whose target class has it; no \
     flag or env var bypasses this.",
    fix::none,
);
static NO_EMBED_HOOK: Failure = failure(
    "target-no-capture-support",
    Error,
    Some(DrafterInit),
    "The target class $cls has no get_embed_and_head, which SGLang's draft worker calls to share the target's \
     embedding and lm_head with every EAGLE / EAGLE3 / NEXTN draft. This SGLang build lacks speculative support for \
     that target: upgrade to a version whose $cls implements it.",
    fix::none,
);
static DRAFT_NOT_EAGLE: Failure = failure(
    "draft-architecture",
    Error,
    Some(DrafterInit),
    "The draft was built as $cls, which has no $attr: it is an ordinary model class, not an EAGLE draft (e.g. \
     --speculative-draft-model-path missing, so the target checkpoint was reused, or the draft config's \
     architectures names the target's class). Pass --speculative-draft-model-path with an EAGLE-3 draft whose \
     architectures is [\"LlamaForCausalLMEagle3\"].",
    fix::draft_arch_if_eagle3,
);
static DRAFT_NO_EMBED: Failure = failure(
    "draft-architecture",
    Error,
    Some(DrafterInit),
    "The draft class $cls has no single input embedding, so SGLang cannot share the target's embedding with it.",
    fix::none,
);
static DRAFT_AS_TARGET_ARCH: Failure = failure(
    "draft-architecture",
    Error,
    Some(DrafterLoad),
    "The draft checkpoint has EAGLE-3 weights ('$key') but its config names the target's class, so the target's \
     loader rejects them. Set the draft's architectures to [\"LlamaForCausalLMEagle3\"] and model_type to \"llama\".",
    fix::draft_arch_eagle3,
);
static DRAFT_LAYERS: Failure = failure(
    "draft-layers",
    Error,
    Some(DrafterLoad),
    "The EAGLE-3 draft has num_hidden_layers ≠ 1; SGLang 0.4.10–0.5.9 builds exactly one draft layer. Export the \
     draft with num_hidden_layers 1, or use SGLang 0.5.23, which builds N-layer drafts.",
    fix::none,
);
static UNKNOWN_ALGORITHM: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "--speculative-algorithm $name is not a known algorithm. Builtins: EAGLE, EAGLE3, NEXTN (= EAGLE), STANDALONE, \
     NGRAM (0.5.23 adds DFLASH, DSPARK, UNO).",
    fix::none,
);
static GEMMA_ASSISTANT: Failure = failure(
    "algorithm-mismatch",
    Error,
    Some(Preflight),
    "The $cls draft runs under --speculative-algorithm NEXTN or EAGLE, not EAGLE3.",
    fix::algorithm_eagle,
);
static TOPK_PAGE: Failure = failure("speculative-args", Error, Some(Preflight), paging::TOPK_PAGE, fix::page_size_or_topk);
static TOPK_TRTLLM: Failure = failure("speculative-args", Error, Some(Preflight), paging::TOPK_TRTLLM, fix::eagle_topk_one);
static TOPK_SPEC_V2: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "SGLANG_ENABLE_SPEC_V2 (the overlap speculative path) supports --speculative-eagle-topk 1 only.",
    fix::spec_v2_topk,
);
static DRAFT_TOKENS: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "$what needs --speculative-num-draft-tokens = --speculative-num-steps + 1; got $draft draft tokens with $steps steps.",
    fix::draft_tokens_steps_plus_one,
);
static AUTO_SPEC_PARAMS: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "--speculative-eagle-topk or --speculative-num-draft-tokens was set without --speculative-num-steps. Set all \
     three together, or none (SGLang then picks them per model).",
    fix::none,
);
static REJECTION_TOPK: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "Rejection sampling (chain speculative sampling) supports --speculative-eagle-topk 1 only.",
    fix::eagle_topk_one,
);
static REJECTION_ARGS: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "--speculative-use-rejection-sampling works only with EAGLE / EAGLE3 / NEXTN and without \
     --speculative-accept-threshold-single / --speculative-accept-threshold-acc.",
    fix::none,
);
static PIPELINE_SPEC: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "Pipeline parallelism does not combine with speculative decoding in this SGLang (0.5.23 gates it behind \
     SGLANG_ENABLE_PP_SPEC).",
    fix::pipeline_off,
);
static STANDALONE_DP: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "STANDALONE speculative decoding does not support DP attention; drop --enable-dp-attention (--attn-dp-size in \
     0.5.23) or use EAGLE/EAGLE3.",
    fix::none,
);
static ADAPTIVE_STEPS: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "--speculative-num-steps $steps is not one of the adaptive config's candidate_steps $candidates.",
    fix::none,
);
static FLEX_ATTENTION: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "Speculative decoding does not run on the Flex Attention backend; pick another --attention-backend.",
    fix::none,
);
static CHUNK_PAGE: Failure = failure("speculative-args", Error, Some(Preflight), paging::CHUNK_PAGE, fix::none);
static MIXED_CHUNK: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "Speculative decoding turns mixed chunked prefill off; --enable-mixed-chunk conflicts with it.",
    fix::mixed_chunk_off,
);
static VOCAB_REJECTION: Failure = failure(
    "vocab-mismatch",
    Error,
    Some(DrafterInit),
    "Rejection sampling needs one vocab: the draft's is $draft, the target's $target.",
    fix::none,
);
static VOCAB_STANDALONE: Failure = failure(
    "vocab-mismatch",
    Error,
    Some(DrafterInit),
    "STANDALONE speculative decoding needs the draft to share the target's vocabulary and tokenizer; use a draft \
     with the target's tokenizer, or an algorithm that maps vocabularies (EAGLE-3's d2t).",
    fix::none,
);
static DRAFT_BACKEND: Failure = failure(
    "draft-attention-backend",
    Error,
    Some(DrafterInit),
    "The draft worker has no EAGLE path for the attention backend $backend.",
    fix::draft_backend_flashinfer,
);
static DRAFT_BACKEND_MLA: Failure = failure(
    "draft-attention-backend",
    Error,
    Some(DrafterInit),
    "The $backend backend needs an MLA model, but the draft is not MLA (e.g. a Llama EAGLE-3 draft on a Kimi/DeepSeek \
     MLA target, where Blackwell GPUs pick trtllm_mla).",
    fix::draft_backend_mha,
);
static TP_DIVISIBLE: Failure =
    failure("tp-divisibility", Error, None, "$n does not split evenly over $tp tensor-parallel ranks.", fix::tp_divisor);
static TP_CONSTRAINT: Failure = failure("tp-divisibility", Error, Some(Preflight), "--tp-size must be divisible by $what.", fix::none);
static TP_EP: Failure =
    failure("tp-divisibility", Error, Some(Preflight), "--tp-size $tp does not divide by the expert-parallel size $ep.", fix::none);
static TP_MOE: Failure = failure(
    "tp-divisibility",
    Error,
    Some(TargetLoad),
    "The MoE intermediate size $n does not split over the MoE TP size $moe_tp.",
    fix::none,
);
static TP_HEADS_ASSERT: Failure = failure(
    "tp-divisibility",
    Error,
    None,
    "Attention heads (or KV heads) do not split evenly over --tp-size (a bare assert in the attention layer). The \
     EAGLE-3 draft's layer has the same check, so a draft with fewer heads fails even when the target is fine.",
    fix::none,
);
static MEMORY_UNBALANCED: Failure = failure(
    "gpu-memory-unbalanced",
    Error,
    Some(TargetLoad),
    "Free GPU memory differs across TP ranks by more than 10%: another process probably holds some of the GPUs.",
    fix::memory_balance_check_off,
);
static KV_TOO_SMALL: Failure = failure(
    "memory-budget",
    Error,
    Some(KvAlloc),
    "After the weights, the static memory fraction leaves no room for the KV cache (EAGLE's draft shares the token \
     pool and needs extra slots).",
    fix::raise_mem_fraction,
);
static KV_NO_ROOM: Failure = failure(
    "memory-budget",
    Error,
    Some(KvAlloc),
    "The loaded weights (draft weights included since 0.5.23) leave no KV cache under --mem-fraction-static $cur; \
     SGLang asks for more than $suggest.",
    fix::raise_mem_fraction,
);
static MAX_TOTAL_TOKENS: Failure = failure(
    "memory-budget",
    Warning,
    Some(KvAlloc),
    "--max-total-tokens $want does not fit; SGLang uses the profiled $got tokens instead.",
    fix::none,
);
static GRAPH_OOM: Failure = failure(
    "out-of-memory",
    Error,
    None,
    "CUDA graph capture ran out of memory: graphs live outside the static pool, and draft graphs grow with batch × \
     topk × steps ($err).",
    fix::graph_memory,
);
static GRAPH_CAPTURE: Failure = failure(
    super::diagnose::GRAPH_CAPTURE_FAILED,
    Error,
    None,
    "CUDA graph capture raised ($err). Capturing fewer batch sizes or none (eager decode, slower) starts the server \
     while the cause is looked into; SGLang itself also suggests a smaller --mem-fraction-static and no \
     --enable-torch-compile.",
    fix::graph_capture_flags,
);
static SCHEDULER_KILLED: Failure = failure(
    "scheduler-killed",
    Error,
    None,
    "A scheduler process was killed with SIGKILL (exit code -9), commonly by the host's OOM killer (host RAM, not \
     GPU memory). Check with `dmesg -T | grep -i oom`.",
    fix::none,
);
static FP16_FORCED: Failure = failure(
    "dtype-mismatch",
    Warning,
    Some(TargetLoad),
    "The GPU is below sm80, so SGLang runs target and draft in float16; a bf16-trained draft may lose acceptance.",
    fix::none,
);
static GPU_TOO_OLD: Failure =
    failure("gpu-unsupported", Error, Some(TargetLoad), "SGLang needs compute capability sm75 or newer.", fix::none);
static NAN_LOGITS: Failure = failure(
    "nan-logits",
    Error,
    None,
    "Sampling met NaN logits (--enable-nan-detection). In EAGLE reports this came with a float16 run of a \
     bf16-trained model or draft; compare --dtype with both configs' torch_dtype.",
    fix::none,
);
static QUANT_MISMATCH: Failure = failure(
    "quantization-mismatch",
    Error,
    None,
    "The checkpoint's quantization ($cfg) differs from the quantization argument ($arg). The draft inherits the \
     target's method unless --speculative-draft-model-quantization names one (unquant = none).",
    fix::draft_quantization,
);
static QUANT_DIFFERS: Failure = failure(
    "quantization-mismatch",
    Info,
    Some(DrafterLoad),
    "The draft's quantization ($draft) differs from the target's ($target); SGLang uses the draft's own.",
    fix::none,
);
static QUANT_MODELOPT: Failure = failure(
    "quantization-mismatch",
    Error,
    None,
    "The ModelOpt quant_config has no quant_algo for $archs; only LlamaForCausalLMEagle3 drafts are exempt.",
    fix::none,
);
static REQUEST_TOO_LONG: Failure = failure(
    "request-too-long",
    Warning,
    Some(Serving),
    "A request of $n tokens exceeds the served context length ($ctx); --allow-auto-truncate truncates instead of \
     rejecting.",
    fix::none,
);
static AUX_RANGE: Failure = failure(
    "aux-layer-out-of-range",
    Error,
    Some(Preflight),
    "Aux hidden-state layer ids $ids are outside the target's $layers layers.",
    fix::none,
);
static HIDDEN_SIZES: Failure = failure(
    "hidden-size-mismatch",
    Warning,
    Some(DrafterInit),
    "The draft's hidden size ($draft) differs from the target's ($target).",
    fix::none,
);

pub static RULES: &[Rule] = &[
    // Arguments and their resolution.
    rule(S, "server_args=", "^server_args=", ArgsDump, 0),
    rule(S, "Overlap scheduler is disabled because of using eagle speculative decoding.", "", Phase(Preflight, Begin), C),
    rule(S, "Mixed chunked prefill is disabled because of using eagle speculative decoding.", "", Phase(Preflight, Begin), C),
    rule(S, "DeepSeek MTP does not require setting speculative_draft_model_path.", "", Phase(Preflight, Begin), C),
    rule(S, "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1", "", Phase(Preflight, Begin), C | N),
    rule(S, "Max running requests is reset to 48 for speculative decoding.", "", Phase(Preflight, Begin), M | N),
    rule(S, "Spec v2 is enabled for eagle/eagle3 speculative decoding", "", Phase(Preflight, Begin), M),
    rule(S, "Overlap scheduler is disabled when spec v2 is off", "", Phase(Preflight, Begin), M),
    rule(S, "Non-overlap (synchronous) spec v2 is used for", "", Phase(Preflight, Begin), N),
    rule(S, "Mixed chunked prefill is disabled: ", "", Phase(Preflight, Begin), N),
    // Process and weights.
    rule(S, "Init torch distributed begin.", "", Phase(TargetLoad, Begin), C | M),
    rule(S, "Init torch distributed ends. mem usage=", "", Mark, C),
    rule(S, "Init torch distributed ends. elapsed=", "", Mark, M),
    rule(S, "Init parallel begin.", "", Phase(TargetLoad, Begin), N),
    rule(S, "Init parallel ends. elapsed=", "", Mark, N),
    rule(S, "Memory baseline taken. mem usage=", "", Mark, N),
    rule(S, "Load weight begin. avail mem=", "", WeightLoad(Begin), C | M | N),
    rule(S, "Load weight end. Committed real weights", "", Mark, N),
    rule(S, "Load weight end. ", r"^Load weight end\. type=(?P<cls>\w+), dtype=", WeightLoad(End), C),
    rule(S, "Load weight end. ", r"^Load weight end\. elapsed=[\d.]+ s, type=(?P<cls>\w+), dtype=", WeightLoad(End), M),
    rule(S, "Load weight end. ", r"^Load weight end\. elapsed=[\d.]+ s, type=(?P<cls>\w+), ", WeightLoad(End), N),
    rule(
        S,
        " could finish the model loading, but there are other ranks that didn't finish loading.",
        "",
        Crash("a TP rank finished loading while others did not: another rank failed (often out of memory) or is slow; read the other ranks' errors"),
        C | M,
    ),
    // KV cache.
    rule(S, "Using KV cache dtype: ", "", Phase(KvAlloc, Begin), M),
    rule(S, "KV Cache is allocated. #tokens: ", "", Phase(KvAlloc, Begin), C | M),
    rule(S, "KV Cache is allocated. dtype: ", "", Phase(KvAlloc, Begin), N),
    rule(S, "KV Cache VA upper bound. dtype: ", "", Phase(KvAlloc, Begin), N),
    rule(S, "Memory pool end. avail mem=", "", Phase(KvAlloc, End), C | M | N),
    rule(S, "Post-capture KV sizing: KV cache allocated.", "", Mark, N),
    // Target graphs.
    rule(S, "Capture cuda graph begin. This can take up to several minutes.", "", Phase(TargetGraphCapture, Begin), C | M),
    rule(S, "Capture cpu graph begin. This can take up to several minutes.", "", Phase(TargetGraphCapture, Begin), C | M),
    rule(S, "Capture target ", r"^Capture target \w+ CUDA graph begin\.", Phase(TargetGraphCapture, Begin), N),
    rule(S, "Capture target ", r"^Capture target \w+ CUDA graph end\.", Phase(TargetGraphCapture, End), N),
    rule(S, "Capture piecewise CUDA graph begin.", "", Phase(TargetGraphCapture, Begin), M),
    rule(S, "Capture piecewise CUDA graph end.", "", Phase(TargetGraphCapture, End), M),
    rule(S, "Capture cuda graph bs [", r"^Capture cuda graph bs \[(?P<list>[^\]]*)\]", CaptureBatchList, C | M),
    rule(S, "Capture cuda graph end. Time elapsed: ", "", Phase(TargetGraphCapture, End), C | M),
    // Draft.
    rule(S, "Speculative token map specified, but EAGLE3 models already have this.", "", Phase(DrafterInit, Begin), C | N),
    rule(S, "Overriding draft attention backend to ", "", Phase(DrafterInit, Begin), M),
    rule(S, "Overriding the draft model's max_position_embeddings to ", "", Phase(DrafterInit, Begin), M | N),
    rule(S, "Capture draft ", r"^Capture draft (?:extend )?cuda graph begin\.", Phase(DraftGraphCapture, Begin), C | M),
    rule(S, "Capture draft ", r"^Capture draft (?:extend )?cuda graph end\.", Phase(DraftGraphCapture, End), C | M),
    rule(S, "Capture draft ", r"^Capture draft (?:decode|extend) CUDA graph begin\.", Phase(DraftGraphCapture, Begin), N),
    rule(S, "Capture draft ", r"^Capture draft (?:decode|extend) CUDA graph end\.", Phase(DraftGraphCapture, End), N),
    rule(
        S,
        "Capturing batches (",
        r"Capturing batches \(bs=(?P<bs>\d+) avail_mem=[\d.]+ GB\):\s*\d+%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)",
        CaptureBar,
        C | M | N,
    ),
    // Serving.
    rule(S, "max_total_num_tokens=", r"^max_total_num_tokens=\d+", Phase(Warmup, Begin), C | M | N),
    rule(S, "Application startup complete.", "", Phase(Warmup, Begin), 0),
    rule(S, "Uvicorn running on ", "", Phase(Warmup, Begin), 0),
    rule(S, "Prefill batch. ", "", Traffic, 0),
    rule(S, "Prefill batch, ", "", Traffic, 0),
    rule(S, " HTTP/1.1\" ", "", Traffic, 0),
    rule(S, "The server is fired up and ready to roll!", "", ServerReady, C | M | N),
    rule(S, "Decode batch. ", "", DecodeStats, 0),
    rule(S, "Decode batch, ", "", DecodeStats, 0),
    // Crashes whose cause is told elsewhere.
    rule(S, "Scheduler hit an exception: ", "", Crash("a scheduler raised an exception"), C | M | N),
    rule(S, "Received sigquit from a child process. It usually means the child failed.", "", Crash("a child process failed"), C | N),
    rule(S, "Exit code: -9", "^Exit code: -9$", Fail(&SCHEDULER_KILLED), C),
    rule(S, " scheduler is dead. Please check if there are relevant logs.", "", Crash("a scheduler process died"), C),
    rule(S, " scheduler died during initialization (exit code: ", r"\(exit code: -9\)", Fail(&SCHEDULER_KILLED), N),
    rule(S, " scheduler died during initialization (exit code: ", "", Crash("a scheduler process died"), N),
    rule(S, "Initialization failed. warmup error: ", "", Crash("the warm-up request failed"), C | N),
    rule(S, "Initialization failed. Please see the error messages above.", "", Crash("initialization failed"), C | N),
    rule(S, "Scheduler or DataParallelController ", r"terminated with -?\d+", Crash("a scheduler process died"), 0),
    rule(S, " hit an exception: ", r"^(?:DataParallelController|DetokenizerManager|TokenizerManager) hit", Crash("a server process raised"), 0),
    // Context length (§1.4-A).
    rule(
        S,
        "Target model's context_length (",
        r"Target model's context_length \((?P<target>\d+)\) is greater than the derived context_length \((?P<draft>\d+)\)\..*To allow overriding this maximum",
        Fail(&CTX_DRAFT_ERROR),
        0,
    ),
    rule(
        S,
        "Target model's context_length (",
        r"Target model's context_length \((?P<target>\d+)\) is greater than the derived context_length \((?P<draft>\d+)\)",
        Fail(&CTX_DRAFT_WARNING),
        0,
    ),
    rule(
        S,
        "User-specified context_length (",
        r"User-specified context_length \((?P<target>\d+)\) is greater than the derived context_length \((?P<derived>\d+)\)\..*To allow overriding this maximum",
        Fail(&CTX_TARGET_ERROR),
        0,
    ),
    rule(
        S,
        "User-specified context_length (",
        r"User-specified context_length \((?P<target>\d+)\) is greater than the derived context_length \((?P<derived>\d+)\)",
        Fail(&CTX_TARGET_WARNING),
        0,
    ),
    // Target and draft classes (§1.4-B, C, D).
    rule(S, " does not implement set_eagle3_layers_to_capture", r"Model (?P<cls>\w+) does not implement set_eagle3_layers_to_capture", Fail(&NO_CAPTURE_HOOK), N),
    rule(S, " object has no attribute 'set_eagle3_layers_to_capture'", r"'(?P<cls>\w+)' object has no attribute", Fail(&NO_CAPTURE_HOOK), C | M),
    rule(S, " object has no attribute 'get_embed_and_head'", r"'(?P<cls>\w+)' object has no attribute", Fail(&NO_EMBED_HOOK), 0),
    rule(
        S,
        " object has no attribute '",
        r"'(?P<cls>\w+)' object has no attribute '(?P<attr>set_embed_and_head|set_embed|hot_token_id|set_lm_head_from_target)'",
        Fail(&DRAFT_NOT_EAGLE),
        0,
    ),
    rule(S, " has no single input embedding for target embedding sharing.", r"Draft model (?P<cls>\w+) has no single", Fail(&DRAFT_NO_EMBED), N),
    rule(S, "KeyError: 'midlayer.", r"KeyError: '(?P<key>midlayer\.[^']*)'", Fail(&DRAFT_AS_TARGET_ARCH), 0),
    rule(S, "EAGLE3 currently only supports 1 layer", "", Fail(&DRAFT_LAYERS), C | M),
    rule(S, "Unknown speculative algorithm name: ", r"Unknown speculative algorithm name: (?P<name>\S+)", Fail(&UNKNOWN_ALGORITHM), 0),
    rule(S, " draft requires --speculative-algorithm NEXTN or EAGLE; EAGLE3 is not supported", r"(?P<cls>\w+) draft requires", Fail(&GEMMA_ASSISTANT), N),
    // Speculative arguments (§1.4-H).
    rule(S, "speculative_eagle_topk > 1 with page_size > 1 is unstable", "", Fail(&TOPK_PAGE), C | M),
    rule(S, "speculative_eagle_topk > 1 with page_size > 1 is only supported on ", "", Fail(&TOPK_PAGE), N),
    rule(S, "trtllm_mha backend only supports topk = 1 for speculative decoding.", "", Fail(&TOPK_TRTLLM), 0),
    rule(S, "Spec v2 currently only supports topk = 1 for speculative decoding.", "", Fail(&TOPK_SPEC_V2), M),
    rule(
        S,
        " requires speculative_num_draft_tokens == speculative_num_steps + 1, got ",
        r"(?P<what>topk=1|multi-layer EAGLE) requires speculative_num_draft_tokens == speculative_num_steps \+ 1, got (?P<draft>\d+) and (?P<steps>\d+)",
        Fail(&DRAFT_TOKENS),
        N,
    ),
    rule(S, "assert self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None", "", Hint(&AUTO_SPEC_PARAMS), 0),
    rule(
        S,
        "--speculative-use-rejection-sampling requires the draft and target to share one vocab",
        r"draft vocab \((?P<draft>\d+)\) != target vocab \((?P<target>\d+)\)",
        Fail(&VOCAB_REJECTION),
        N,
    ),
    rule(S, "--speculative-use-rejection-sampling requires --speculative-eagle-topk=1.", "", Fail(&REJECTION_TOPK), N),
    rule(S, "Chain speculative sampling supports only topk=1", "", Fail(&REJECTION_TOPK), N),
    rule(S, "--speculative-use-rejection-sampling is only supported for EAGLE / EAGLE3 / NEXTN", "", Fail(&REJECTION_ARGS), N),
    rule(S, "--speculative-use-rejection-sampling is incompatible with --speculative-accept-threshold", "", Fail(&REJECTION_ARGS), N),
    rule(S, "Pipeline parallelism is not compatible with overlap schedule, speculative decoding", "", Fail(&PIPELINE_SPEC), C | M),
    rule(S, "PP is not compatible with MTP models.", "", Fail(&PIPELINE_SPEC), C),
    rule(S, "Currently standalone speculative decoding does not support dp attention.", "", Fail(&STANDALONE_DP), 0),
    rule(
        S,
        " is not in the adaptive config candidate_steps ",
        r"--speculative-num-steps=(?P<steps>\d+) is not in the adaptive config candidate_steps (?P<candidates>\[[^\]]*\])",
        Fail(&ADAPTIVE_STEPS),
        N,
    ),
    rule(S, "Speculative decoding is currently not supported with Flex Attention backend", "", Fail(&FLEX_ATTENTION), M),
    rule(S, "chunked_prefill_size must be divisible by page_size", "", Fail(&CHUNK_PAGE), 0),
    rule(S, "enable_mixed_chunk is required for speculative decoding", "", Fail(&MIXED_CHUNK), C),
    rule(S, "STANDALONE speculative decoding requires the draft model to share the same", "", Fail(&VOCAB_STANDALONE), N),
    // Draft attention backends (§1.4-I).
    rule(S, "EAGLE is not supported in ", r"EAGLE is not supported in (?:decode )?attention backend (?P<backend>\S+)", Fail(&DRAFT_BACKEND), 0),
    rule(S, " backend requires MLA model (use_mla_backend=True).", r"(?P<backend>\w+) backend requires MLA model", Fail(&DRAFT_BACKEND_MLA), 0),
    rule(S, " backend can only be used with MLA models.", r"(?P<backend>\w+) backend can only be used", Fail(&DRAFT_BACKEND_MLA), 0),
    rule(S, " draft worker only supports attention_backend in ", "", Phase(DrafterInit, Begin), N),
    // Tensor parallelism (§1.4-J).
    rule(S, " is not divisible by ", r"(?:^|: )(?P<n>\d+) is not divisible by (?P<tp>\d+)$", Fail(&TP_DIVISIBLE), 0),
    rule(S, "tp_size must be divisible by ", r"tp_size must be divisible by (?P<what>[\w *]+)", Fail(&TP_CONSTRAINT), 0),
    rule(S, " must be divisible by ep_size ", r"tp_size (?P<tp>\d+) must be divisible by ep_size (?P<ep>\d+)", Fail(&TP_EP), M),
    rule(
        S,
        " must be divisible by moe_tp_size (",
        r"moe_intermediate_size (?P<n>\d+) must be divisible by moe_tp_size \((?P<moe_tp>\d+)\)",
        Fail(&TP_MOE),
        M,
    ),
    rule(S, "assert self.total_num_heads % tp_size == 0", "", Hint(&TP_HEADS_ASSERT), 0),
    rule(S, "assert self.total_num_kv_heads % tp_size == 0", "", Hint(&TP_HEADS_ASSERT), 0),
    rule(S, "assert tp_size % self.total_num_kv_heads == 0", "", Hint(&TP_HEADS_ASSERT), 0),
    rule(S, "The memory capacity is unbalanced. Some GPUs may be occupied by other processes.", "", Fail(&MEMORY_UNBALANCED), 0),
    // Memory (§1.4-K).
    rule(
        S,
        "Not enough memory. Please try to increase --mem-fraction-static.",
        r"increase --mem-fraction-static\.(?:\s*Current value: (?:self\.server_args\.)?mem_fraction_static=(?P<cur>[\d.]+))?",
        Fail(&KV_TOO_SMALL),
        C | M | N,
    ),
    rule(
        S,
        "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=",
        r"--mem-fraction-static=(?P<cur>[\d.]+)\. Raise --mem-fraction-static above (?P<suggest>[\d.]+)",
        Fail(&KV_NO_ROOM),
        N,
    ),
    rule(S, " is larger than the profiled value ", r"max_total_tokens=(?P<want>\d+) is larger than the profiled value (?P<got>\d+)", Fail(&MAX_TOTAL_TOKENS), 0),
    rule(S, "Capture cuda graph failed: ", r"Capture cuda graph failed: (?P<err>.*(?:out of memory|OutOfMemory).*)", Fail(&GRAPH_OOM), 0),
    rule(S, "Capture cuda graph failed: ", r"Capture cuda graph failed: (?P<err>.*)", Fail(&GRAPH_CAPTURE), 0),
    // dtype, quantization, runtime (§1.4-L, M, N, F).
    rule(S, "Compute capability below sm80. Use float16 due to lack of bfloat16 support.", "", Fail(&FP16_FORCED), C | M),
    rule(S, "SGLang only supports sm75 and above.", "", Fail(&GPU_TOO_OLD), C | M),
    rule(S, "Detected errors during sampling! NaN in the logits.", "", Fail(&NAN_LOGITS), C),
    rule(
        S,
        "Quantization method specified in the model config (",
        r"model config \((?P<cfg>[^)]+)\) does not match the quantization method specified in the .quantization. argument \((?P<arg>[^)]+)\)",
        Fail(&QUANT_MISMATCH),
        N,
    ),
    rule(
        S,
        "Draft model quantization (",
        r"Draft model quantization \((?P<draft>[^)]+)\) differs from main model quantization \((?P<target>[^)]+)\)",
        Fail(&QUANT_DIFFERS),
        N,
    ),
    rule(S, "Invalid quant_config, quantization method: ", r"hf architectures: (?P<archs>[^.]*)", Fail(&QUANT_MODELOPT), N),
    rule(
        S,
        " tokens) is longer than the model's context length (",
        r"The input \((?P<n>\d+) tokens\) is longer than the model's context length \((?P<ctx>\d+) tokens\)",
        Fail(&REQUEST_TOO_LONG),
        N,
    ),
    rule(
        S,
        " tokens) exceeds the maximum allowed length (",
        r"Input length \((?P<n>\d+) tokens\) exceeds the maximum allowed length \((?P<ctx>\d+) tokens\)",
        Fail(&REQUEST_TOO_LONG),
        0,
    ),
    rule(
        S,
        "--return-aux-hidden-state-layer-ids ",
        r"--return-aux-hidden-state-layer-ids (?P<ids>.+?) out of range for a target with (?P<layers>\d+) layers",
        Fail(&AUX_RANGE),
        N,
    ),
    rule(
        S,
        "SGLANG_ENABLE_MTP_BOUNDARY_KV_FIX disabled: draft hidden size ",
        r"draft hidden size (?P<draft>\d+) != target hidden size (?P<target>\d+)",
        Fail(&HIDDEN_SIZES),
        N,
    ),
];

/// Traceback frames that place a failure, by file and function (deepest mapped frame wins).
/// A trailing `*` matches function names by their start.
pub static FRAMES: &[(&str, &str, FramePhase)] = &[
    ("/sglang/srt/speculative/", "init_cuda_graphs", FramePhase::Graph),
    ("/sglang/srt/speculative/", "_capture_cuda_graphs", FramePhase::Graph),
    ("/sglang/srt/speculative/eagle_draft_", "", FramePhase::Graph),
    ("/sglang/srt/speculative/", "__init__", FramePhase::Fixed(DrafterInit)),
    ("/sglang/srt/speculative/", "init_lm_head", FramePhase::Fixed(DrafterInit)),
    ("/sglang/srt/speculative/", "init_token_map", FramePhase::Fixed(DrafterInit)),
    ("/sglang/srt/speculative/", "alloc_memory_pool", FramePhase::Fixed(DrafterInit)),
    ("/sglang/srt/speculative/pp_draft_embedding.py", "", FramePhase::Fixed(DrafterInit)),
    ("/sglang/srt/speculative/draft_utils.py", "", FramePhase::Fixed(DrafterInit)),
    // The rest of the speculative package runs per batch: draft, verify, sample.
    ("/sglang/srt/speculative/", "", FramePhase::Runtime),
    ("/sglang/srt/managers/scheduler.py", "maybe_init_draft_worker", FramePhase::Fixed(DrafterInit)),
    ("/sglang/srt/models/llama_eagle3.py", "__init__", FramePhase::Fixed(DrafterLoad)),
    ("/sglang/srt/models/llama_eagle3.py", "load_weights", FramePhase::Fixed(DrafterLoad)),
    ("/sglang/srt/model_loader/", "", FramePhase::Load),
    ("/sglang/srt/models/registry.py", "", FramePhase::Load),
    ("/sglang/srt/models/", "load_weights", FramePhase::Load),
    ("/sglang/srt/model_executor/model_runner.py", "load_model", FramePhase::Load),
    ("/sglang/srt/model_executor/model_runner.py", "init_memory_pool", FramePhase::Fixed(KvAlloc)),
    ("/sglang/srt/model_executor/model_runner.py", "init_cuda_graphs", FramePhase::Graph),
    ("/sglang/srt/model_executor/model_runner.py", "init_device_graphs", FramePhase::Graph),
    ("/sglang/srt/model_executor/cuda_graph_runner.py", "", FramePhase::Graph),
    ("/sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py", "", FramePhase::Graph),
    ("/sglang/srt/model_executor/model_runner_components/attention_backend_setup.py", "", FramePhase::Fixed(TargetGraphCapture)),
    ("/sglang/srt/model_executor/model_runner_components/startup_weight_load.py", "", FramePhase::Load),
    ("/sglang/srt/mem_cache/", "", FramePhase::Fixed(KvAlloc)),
    ("/sglang/srt/model_executor/pool_configurator.py", "", FramePhase::Fixed(KvAlloc)),
    ("/sglang/srt/configs/model_config.py", "", FramePhase::Config),
    ("/sglang/srt/server_args.py", "", FramePhase::Fixed(Preflight)),
    ("/sglang/srt/arg_groups/", "", FramePhase::Fixed(Preflight)),
    ("/sglang/srt/entrypoints/http_server.py", "_execute_server_warmup", FramePhase::Fixed(Warmup)),
    ("/sglang/srt/managers/scheduler.py", "event_loop*", FramePhase::Runtime),
    ("/sglang/srt/managers/scheduler.py", "run_batch", FramePhase::Runtime),
    ("/sglang/srt/managers/scheduler.py", "get_next_batch_to_run", FramePhase::Runtime),
    ("/sglang/srt/layers/", "forward", FramePhase::Runtime),
];
