//! `draft-layers`: an EAGLE-3 drafter with `num_hidden_layers` ≠ 1.
//!
//! SGLang 0.4.10–0.5.9 raise `ValueError("EAGLE3 currently only supports 1 layer")` while
//! building the drafter (SpecForge#129); 0.5.23 builds N layers, and older versions silently
//! ignore the extra ones. specdeck's engine runs the single fused layer.

use serde_json::Value;

use crate::finding::{Finding, Severity, Side};
use crate::phase::PhaseId;
use crate::preflight::{RuleContext, RuleResult};

pub const ID: &str = "draft-layers";

/// transformers' `LlamaConfig` default, which applies when the key is absent.
const LLAMA_CONFIG_DEFAULT_LAYERS: u64 = 32;

pub fn check(ctx: &RuleContext) -> RuleResult {
    let Some(draft) = ctx.eagle3_draft() else { return Ok(Vec::new()) };
    let (layers, evidence) = match draft.effective.num_hidden_layers()? {
        Some(f) if f.value == 1 => return Ok(Vec::new()),
        Some(f) => (f.value, ctx.field_evidence(Side::Draft, &f)),
        None => (LLAMA_CONFIG_DEFAULT_LAYERS, ctx.draft_evidence("/num_hidden_layers", Value::Null)),
    };
    let absent = if evidence.value.is_null() { " (absent, so LlamaConfig's default)" } else { "" };
    Ok(vec![Finding::new(
        ID,
        Severity::Error,
        PhaseId::DrafterLoad,
        format!(
            "The EAGLE-3 drafter has {layers} decoder layers{absent}. SGLang 0.4.10–0.5.9 raise \"EAGLE3 currently \
             only supports 1 layer\" while building it; specdeck's engine runs one fused layer. Use a drafter \
             exported with num_hidden_layers 1."
        ),
    )
    .with_evidence(evidence)])
}
