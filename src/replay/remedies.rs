//! Remedy builders for recognised failures: typed `SpecChange`s with the engines' exact flag
//! and env names. A builder returns nothing when the log does not give what a confident value
//! needs (the finding's message then says what to change by hand).

use serde_json::json;

use crate::engine::context::{ALLOW, CLAMP};
use crate::finding::Remedy;
use crate::phase::PhaseId;
use crate::preflight::paging;
use crate::spec::{SpecChange, ALLOW_LONGER_CONTEXT_ENV};

use super::rules::{Ctx, Engine, C, M, N};

fn set(flag: &str, value: impl ToString) -> SpecChange {
    SpecChange::SetFlag { flag: flag.to_string(), value: value.to_string() }
}

fn env(name: &str, value: &str) -> SpecChange {
    SpecChange::SetEnv { name: name.to_string(), value: value.to_string() }
}

fn draft_config(key: &str, value: serde_json::Value) -> SpecChange {
    SpecChange::OverrideDraftConfig { key: key.to_string(), value }
}

fn one(id: &str, key: &str, description: String, changes: Vec<SpecChange>) -> Vec<Remedy> {
    vec![Remedy::new(id, key, description, changes)]
}

/// A remedy that sets one flag; the description is `why: --flag value.`
fn set_flag(id: &str, flag: &str, value: impl ToString, why: &str) -> Remedy {
    let value = value.to_string();
    Remedy::new(id, flag, format!("{why}: {flag} {value}."), vec![set(flag, &value)])
}

fn cap<'c>(ctx: &'c Ctx, name: &str) -> Option<&'c str> {
    ctx.caps.name(name).map(|m| m.as_str())
}

fn cap_num<T: std::str::FromStr>(ctx: &Ctx, name: &str) -> Option<T> {
    cap(ctx, name)?.parse().ok()
}

/// Fractions are offered with two decimals, as users type them.
fn fraction(f: f64) -> String {
    format!("{:.2}", (f * 100.0).round() / 100.0)
}

/// True when the log reads like SGLang 0.5.23's wording only (flags were renamed there).
fn new_sglang(ctx: &Ctx) -> bool {
    ctx.dialect & N != 0 && ctx.dialect & (C | M) == 0
}

pub fn none(_: &Ctx) -> Vec<Remedy> {
    Vec::new()
}

fn clamp(len: &str) -> Remedy {
    set_flag(CLAMP, "--context-length", len, "Run the target at the drafter's context length")
}

/// The draft-side context error: the same two remedies `check` offers.
pub fn clamp_or_allow_draft(ctx: &Ctx) -> Vec<Remedy> {
    let (Some(target), Some(draft)) = (cap_num::<u64>(ctx, "target"), cap(ctx, "draft")) else { return Vec::new() };
    vec![
        clamp(draft),
        Remedy::new(
            ALLOW,
            ALLOW_LONGER_CONTEXT_ENV,
            format!(
                "Keep the target's {target} context: set {ALLOW_LONGER_CONTEXT_ENV}=1 and extend the drafter's \
                 positions to {target} in memory. Acceptance drops past {draft} tokens, the drafter's trained length."
            ),
            vec![env(ALLOW_LONGER_CONTEXT_ENV, "1"), draft_config("/max_position_embeddings", json!(target))],
        ),
    ]
}

/// The override is already on: only clamping removes the risk (vLLM: its max model length).
pub fn clamp_draft(ctx: &Ctx) -> Vec<Remedy> {
    let Some(draft) = cap(ctx, "draft") else { return Vec::new() };
    if ctx.engine == Engine::Vllm {
        return vec![set_flag("clamp-max-model-len", "--max-model-len", draft, "Serve at the drafter's trained length")];
    }
    vec![clamp(draft)]
}

/// `--context-length` above the target's own derived length.
pub fn clamp_or_allow_target(ctx: &Ctx) -> Vec<Remedy> {
    let Some(derived) = cap(ctx, "derived") else { return Vec::new() };
    vec![
        set_flag(CLAMP, "--context-length", derived, "Use the target's derived context length"),
        Remedy::new(
            ALLOW,
            ALLOW_LONGER_CONTEXT_ENV,
            format!("Keep the longer context: {ALLOW_LONGER_CONTEXT_ENV}=1 (SGLang warns of incorrect outputs or CUDA errors)."),
            vec![env(ALLOW_LONGER_CONTEXT_ENV, "1")],
        ),
    ]
}

/// vLLM's `max_model_len` above the derived length.
pub fn vllm_max_model_len(ctx: &Ctx) -> Vec<Remedy> {
    let Some(derived) = cap(ctx, "derived") else { return Vec::new() };
    vec![
        set_flag("clamp-max-model-len", "--max-model-len", derived, "Use the derived length"),
        Remedy::new(
            "allow-long-max-model-len",
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
            "Keep the longer length: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (applies to the target only).".to_string(),
            vec![env("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")],
        ),
    ]
}

/// vLLM's KV profiling: a max length that fits, when vLLM estimated one.
pub fn vllm_kv_memory(ctx: &Ctx) -> Vec<Remedy> {
    let Some(est) = cap(ctx, "est") else { return Vec::new() };
    vec![set_flag("clamp-max-model-len", "--max-model-len", est, "Use the length vLLM estimated fits in the KV cache memory")]
}

/// The KV pool does not fit: a larger static fraction, by SGLang's suggested minimum when it
/// gives one, else 0.05 above the current value.
pub fn raise_mem_fraction(ctx: &Ctx) -> Vec<Remedy> {
    let current = cap_num::<f64>(ctx, "cur").or(ctx.spec.mem_fraction_static);
    let target = match (cap_num::<f64>(ctx, "suggest"), current) {
        (Some(s), _) => (s * 100.0).ceil() / 100.0 + 0.01,
        (None, Some(c)) => (c + 0.05).min(0.95),
        (None, None) => return Vec::new(),
    };
    if current.is_some_and(|c| target <= c) {
        return Vec::new();
    }
    vec![set_flag("raise-mem-fraction-static", "--mem-fraction-static", fraction(target), "Give the KV cache more room")]
}

/// CUDA graphs are allocated outside the static pool: a smaller fraction and fewer graph
/// batch sizes, as SGLang's own capture-failure message advises.
pub fn graph_memory(ctx: &Ctx) -> Vec<Remedy> {
    let fraction_now = cap_num::<f64>(ctx, "cur").or(ctx.spec.mem_fraction_static);
    let lower = fraction_now.map_or(0.8, |f| (f - 0.05).max(0.5));
    let bs_flag = if new_sglang(ctx) { "--cuda-graph-max-bs-decode" } else { "--cuda-graph-max-bs" };
    let bs = match ctx.spec.cuda_graph_max_bs {
        Some(b) if b <= 16 => (b / 2).max(1),
        _ => 16,
    };
    vec![
        set_flag(
            "lower-mem-fraction-static",
            "--mem-fraction-static",
            fraction(lower),
            "Leave more memory outside the static pool for graphs",
        ),
        set_flag("lower-cuda-graph-max-bs", bs_flag, bs, "Capture fewer batch sizes (draft graphs grow with batch × topk × steps)"),
    ]
}

/// A plain CUDA out-of-memory: what helps depends on where it happened. Weights: more GPUs
/// to shard them (doubling the TP size the log shows). The KV pool or graphs: a smaller
/// static fraction. Elsewhere, or when the log does not show the phase, nothing is certain.
pub fn out_of_memory(ctx: &Ctx) -> Vec<Remedy> {
    let vllm = ctx.engine == Engine::Vllm;
    match ctx.phase {
        _ if !ctx.phase_known || ctx.engine == Engine::Any => Vec::new(),
        PhaseId::TargetLoad | PhaseId::DrafterLoad => match ctx.spec.tp_size {
            Some(tp) => vec![set_flag("increase-tp-size", tp_flag(ctx), tp * 2, "Shard the weights over more GPUs")],
            None => Vec::new(),
        },
        PhaseId::TargetGraphCapture | PhaseId::DraftGraphCapture if !vllm => graph_memory(ctx),
        PhaseId::KvAlloc | PhaseId::TargetGraphCapture | PhaseId::DraftGraphCapture if vllm => {
            vec![set_flag(
                "lower-gpu-memory-utilization",
                "--gpu-memory-utilization",
                "0.80",
                "Leave vLLM more headroom outside its budget",
            )]
        }
        PhaseId::KvAlloc => {
            let lower = ctx.spec.mem_fraction_static.map_or(0.8, |f| (f - 0.05).max(0.5));
            vec![set_flag("lower-mem-fraction-static", "--mem-fraction-static", fraction(lower), "Reserve a smaller KV pool")]
        }
        _ => Vec::new(),
    }
}

/// A graph capture that raised: capture fewer batch sizes (half the largest the log or the
/// launch shows), or none. TRT-LLM and llama.cpp logs get none: their switches are not flags
/// specdeck knows.
pub fn graph_capture(engine: Engine, max_bs: Option<u32>) -> Vec<Remedy> {
    match engine {
        Engine::Sglang => {
            let mut out: Vec<Remedy> = max_bs
                .filter(|&b| b > 1)
                .map(|b| b / 2)
                .map(|bs| set_flag("lower-cuda-graph-max-bs", "--cuda-graph-max-bs", bs, "Capture fewer batch sizes"))
                .into_iter()
                .collect();
            out.push(switch("disable-cuda-graph", "--disable-cuda-graph", "Serve without CUDA graphs (eager decode, slower)"));
            out
        }
        // vLLM's capture-size flag changed name across versions; --enforce-eager did not.
        Engine::Vllm => vec![switch("enforce-eager", "--enforce-eager", "Serve without CUDA graphs (eager decode, slower)")],
        Engine::Any => Vec::new(),
    }
}

/// `graph_capture` with the largest batch size the launch shows.
pub fn graph_capture_flags(ctx: &Ctx) -> Vec<Remedy> {
    graph_capture(ctx.engine, ctx.spec.cuda_graph_max_bs)
}

/// A flag without a value (argparse's `store_true`).
fn switch(id: &str, flag: &str, why: &str) -> Remedy {
    Remedy::new(id, flag, format!("{why}: {flag}."), vec![set(flag, "")])
}

/// NCCL says which transport failed only when asked.
pub fn nccl_debug(_: &Ctx) -> Vec<Remedy> {
    let name = "NCCL_DEBUG";
    one("nccl-debug-info", name, format!("Relaunch with {name}=INFO so NCCL logs the transport that failed."), vec![env(name, "INFO")])
}

/// CUDA reports a kernel's fault at a later call unless launches are synchronous.
pub fn launch_blocking() -> Vec<Remedy> {
    let name = "CUDA_LAUNCH_BLOCKING";
    one(
        "cuda-launch-blocking",
        name,
        format!("Relaunch with {name}=1 so the error names the kernel at fault (slower; for diagnosis only)."),
        vec![env(name, "1")],
    )
}

pub fn eagle_topk_one(_: &Ctx) -> Vec<Remedy> {
    vec![paging::topk_one()]
}

pub fn page_size_or_topk(_: &Ctx) -> Vec<Remedy> {
    paging::page_size_or_topk()
}

pub fn spec_v2_topk(ctx: &Ctx) -> Vec<Remedy> {
    let mut out = eagle_topk_one(ctx);
    out.push(Remedy::new(
        "disable-spec-v2",
        "SGLANG_ENABLE_SPEC_V2",
        "Keep topk > 1 on the v1 speculative path: unset SGLANG_ENABLE_SPEC_V2.".to_string(),
        vec![SpecChange::UnsetEnv { name: "SGLANG_ENABLE_SPEC_V2".to_string() }],
    ));
    out
}

pub fn draft_tokens_steps_plus_one(ctx: &Ctx) -> Vec<Remedy> {
    let Some(steps) = cap_num::<u32>(ctx, "steps") else { return Vec::new() };
    vec![set_flag("draft-tokens-steps-plus-1", "--speculative-num-draft-tokens", steps + 1, "With topk 1, draft tokens = steps + 1")]
}

pub fn pipeline_off(_: &Ctx) -> Vec<Remedy> {
    vec![set_flag("pp-size-1", "--pp-size", 1, "Speculative decoding runs without pipeline parallelism")]
}

pub fn mixed_chunk_off(_: &Ctx) -> Vec<Remedy> {
    one(
        "disable-mixed-chunk",
        "--enable-mixed-chunk",
        "Remove --enable-mixed-chunk (speculative decoding turns it off).".to_string(),
        vec![SpecChange::UnsetFlag { flag: "--enable-mixed-chunk".to_string() }],
    )
}

/// The draft's attention backend is outside the draft worker's supported map. flashinfer is
/// in that map in every version read; 0.4.x–0.5.2 has no draft-only flag.
pub fn draft_backend_flashinfer(ctx: &Ctx) -> Vec<Remedy> {
    let flag = if ctx.dialect & (M | N) != 0 { "--speculative-draft-attention-backend" } else { "--attention-backend" };
    vec![set_flag("draft-attention-backend-flashinfer", flag, "flashinfer", "Use a backend the draft worker supports")]
}

/// An MLA-only backend picked for a non-MLA draft (Kimi-K2.5 + a Llama EAGLE-3 draft).
pub fn draft_backend_mha(_: &Ctx) -> Vec<Remedy> {
    let flag = "--speculative-draft-attention-backend";
    vec![set_flag("draft-attention-backend-trtllm-mha", flag, "trtllm_mha", "Give the non-MLA draft an MHA backend")]
}

/// The draft config names the target's class; SGLang picks the class from `architectures`.
pub fn draft_arch_eagle3(_: &Ctx) -> Vec<Remedy> {
    one(
        "draft-architecture-eagle3",
        "architectures",
        "Load the drafter as an EAGLE-3 draft: architectures = [\"LlamaForCausalLMEagle3\"], model_type = \"llama\" \
         (in memory; the file is not changed)."
            .to_string(),
        vec![draft_config("/architectures", json!(["LlamaForCausalLMEagle3"])), draft_config("/model_type", json!("llama"))],
    )
}

/// Only when the launch asked for EAGLE-3: the draft then must be an EAGLE-3 class.
pub fn draft_arch_if_eagle3(ctx: &Ctx) -> Vec<Remedy> {
    if ctx.spec.speculative_algorithm == Some(crate::spec::Algorithm::Eagle3) {
        draft_arch_eagle3(ctx)
    } else {
        Vec::new()
    }
}

pub fn draft_fc_bias(_: &Ctx) -> Vec<Remedy> {
    one(
        "draft-fc-bias",
        "eagle_fc_bias",
        "The EAGLE-1 checkpoint has an fc bias: eagle_fc_bias = true in the draft config (in memory).".to_string(),
        vec![draft_config("/eagle_fc_bias", json!(true))],
    )
}

pub fn algorithm_eagle3(_: &Ctx) -> Vec<Remedy> {
    vec![set_flag(
        "algorithm-eagle3",
        "--speculative-algorithm",
        "EAGLE3",
        "Serve the EAGLE-3 draft as EAGLE-3 (vLLM: \"method\": \"eagle3\")",
    )]
}

pub fn algorithm_eagle(_: &Ctx) -> Vec<Remedy> {
    vec![set_flag("algorithm-eagle", "--speculative-algorithm", "EAGLE", "This draft runs under EAGLE (NEXTN is an alias)")]
}

fn tp_flag(ctx: &Ctx) -> &'static str {
    if ctx.engine == Engine::Vllm {
        "--tensor-parallel-size"
    } else {
        "--tp-size"
    }
}

/// The largest TP size below the failing one that divides the count (`n`), when the failing
/// value (`tp`, else the launch's TP) is known.
pub fn tp_divisor(ctx: &Ctx) -> Vec<Remedy> {
    let (Some(n), Some(tp)) = (cap_num::<u32>(ctx, "n"), cap_num::<u32>(ctx, "tp").or(ctx.spec.tp_size)) else {
        return Vec::new();
    };
    let Some(fit) = (1..tp).rev().find(|d| n % d == 0) else { return Vec::new() };
    vec![set_flag("tp-size-divisor", tp_flag(ctx), fit, &format!("{n} splits evenly over {fit} GPUs, not {tp}"))]
}

pub fn tp_one(ctx: &Ctx) -> Vec<Remedy> {
    vec![set_flag("tp-size-1", tp_flag(ctx), 1, "Run without tensor parallelism")]
}

pub fn memory_balance_check_off(ctx: &Ctx) -> Vec<Remedy> {
    let (name, value) =
        if new_sglang(ctx) { ("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "0") } else { ("SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK", "1") };
    one(
        "skip-memory-balance-check",
        name,
        format!("Start anyway with uneven free memory: {name}={value} (first check that no other process holds the GPUs)."),
        vec![env(name, value)],
    )
}

/// A quantization clash while building the draft: name the draft's own method.
pub fn draft_quantization(ctx: &Ctx) -> Vec<Remedy> {
    let Some(method) = cap(ctx, "cfg") else { return Vec::new() };
    if !matches!(ctx.phase, PhaseId::DrafterLoad | PhaseId::DrafterInit) {
        return Vec::new();
    }
    let flag = "--speculative-draft-model-quantization";
    vec![set_flag("draft-quantization", flag, method, "Load the draft with its own quantization")]
}

#[cfg(test)]
mod tests {
    use regex::Regex;

    use super::*;
    use crate::spec::LaunchSpec;

    fn ctx_for<'a>(caps: &'a regex::Captures<'a>, spec: &'a LaunchSpec, phase: PhaseId) -> Ctx<'a> {
        Ctx { caps, spec, dialect: C, phase, phase_known: true, engine: Engine::Sglang }
    }

    #[test]
    fn draft_context_remedies_match_check() {
        let re = Regex::new(r"\((?P<target>\d+)\).*\((?P<draft>\d+)\)").unwrap();
        let caps = re.captures("(262144) vs (131072)").unwrap();
        let spec = LaunchSpec::default();
        let r = clamp_or_allow_draft(&ctx_for(&caps, &spec, PhaseId::DrafterInit));
        assert_eq!(r[0].id, CLAMP);
        assert_eq!(r[0].changes, vec![set("--context-length", "131072")]);
        assert_eq!(r[1].id, ALLOW);
        assert_eq!(r[1].changes, vec![env(ALLOW_LONGER_CONTEXT_ENV, "1"), draft_config("/max_position_embeddings", json!(262144))]);
    }

    #[test]
    fn mem_fraction_follows_sglangs_suggestion() {
        let re = Regex::new(r"=(?P<cur>[\d.]+) above (?P<suggest>[\d.]+)").unwrap();
        let caps = re.captures("=0.80 above 0.843").unwrap();
        let spec = LaunchSpec::default();
        let r = raise_mem_fraction(&ctx_for(&caps, &spec, PhaseId::KvAlloc));
        assert_eq!(r[0].changes, vec![set("--mem-fraction-static", "0.86")]);
        let caps = Regex::new("x").unwrap().captures("x").unwrap();
        assert!(raise_mem_fraction(&ctx_for(&caps, &spec, PhaseId::KvAlloc)).is_empty());
    }

    #[test]
    fn out_of_memory_remedies_follow_the_phase() {
        let caps = Regex::new("x").unwrap().captures("x").unwrap();
        let spec = LaunchSpec { tp_size: Some(4), mem_fraction_static: Some(0.88), ..LaunchSpec::default() };
        let ids = |phase, known, engine| {
            let ctx = Ctx { caps: &caps, spec: &spec, dialect: C, phase, phase_known: known, engine };
            out_of_memory(&ctx)
                .iter()
                .map(|r| (r.id.clone(), r.changes.iter().map(SpecChange::describe).collect::<Vec<_>>()))
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(PhaseId::TargetLoad, true, Engine::Sglang), [("increase-tp-size".to_string(), vec!["--tp-size 8".to_string()])]);
        assert_eq!(
            ids(PhaseId::DrafterLoad, true, Engine::Vllm),
            [("increase-tp-size".to_string(), vec!["--tensor-parallel-size 8".to_string()])]
        );
        assert_eq!(
            ids(PhaseId::KvAlloc, true, Engine::Sglang),
            [("lower-mem-fraction-static".to_string(), vec!["--mem-fraction-static 0.83".to_string()])]
        );
        assert_eq!(ids(PhaseId::KvAlloc, true, Engine::Vllm)[0].0, "lower-gpu-memory-utilization");
        assert_eq!(ids(PhaseId::TargetGraphCapture, true, Engine::Sglang)[0].0, "lower-mem-fraction-static");
        assert!(ids(PhaseId::KvAlloc, false, Engine::Sglang).is_empty());
        assert!(ids(PhaseId::Serving, true, Engine::Sglang).is_empty());
        assert!(ids(PhaseId::KvAlloc, true, Engine::Any).is_empty());
    }

    #[test]
    fn graph_capture_remedies_use_each_engines_flags() {
        let describe =
            |r: Vec<Remedy>| r.iter().map(|r| r.changes.iter().map(SpecChange::describe).collect::<Vec<_>>().join(" ")).collect::<Vec<_>>();
        assert_eq!(describe(graph_capture(Engine::Sglang, Some(160))), ["--cuda-graph-max-bs 80", "--disable-cuda-graph "]);
        assert_eq!(describe(graph_capture(Engine::Sglang, Some(1))), ["--disable-cuda-graph "]);
        assert_eq!(describe(graph_capture(Engine::Vllm, Some(512))), ["--enforce-eager "]);
        assert!(graph_capture(Engine::Any, Some(8)).is_empty());
    }

    #[test]
    fn tp_divisor_picks_the_largest_fitting_size() {
        let re = Regex::new(r"(?P<n>\d+) by (?P<tp>\d+)").unwrap();
        let caps = re.captures("28 by 8").unwrap();
        let spec = LaunchSpec::default();
        let r = tp_divisor(&ctx_for(&caps, &spec, PhaseId::Preflight));
        assert_eq!(r[0].changes, vec![set("--tp-size", 7)]);
    }
}
