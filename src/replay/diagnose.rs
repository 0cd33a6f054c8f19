//! Failures every engine prints (torch, CUDA, NCCL, tqdm, Python, registry text) and the
//! findings a replay builds: from a rule, from a traceback's hint, for a CUDA device fault or
//! a graph capture that raised, and `unrecognized-failure` when nothing pins the cause down.

use regex::Captures;

use crate::finding::Severity::Error;
use crate::finding::{Evidence, Finding, Side};
use crate::phase::PhaseId::{self, *};
use crate::spec::{LaunchSpec, ALLOW_LONGER_CONTEXT_ENV};

use super::detect::Format;
use super::remedies as fix;
use super::rules::Action::*;
use super::rules::{expand, failure, rule, Ctx, Engine, Failure, Fault, Rule};
use super::traceback::Traceback;

pub const UNRECOGNIZED: &str = "unrecognized-failure";
pub const GRAPH_CAPTURE_FAILED: &str = "cuda-graph-capture-failed";
pub const ILLEGAL_MEMORY_ACCESS: &str = "illegal-memory-access";

const A: Engine = Engine::Any;

static DRAFT_ARCH_UNSUPPORTED: Failure = failure(
    "draft-architecture",
    Error,
    Some(DrafterLoad),
    "The draft's architectures $archs is not a class this engine registers. SGLang's EAGLE-3 draft classes are \
     LlamaForCausalLMEagle3 (and Eagle3DeepseekV2ForCausalLM in 0.5.23); SGLang does not read the vLLM speculators \
     format (Eagle3Speculator); vLLM maps method eagle/eagle3 onto Eagle…/Eagle3… classes.",
    fix::none,
);
static ARCH_UNSUPPORTED: Failure = failure(
    "unsupported-architecture",
    Error,
    None,
    "This engine build has no model class for the architectures $archs; upgrade the engine or use a supported model.",
    fix::none,
);
static UNKNOWN_MODEL_TYPE: Failure = failure(
    "unsupported-architecture",
    Error,
    None,
    "A config's model_type is unknown to the installed transformers (the KeyError names it). For a draft this means \
     the draft format is not supported by this engine build (e.g. a Kimi EAGLE-3 MLA draft on SGLang 0.5.11).",
    fix::none,
);
static SHAPES: Failure = failure(
    "hidden-size-mismatch",
    Error,
    None,
    "A matrix product got incompatible shapes ($a and $b). In an EAGLE-3 launch this is the draft's fc receiving \
     hidden states of another width: the draft's target_hidden_size (or hidden_size) differs from the target's \
     hidden_size, or eagle_aux_hidden_state_layer_ids selects another number of layers than fc expects. SGLang checks \
     neither at start-up; `specdeck check` names the keys.",
    fix::none,
);
static OUT_OF_MEMORY: Failure = failure(
    "out-of-memory",
    Error,
    None,
    "CUDA ran out of GPU memory. Weights shrink per GPU with a larger --tp-size; the KV pool with a smaller \
     --mem-fraction-static; CUDA graphs with a smaller --cuda-graph-max-bs (vLLM: --tensor-parallel-size, \
     --gpu-memory-utilization).",
    fix::out_of_memory,
);
static NCCL: Failure = failure(
    "nccl-error",
    Error,
    None,
    "A collective operation failed in NCCL ($err). Common causes: a GPU peer-to-peer path the driver or topology \
     does not support, a rank that died first, or a network fabric error on multi-node runs. NCCL_DEBUG=INFO \
     makes NCCL log which transport failed.",
    fix::nccl_debug,
);
static TOKEN_MAP_TP: Failure = failure(
    "draft-vocab-map",
    Error,
    None,
    "An index went out of range with --speculative-token-map and --tp-size > 1: the FR-Spec token map gathers global \
     vocab ids from a vocab-sharded lm_head (sglang#4328, unfixed). Use --tp-size 1 for token maps, or an EAGLE-3 \
     draft (it ignores the map).",
    fix::tp_one,
);

/// A device fault after the warning that the draft's context is shorter than the target's.
pub static CONTEXT_FAULT: Failure = failure(
    "context-length-exceeds-draft",
    Error,
    None,
    "A CUDA device fault followed the warning that the target's context length ($target) exceeds the drafter's \
     ($draft) while SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is on: the draft's rotary cache and KV indices cover \
     $draft positions, and a longer request indexes past them (SGLang PR #9388, vLLM #48894).",
    fix::clamp_draft,
);
/// The load line names an EAGLE-3 draft class, the arguments say EAGLE (a silent failure).
pub static EAGLE3_DRAFT_UNDER_EAGLE: Failure = failure(
    "algorithm-mismatch",
    Error,
    Some(Preflight),
    "The draft is $cls, an EAGLE-3 class, but the launch uses --speculative-algorithm EAGLE: the target captures no \
     aux hidden states and the draft skips its fc, so the server starts and accepts about 1.0 token per step.",
    fix::algorithm_eagle3,
);
/// The load line names an EAGLE-1/2 draft class, the arguments say EAGLE3.
pub static EAGLE_DRAFT_UNDER_EAGLE3: Failure = failure(
    "algorithm-mismatch",
    Error,
    Some(Preflight),
    "The draft is $cls, an EAGLE (1/2) class, but the launch uses --speculative-algorithm EAGLE3, which feeds it three \
     concatenated target hidden states.",
    fix::algorithm_eagle,
);

pub static RULES: &[Rule] = &[
    rule(
        A,
        " checkpoint shards:",
        r"Loading (?:safetensors|pt) checkpoint shards:\s*\d+% Completed \|\s*(?P<done>\d+)/(?P<total>\d+)",
        ShardBar,
        0,
    ),
    rule(
        A,
        " are not supported for now.",
        r"Model architectures \[(?P<archs>[^\]]*(?:Eagle|NextN|MTP|Speculator)[^\]]*)\] are not supported for now\.",
        Fail(&DRAFT_ARCH_UNSUPPORTED),
        0,
    ),
    rule(A, " are not supported for now.", r"Model architectures (?P<archs>\[[^\]]*\]) are not supported", Fail(&ARCH_UNSUPPORTED), 0),
    rule(A, " failed to be inspected.", r"Model architectures (?P<archs>\[[^\]]*\]) failed to be inspected", Fail(&ARCH_UNSUPPORTED), 0),
    rule(A, "CONFIG_MAPPING[config_dict[\"model_type\"]]", "", Hint(&UNKNOWN_MODEL_TYPE), 0),
    rule(
        A,
        "mat1 and mat2 shapes cannot be multiplied",
        r"mat1 and mat2 shapes cannot be multiplied \((?P<a>\d+x\d+) and (?P<b>\d+x\d+)\)",
        Fail(&SHAPES),
        0,
    ),
    rule(A, "CUDA out of memory", "", Fail(&OUT_OF_MEMORY), 0),
    rule(A, "CUDA error: out of memory", "", Fail(&OUT_OF_MEMORY), 0),
    rule(A, "OutOfMemoryError", "", Fail(&OUT_OF_MEMORY), 0),
    rule(A, "index out of bounds", "", DeviceFault(Fault::Assert), 0),
    rule(A, "an illegal memory access was encountered", "", DeviceFault(Fault::IllegalAccess), 0),
    rule(A, "device-side assert triggered", "", DeviceFault(Fault::Assert), 0),
    rule(A, "IndexCheckKernel: Index out of range", "", DeviceFault(Fault::Assert), 0),
    // torch's text around any NCCL result, and its watchdog's timeout.
    rule(A, "NCCL error", r"(?P<err>NCCL error.*)", Fail(&NCCL), 0),
    rule(A, "Watchdog caught collective operation timeout", r"(?P<err>Watchdog caught collective operation timeout.*)", Fail(&NCCL), 0),
    // Fatal lines that end the process without a Python exception of their own.
    rule(A, "Fatal Python error: ", "", Crash("the Python interpreter aborted (Fatal Python error)"), 0),
    rule(A, "CUDA error: ", "", Crash("a CUDA error was raised"), 0),
    rule(A, " Assertion `", r"Assertion `.*` failed", DeviceFault(Fault::Assert), 0),
    // Ready on the server's own word, for the engines without a table of their own.
    rule(A, "Application startup complete.", "", ServerReady, 0),
];

pub fn log_evidence(file: &str, line: u64, text: &str) -> Evidence {
    Evidence::new(Side::Log, file, format!("line {line}"), text)
}

/// The finding of a recognised failure.
pub fn from_failure(failure: &Failure, ctx: &Ctx, evidence: Vec<Evidence>) -> Finding {
    Finding {
        id: failure.id.to_string(),
        severity: failure.severity,
        phase: ctx.phase,
        message: expand(failure.message, ctx.caps),
        evidence,
        remedies: (failure.remedies)(ctx),
        rank: None,
    }
}

/// The token-map fault: only when the launch used a token map with TP > 1.
pub fn token_map_fault(spec: &crate::spec::LaunchSpec) -> Option<&'static Failure> {
    let has_map = spec.extra_flags.iter().any(|(f, v)| f == "--speculative-token-map" && v.is_some());
    (has_map && spec.tp() > 1).then_some(&TOKEN_MAP_TP)
}

/// A device fault with no earlier line to explain it: say what is known to cause it.
pub fn unexplained_device_fault(file: &str, phase: PhaseId, line: u64, text: &str) -> Finding {
    let mut f = Finding::new(
        UNRECOGNIZED,
        Error,
        phase,
        format!(
            "A CUDA device-side fault in {phase}: {}. The log does not say which input caused it. Known EAGLE causes: \
             a draft context shorter than the target's while SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is on (the \
             draft's rotary cache has max_position_embeddings rows; vLLM extends positions itself since 0.33); a draft \
             lm_head larger than its d2t map (tied embeddings with draft_vocab_size); --speculative-token-map with \
             --tp-size > 1. `specdeck check` compares the configs.",
            text.trim()
        ),
    );
    f.evidence.push(log_evidence(file, line, text));
    f
}

/// `unrecognized-failure` for a traceback (or crash line) nothing explained. `place` is the
/// phase and whether the log showed it.
pub fn unrecognized(file: &str, (phase, known): (PhaseId, bool), tb: Option<&Traceback>, crash: Option<(u64, &str, &str)>) -> Finding {
    let mut evidence = Vec::new();
    let mut message = match tb.and_then(|t| t.exception.as_ref()) {
        Some((line, text)) => {
            evidence.push(log_evidence(file, *line, text));
            format!("The server failed in {phase} with an error specdeck does not recognise: {}", text.trim())
        }
        None => match tb {
            Some(t) => {
                evidence.push(log_evidence(file, t.last.0, &t.last.1));
                format!("The server failed in {phase}; the traceback is cut short before its error line (last line: {}).", t.last.1.trim())
            }
            None => String::new(),
        },
    };
    if let Some(frame) = tb.and_then(Traceback::deepest_engine_frame) {
        evidence.push(log_evidence(file, frame.line, &frame.text));
        message.push_str(&format!(" Deepest engine frame: {} in {}.", short_path(&frame.path), frame.func));
    }
    if let Some(t) = tb {
        evidence.push(log_evidence(file, t.start.0, &t.start.1));
    }
    if let Some((line, text, note)) = crash {
        if message.is_empty() {
            message = format!("The server failed in {phase} and the log shows no error that explains it: {note}.");
            evidence.push(log_evidence(file, line, text));
        }
    }
    if let Some(note) = tb.and_then(|t| t.note) {
        message.push_str(&format!(" ({note}.)"));
    }
    if !known {
        message.push_str(" The log shows no start-up line, so the phase is taken to be serving.");
    }
    message.push_str(" No confident fix: read the lines cited.");
    // A cut-short traceback's last line is often its deepest frame: cite each line once.
    evidence.dedup_by(|a, b| a.key == b.key);
    let mut f = Finding::new(UNRECOGNIZED, Error, phase, message);
    f.evidence = evidence;
    f
}

/// A traceback whose deepest engine frames are in CUDA graph capture, with no error line
/// specdeck knows: the capture raised. `batch_sizes`: what the log says was being captured.
pub fn graph_capture_failed(
    file: &str,
    phase: PhaseId,
    tb: &Traceback,
    batch_sizes: Option<&str>,
    spec: &LaunchSpec,
    format: Format,
) -> Finding {
    let which = if phase == DraftGraphCapture { "the draft's" } else { "the target's" };
    let error = match &tb.exception {
        Some((_, text)) => format!("with {}", text.trim()),
        None => "(the traceback is cut before its error line)".to_string(),
    };
    let at = batch_sizes.map(|bs| format!(" while capturing batch size {bs}")).unwrap_or_default();
    let engine_note = match format.engine() {
        Engine::Any => format!(" This is a {} log: specdeck offers no flag change for this engine.", format.name()),
        _ => String::new(),
    };
    let frame = tb.deepest_engine_frame();
    let mut f = Finding::new(
        GRAPH_CAPTURE_FAILED,
        Error,
        phase,
        format!(
            "CUDA graph capture of {which} forward raised{at} {error}. Capture runs each batch size once before serving; \
             capturing fewer sizes or none (eager decode, slower) starts the server while the cause is looked into.{}{engine_note}",
            frame.map(|fr| format!(" Deepest engine frame: {} in {}.", short_path(&fr.path), fr.func)).unwrap_or_default()
        ),
    );
    if let Some((line, text)) = &tb.exception {
        f.evidence.push(log_evidence(file, *line, text));
    }
    if let Some(fr) = frame {
        f.evidence.push(log_evidence(file, fr.line, &fr.text));
    }
    f.evidence.push(log_evidence(file, tb.start.0, &tb.start.1));
    f.evidence.dedup_by(|a, b| a.key == b.key);
    let max_bs = batch_sizes.and_then(|list| list.split(',').filter_map(|b| b.trim().parse::<u32>().ok()).max());
    f.remedies = fix::graph_capture(format.engine(), max_bs.or(spec.cuda_graph_max_bs));
    f
}

/// `illegal memory access` with no earlier line to explain it. With speculative decoding on,
/// the known cause is a draft whose context is shorter than the requests.
pub fn illegal_memory_access(file: &str, (phase, _): (PhaseId, bool), line: u64, text: &str, speculative: bool, format: Format) -> Finding {
    let draft = if !speculative {
        String::new()
    } else if format == Format::Vllm {
        " With speculative decoding on, check the drafter's max_position_embeddings against --max-model-len: a \
         request longer than the draft's positions indexes past its rotary cache."
            .to_string()
    } else {
        format!(
            " With speculative decoding on, check the draft context: a target context longer than the drafter's, \
             allowed by {ALLOW_LONGER_CONTEXT_ENV}=1, lets a long request index past the draft's rotary cache and KV \
             (SGLang PR #9388); the warning naming both lengths is printed at draft start-up."
        )
    };
    let mut f = Finding::new(
        ILLEGAL_MEMORY_ACCESS,
        Error,
        phase,
        format!(
            "A CUDA kernel made an illegal memory access in {phase}: {}. CUDA reports it at the next synchronisation, so \
             the frame shown may not be the kernel at fault; CUDA_LAUNCH_BLOCKING=1 makes the error surface at the \
             kernel that caused it.{draft}",
            text.trim()
        ),
    );
    f.evidence.push(log_evidence(file, line, text));
    f.remedies = fix::launch_blocking();
    f
}

/// `…/site-packages/sglang/srt/speculative/eagle_worker.py` → `sglang/srt/speculative/eagle_worker.py`.
fn short_path(path: &str) -> &str {
    super::traceback::ENGINE_ROOTS.iter().find_map(|root| path.rfind(root).map(|i| &path[i + 1..])).unwrap_or(path)
}

/// Captures of `pattern` on `text` (for re-reading a line a rule matched earlier).
pub fn recapture<'t>(rules: &super::rules::RuleSet, text: &'t str, id: &str) -> Option<Captures<'t>> {
    rules.first_match(text, |r| matches!(r.action, Fail(f) if f.id == id))?.captures()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::traceback::classify;

    #[test]
    fn unrecognized_cites_the_error_line_and_deepest_frame() {
        let mut tb = Traceback::new(Some("TP0"), 7, "Scheduler hit an exception: Traceback (most recent call last):");
        for (n, text) in [
            (8, "  File \"/v/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py\", line 521, in init_tp_model_worker"),
            (9, "  File \"/v/lib/python3.12/site-packages/torch/foo.py\", line 3, in bar"),
            (10, "RuntimeError: something new"),
        ] {
            tb.push(n, text, &classify(text));
        }
        let f = unrecognized("x.log", (TargetGraphCapture, true), Some(&tb), None);
        assert_eq!(f.id, UNRECOGNIZED);
        assert_eq!(f.phase, TargetGraphCapture);
        assert!(f.message.contains("RuntimeError: something new"), "{}", f.message);
        assert!(f.message.contains("sglang/srt/managers/scheduler.py in init_tp_model_worker"), "{}", f.message);
        let keys: Vec<&str> = f.evidence.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["line 10", "line 8", "line 7"]);
        assert!(f.remedies.is_empty());
    }
}
