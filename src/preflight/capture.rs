//! `target-no-capture-support`: the target class cannot capture the aux hidden states an
//! EAGLE-3 drafter needs.
//!
//! Two facts decide it: whether specdeck's engine captures for the class (its targets), and
//! since which SGLang release the class has `set_eagle3_layers_to_capture` (the releases read
//! for failure_catalogue §1.4-B: 0.4.10, 0.5.2, 0.5.9, 0.5.23). SGLang versions in between
//! were not read, so "since" means "present in the first release read that has it".

use serde_json::Value;

use crate::finding::{Finding, Severity, Side};
use crate::phase::PhaseId;
use crate::preflight::{RuleContext, RuleResult};

pub const ID: &str = "target-no-capture-support";

/// Target classes whose aux-hidden-state capture specdeck's engine implements (the Llama,
/// Qwen2 and Qwen3 targets and the DeepSeek-V3 family of src/engine). Keep in step with the
/// engine's target list (`engine::target_model`).
pub const ENGINE_CAPTURE_CLASSES: &[&str] =
    &["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"];

/// The SGLang releases read, oldest first.
const SGLANG_RELEASES_READ: &[&str] = &["0.4.10", "0.5.2", "0.5.9", "0.5.23"];

/// (class, SGLang model file, first release read that has `set_eagle3_layers_to_capture`).
/// Subclasses inherit it (MistralForCausalLM from llama.py).
const SGLANG_CAPTURE: &[(&str, &str, &str)] = &[
    ("LlamaForCausalLM", "llama.py", "0.4.10"),
    ("MistralForCausalLM", "llama.py (inherited)", "0.4.10"),
    ("Qwen3ForCausalLM", "qwen3.py", "0.4.10"),
    ("Qwen3MoeForCausalLM", "qwen3_moe.py", "0.4.10"),
    ("Llama4ForConditionalGeneration", "mllama4.py", "0.4.10"),
    ("Qwen2ForCausalLM", "qwen2.py", "0.5.2"),
    ("Qwen2MoeForCausalLM", "qwen2_moe.py", "0.5.2"),
    ("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl.py", "0.5.2"),
    ("GptOssForCausalLM", "gpt_oss.py", "0.5.2"),
    ("DeepseekV2ForCausalLM", "deepseek_v2.py", "0.5.9"),
    ("DeepseekV3ForCausalLM", "deepseek_v2.py", "0.5.9"),
    ("Glm4MoeForCausalLM", "glm4_moe.py", "0.5.9"),
    ("BailingMoeForCausalLM", "bailing_moe.py", "0.5.9"),
    ("LongcatFlashForCausalLM", "longcat_flash.py", "0.5.9"),
    ("MiniMaxM2ForCausalLM", "minimax_m2.py", "0.5.9"),
    ("Qwen3NextForCausalLM", "qwen3_next.py", "0.5.9"),
    ("ApertusForCausalLM", "apertus.py", "0.5.9"),
    ("KimiK25ForConditionalGeneration", "kimi_k25.py", "0.5.23"),
    ("Qwen3VLForConditionalGeneration", "qwen3_vl.py", "0.5.23"),
    ("Gemma3ForCausalLM", "gemma3_causal.py", "0.5.23"),
    ("Gemma3ForConditionalGeneration", "gemma3_mm.py", "0.5.23"),
];

/// How SGLang fails for a class without the hook (catalogue §1.4-B): an AttributeError after
/// the target's graph capture up to 0.5.9; a ValueError before any capture in 0.5.23.
fn sglang_failure(class: &str, fails_in_0_5_23: bool) -> String {
    let attribute_error = format!(
        "AttributeError: '{class}' object has no attribute 'set_eagle3_layers_to_capture' right after the target's \
         CUDA graph capture"
    );
    if fails_in_0_5_23 {
        format!(
            "{attribute_error} (≤0.5.9), or \"Model {class} does not implement set_eagle3_layers_to_capture, which \
             EAGLE3 aux hidden-state capture requires.\" before it (0.5.23)"
        )
    } else {
        attribute_error
    }
}

pub fn check(ctx: &RuleContext) -> RuleResult {
    if ctx.eagle3_draft().is_none() {
        return Ok(Vec::new());
    }
    let class = ctx.target.config.architecture();
    let name = class.as_ref().map(|c| c.value.as_str()).unwrap_or("(no architectures)");
    let in_engine = ENGINE_CAPTURE_CLASSES.contains(&name);
    let sglang = SGLANG_CAPTURE.iter().find(|(c, _, _)| *c == name);
    let engine_note = format!(
        "specdeck's engine captures aux hidden states for {} targets{}.",
        ENGINE_CAPTURE_CLASSES.join(", "),
        if in_engine { ", this one included" } else { " only" }
    );
    let (severity, sglang_note) = match sglang {
        Some((_, _, since)) if in_engine && *since == SGLANG_RELEASES_READ[0] => return Ok(Vec::new()),
        Some((_, file, since)) => {
            let older: Vec<&str> = SGLANG_RELEASES_READ.iter().copied().take_while(|r| r != since).collect();
            let note = if older.is_empty() {
                format!("SGLang has set_eagle3_layers_to_capture for it ({file}) in every release read.")
            } else {
                format!(
                    "SGLang has set_eagle3_layers_to_capture for it since {since} ({file}); the releases read before \
                     it ({}) fail with {}.",
                    older.join(", "),
                    sglang_failure(name, false)
                )
            };
            (if in_engine { Severity::Info } else { Severity::Warning }, note)
        }
        None => (
            if in_engine { Severity::Warning } else { Severity::Error },
            format!(
                "No SGLang release read ({}) has set_eagle3_layers_to_capture for it: --speculative-algorithm EAGLE3 \
                 fails with {}. No flag or env var bypasses this.",
                SGLANG_RELEASES_READ.join(", "),
                sglang_failure(name, true)
            ),
        ),
    };
    let evidence = match &class {
        Some(c) => ctx.field_evidence(Side::Target, c),
        None => ctx.target_evidence("/architectures", Value::Null),
    };
    Ok(vec![Finding::new(
        ID,
        severity,
        PhaseId::TargetGraphCapture,
        format!("The target class {name} must capture three aux hidden states for the EAGLE-3 drafter. {sglang_note} {engine_note}"),
    )
    .with_evidence(evidence)])
}
