//! vLLM logs: the rule table (phase markers and the EAGLE/EAGLE-3 failure
//! messages of 0.10.x and 0.33, docs/research/failure_catalogue.md §2), and the traceback frames
//! that place a failure in a phase.

use crate::finding::Severity::{Error, Warning};
use crate::phase::PhaseId::*;

use super::remedies as fix;
use super::rules::Action::*;
use super::rules::Edge::{Begin, End};
use super::rules::{failure, rule, Engine, Failure, FramePhase, Rule, V010, V033};

const V: Engine = Engine::Vllm;

static EAGLE3_ALLOW_LIST: Failure = failure(
    "target-no-capture-support",
    Error,
    Some(Preflight),
    "This vLLM allows EAGLE-3 only for $which targets, and the target's model_type is '$model_type'. vLLM 0.10.0 \
     allowed Llama only, 0.10.2 llama and qwen; the allow-list is gone by 0.33: upgrade vLLM.",
    fix::none,
);
static NO_EAGLE3_INTERFACE: Failure = failure(
    "target-no-capture-support",
    Error,
    Some(DrafterInit),
    "The target class does not implement vLLM's SupportsEagle3, so it cannot hand aux hidden states to an EAGLE-3 \
     draft (e.g. Qwen3-MoE before vLLM PR #26485, Qwen3.5 before #36658). Upgrade to a vLLM whose target class lists \
     SupportsEagle3.",
    fix::none,
);
static EAGLE3_DRAFT_AS_EAGLE: Failure = failure(
    "algorithm-mismatch",
    Error,
    Some(Preflight),
    "'$arch' is an EAGLE-3 draft class renamed for method \"eagle\" (vLLM prefixes Eagle unless the class starts with \
     it): the draft is EAGLE-3 but the speculative config asks for EAGLE. Set \"method\": \"eagle3\".",
    fix::algorithm_eagle3,
);
static UNKNOWN_DRAFT_MODULE: Failure = failure(
    "draft-architecture",
    Error,
    Some(Preflight),
    "vLLM has no model class '$arch' for the draft. Registered EAGLE-3 classes include Eagle3LlamaForCausalLM, \
     LlamaForCausalLMEagle3, Eagle3Qwen3ForCausalLM and Eagle3DeepseekV2ForCausalLM.",
    fix::none,
);
static MAX_MODEL_LEN: Failure = failure(
    "context-length-exceeds-target",
    Error,
    Some(Preflight),
    "--max-model-len $target is greater than the target's derived max length ($key=$derived).",
    fix::vllm_max_model_len,
);
static SPEC_LEN_DRAFT: Failure = failure(
    "context-length-exceeds-draft",
    Error,
    Some(Preflight),
    "speculative_config.max_model_len ($spec) is greater than the draft's max length ($draft); set it to at most $draft.",
    fix::none,
);
static SPEC_LEN_TARGET: Failure = failure(
    "context-length-exceeds-target",
    Error,
    Some(Preflight),
    "speculative_config.max_model_len ($spec) is greater than the target's max length ($target).",
    fix::none,
);
static DRAFT_POSITIONS_OVERRIDDEN: Failure = failure(
    "context-length-exceeds-draft",
    Warning,
    Some(DrafterInit),
    "The draft was trained for $draft positions; vLLM extends it to the target's max_model_len ($target). Acceptance \
     drops past $draft tokens.",
    fix::clamp_draft,
);
static DRAFT_TP: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "The draft's tensor-parallel size must be 1 or the target's; set speculative_config \"draft_tensor_parallel_size\" \
     (not \"tensor_parallel_size\").",
    fix::none,
);
static NUM_SPEC_TOKENS: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "speculative_config needs both a draft \"model\" and \"num_speculative_tokens\" > 0 (a multiple of n_predict for MTP).",
    fix::none,
);
static SPEC_METHOD: Failure = failure(
    "speculative-args",
    Error,
    Some(Preflight),
    "speculative_config \"method\" is not one this vLLM supports (eagle, eagle3, mtp, draft_model, ngram, …).",
    fix::none,
);
static VOCAB_SIZES: Failure = failure(
    "vocab-mismatch",
    Error,
    Some(Preflight),
    "Target vocab_size $target and draft vocab_size $draft differ; a draft model must share the target's tokenizer.",
    fix::none,
);
static LOGITS_SHAPE: Failure = failure(
    "vocab-mismatch",
    Error,
    None,
    "The logits' last dimension is not the vocab size $vocab: the draft's lm_head (draft_vocab_size, d2t) does not \
     match the target vocabulary.",
    fix::none,
);
static NO_CACHE_BLOCKS: Failure = failure(
    "memory-budget",
    Error,
    Some(KvAlloc),
    "No memory is left for KV cache blocks after the weights and activations; raise --gpu-memory-utilization or \
     lower --max-model-len / --max-num-seqs.",
    fix::none,
);
static KV_FOR_ONE_REQUEST: Failure = failure(
    "memory-budget",
    Error,
    Some(KvAlloc),
    "One request of max_model_len $len tokens needs $need GiB of KV cache; $avail GiB are available.",
    fix::vllm_kv_memory,
);
static WEIGHTS_OOM: Failure = failure(
    "memory-budget",
    Error,
    Some(TargetLoad),
    "The weights do not fit: lower --gpu-memory-utilization to free memory for weights, raise \
     --tensor-parallel-size, or quantize.",
    fix::none,
);
static DRAFT_INHERITED_QUANT: Failure = failure(
    "quantization-mismatch",
    Error,
    Some(DrafterLoad),
    "The unquantized drafter inherited the quantized target's config, so the loader looks for '$key' under the \
     wrong names (vLLM PR #25883). Upgrade vLLM, or set speculative_config \"quantization\".",
    fix::none,
);
static HEADS_TP: Failure =
    failure("tp-divisibility", Error, Some(Preflight), "$n attention heads do not split over --tensor-parallel-size $tp.", fix::tp_divisor);
static SPEC_CONFIG_REJECTED: Failure =
    failure("speculative-args", Error, Some(Preflight), "vLLM's validation rejected the speculative config: $msg", fix::none);
static EAGLE1_BIAS: Failure = failure(
    "draft-architecture",
    Error,
    Some(DrafterLoad),
    "The EAGLE-1 checkpoint has an fc bias its config does not declare; add \"eagle_fc_bias\": true.",
    fix::draft_fc_bias,
);

pub static RULES: &[Rule] = &[
    // Version and arguments.
    rule(V, "vLLM API server version ", r"vLLM API server version (?P<version>\S+)", Version, V010),
    rule(V, "vLLM server version ", r"vLLM server version (?P<version>[^,\s]+)", Version, V033),
    rule(V, "Initializing a V1 LLM engine (v", r"Initializing a V1 LLM engine \(v(?P<version>[^)]+)\)", Version, 0),
    rule(V, "non-default args: ", "", ArgsDump, V033),
    rule(V, " is assigned as DP rank ", "", Mark, 0),
    // Loading.
    rule(V, "Starting to load model ", "", Phase(TargetLoad, Begin), V010 | V033),
    rule(V, "Loading drafter model...", "", Phase(DrafterLoad, Begin), V010 | V033),
    rule(V, "Loading weights took ", "", LoadDone, V010 | V033),
    rule(V, "Model loading took ", r"^Model loading took [\d.]+ GiB and", LoadDone, V010),
    rule(V, "Model loading took ", r"^Model loading took \S+ GiB memory and", LoadDone, V033),
    rule(V, "Assuming the EAGLE head shares the same vocab embedding with the target model.", "", Phase(DrafterInit, Begin), V010),
    rule(V, "The EAGLE head's vocab embedding will be loaded separately from the target model.", "", Phase(DrafterInit, Begin), V010),
    rule(V, "Detected EAGLE model ", "", Phase(DrafterInit, Begin), V033),
    rule(V, "differs from draft embedding dim (", "", Phase(DrafterInit, Begin), V033),
    rule(V, "Using auxiliary layers from speculative config: ", "", Phase(DrafterInit, Begin), V033),
    rule(V, "Overriding draft model max model len from ", "", Phase(DrafterInit, Begin), V033),
    // Compile, KV cache, graphs.
    rule(V, "torch.compile takes ", "", Phase(KernelCompile, End), 0),
    rule(V, "Available KV cache memory: ", "", Phase(KvAlloc, Begin), V010 | V033),
    rule(V, "GPU KV cache size: ", "", Phase(KvAlloc, End), V010),
    rule(V, " KV cache size: ", r"KV cache size: [\d,]+ tokens, Maximum concurrency", Phase(KvAlloc, End), V033),
    rule(
        V,
        "Capturing CUDA graphs (",
        r"Capturing CUDA graphs \((?P<desc>[^)]*)\):\s*\d+%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)",
        CaptureBar,
        0,
    ),
    rule(V, "Graph capturing finished in ", "", Phase(TargetGraphCapture, End), 0),
    // Serving.
    rule(V, "init engine (profile, create kv cache, warmup model) took ", "", Phase(Warmup, End), V010 | V033),
    rule(V, "Starting vLLM API server ", "", Mark, V010),
    rule(V, "Starting vLLM server on ", "", Mark, V033),
    rule(V, "Application startup complete.", "", ServerReady, 0),
    rule(V, "Available routes are:", "", ServerReady, 0),
    rule(V, "Route: /v1/", "", ServerReady, 0),
    rule(V, "SpecDecoding metrics: ", "Mean acceptance length: ", DecodeStats, 0),
    rule(V, " HTTP/1.1\" ", "", Traffic, 0),
    rule(V, "Avg prompt throughput: ", "", DecodeStats, 0),
    // V0's metrics, and the dump vLLM writes when a scheduled batch fails to execute.
    rule(V, "Speculative metrics: Draft acceptance rate: ", "", ServingLine, 0),
    rule(V, "Prefix cache hit rate: ", "", ServingLine, 0),
    rule(V, "Dumping scheduler output for model execution", "", ServingLine, 0),
    // Crashes whose cause is told elsewhere.
    rule(V, "EngineCore failed to start.", "", Crash("the engine core failed to start"), 0),
    rule(V, "WorkerProc failed to start.", "", Crash("a worker process failed to start"), 0),
    rule(V, "Engine core initialization failed. See root cause above.", "", Crash("engine core initialization failed"), 0),
    rule(V, "EngineCore encountered a fatal error.", "", Crash("the engine core hit a fatal error"), 0),
    // Failures (§2.3).
    rule(
        V,
        "Eagle3 is only supported for ",
        r"Eagle3 is only supported for (?P<which>.+?) models\. Got .*model_type='?(?P<model_type>[\w.-]+)",
        Fail(&EAGLE3_ALLOW_LIST),
        V010,
    ),
    rule(V, "Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested", "", Fail(&NO_EAGLE3_INTERFACE), 0),
    rule(V, "Cannot find model module. '", r"Cannot find model module\. '(?P<arch>Eagle\w*Eagle3)'", Fail(&EAGLE3_DRAFT_AS_EAGLE), 0),
    rule(V, "Cannot find model module. '", r"Cannot find model module\. '(?P<arch>Eagle\w*)'", Fail(&UNKNOWN_DRAFT_MODULE), 0),
    rule(
        V,
        "User-specified max_model_len (",
        r"User-specified max_model_len \((?P<target>\d+)\) is greater than the derived max_model_len \((?P<key>\w+)=(?P<derived>\d+)",
        Fail(&MAX_MODEL_LEN),
        0,
    ),
    rule(
        V,
        " cannot be larger than draft_max_model_len=",
        r"speculative_max_model_len=(?P<spec>\d+) cannot be larger than draft_max_model_len=(?P<draft>\d+)",
        Fail(&SPEC_LEN_DRAFT),
        0,
    ),
    rule(
        V,
        " cannot be larger than target_max_model_len=",
        r"speculative_max_model_len=(?P<spec>\d+) cannot be larger than target_max_model_len=(?P<target>\d+)",
        Fail(&SPEC_LEN_TARGET),
        0,
    ),
    rule(
        V,
        "Overriding draft model max_position_embeddings from ",
        r"from (?P<draft>\d+) to the target model's max_model_len \((?P<target>\d+)\)",
        Fail(&DRAFT_POSITIONS_OVERRIDDEN),
        V033,
    ),
    rule(V, " cannot be other value than 1 or target model tensor_parallel_size", "", Fail(&DRAFT_TP), 0),
    rule(V, "EAGLE does not support TP > 1 yet", "", Fail(&DRAFT_TP), 0),
    rule(V, "'tensor_parallel_size' is not a valid argument in the speculative_config.", "", Fail(&DRAFT_TP), 0),
    rule(V, "num_speculative_tokens must be provided with speculative model unless", "", Fail(&NUM_SPEC_TOKENS), 0),
    rule(V, "A speculative model was provided, but `num_speculative_tokens` was not provided", "", Fail(&NUM_SPEC_TOKENS), 0),
    rule(V, "Expected num_speculative_tokens to be greater than zero", "", Fail(&NUM_SPEC_TOKENS), 0),
    rule(V, " must be divisible by n_predict=", "", Fail(&NUM_SPEC_TOKENS), 0),
    rule(V, "num_speculative_tokens was provided but without speculative model.", "", Fail(&NUM_SPEC_TOKENS), 0),
    rule(V, "Unsupported speculative method: '", "", Fail(&SPEC_METHOD), 0),
    rule(V, "Supported methods are eagle, eagle3, and dflash.", "", Fail(&SPEC_METHOD), V033),
    rule(
        V,
        "Target and draft model should have the same vocabulary size.",
        r"Target model vocab_size=(?P<target>\d+)\. Draft model vocab_size=(?P<draft>\d+)",
        Fail(&VOCAB_SIZES),
        0,
    ),
    rule(V, "Expected logits to have shape (*, ", r"shape \(\*, (?P<vocab>\d+)\)", Fail(&LOGITS_SHAPE), 0),
    rule(V, "No available memory for the cache blocks.", "", Fail(&NO_CACHE_BLOCKS), 0),
    rule(
        V,
        " GiB KV cache is needed, which is larger than the available KV cache memory (",
        r"max seq len \((?P<len>\d+)\), \((?P<need>[\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory \((?P<avail>[\d.]+) GiB\)(?:.*estimated maximum model length is (?P<est>\d+))?",
        Fail(&KV_FOR_ONE_REQUEST),
        0,
    ),
    rule(V, "Failed to load model - not enough GPU memory.", "", Fail(&WEIGHTS_OOM), V033),
    rule(V, "KeyError: 'layers.", r"KeyError: '(?P<key>layers\.\d+\.[^']*)'", Fail(&DRAFT_INHERITED_QUANT), 0),
    rule(
        V,
        ") must be divisible by tensor parallel size (",
        r"Total number of attention heads \((?P<n>\d+)\) must be divisible by tensor parallel size \((?P<tp>\d+)\)",
        Fail(&HEADS_TP),
        0,
    ),
    rule(V, "Found bias in the loaded weights but the model config doesn't have bias", "", Fail(&EAGLE1_BIAS), 0),
    // pydantic's form of a speculative config it rejects, when no rule above names the cause.
    rule(
        V,
        "[type=value_error, input_value=ArgsKwargs((), {'",
        r"Value error, (?P<msg>.+?) \[type=value_error, input_value=ArgsKwargs\(\(\), \{'(?:method|num_speculative_tokens)'",
        Fail(&SPEC_CONFIG_REJECTED),
        0,
    ),
];

/// Traceback frames that place a failure, by file and function (deepest mapped frame wins; a
/// trailing `*` matches function names by their start).
pub static FRAMES: &[(&str, &str, FramePhase)] = &[
    // The dummy forward runs in KV profiling, graph capture and warm-up: the caller decides.
    ("/vllm/v1/spec_decode/", "dummy_run", FramePhase::Weak(Warmup)),
    ("/vllm/v1/worker/gpu_model_runner.py", "_dummy_run", FramePhase::Weak(Warmup)),
    ("/vllm_ascend/worker/", "_dummy_run", FramePhase::Weak(Warmup)),
    ("/vllm/v1/spec_decode/", "load_model", FramePhase::Fixed(DrafterLoad)),
    ("/vllm/v1/spec_decode/", "propose", FramePhase::Runtime),
    ("/vllm/v1/spec_decode/", "", FramePhase::Fixed(DrafterInit)),
    ("/vllm/v1/worker/gpu_model_runner.py", "_setup_eagle3_aux_hidden_state_outputs", FramePhase::Fixed(DrafterInit)),
    ("/vllm/v1/worker/gpu_model_runner.py", "load_model", FramePhase::Load),
    ("/vllm/v1/worker/gpu_model_runner.py", "capture_model", FramePhase::Graph),
    ("/vllm/v1/worker/gpu_model_runner.py", "profile_run", FramePhase::Fixed(KvAlloc)),
    ("/vllm/v1/worker/gpu_model_runner.py", "execute_model", FramePhase::Runtime),
    ("/vllm/v1/worker/gpu_worker.py", "determine_available_memory", FramePhase::Fixed(KvAlloc)),
    ("/vllm/v1/worker/gpu_worker.py", "compile_or_warm_up_model", FramePhase::Fixed(Warmup)),
    ("/vllm/v1/core/kv_cache_utils.py", "", FramePhase::Fixed(KvAlloc)),
    ("/vllm/model_executor/model_loader/", "", FramePhase::Load),
    ("/vllm/model_executor/models/", "load_weights", FramePhase::Load),
    ("/vllm/compilation/", "", FramePhase::Fixed(KernelCompile)),
    ("/vllm/config", "", FramePhase::Config),
    ("/vllm/transformers_utils/", "", FramePhase::Config),
    ("/vllm/engine/arg_utils.py", "", FramePhase::Fixed(Preflight)),
];
