//! `rope-mismatch` (warning): the drafter's RoPE base differs from the target's.
//!
//! The drafter rotates its own queries and keys with its own `rope_theta`; absent, that is
//! 10000 (HF LlamaConfig, EAGLE, SpecForge), not the target's (eagle3_spec §1.2). A
//! difference is often how the drafter was trained, so this only warns and shows both: the
//! fault it catches is a drafter exported without the theta it was trained with.

use serde_json::Value;

use crate::finding::{Finding, Severity, Side};
use crate::model::config::ModelConfig;
use crate::phase::PhaseId;
use crate::preflight::{RuleContext, RuleResult};

pub const ID: &str = "rope-mismatch";

/// HF `LlamaConfig`'s `rope_theta` default.
pub const DEFAULT_ROPE_THETA: f64 = 10000.0;

pub fn check(ctx: &RuleContext) -> RuleResult {
    let Some(draft) = ctx.eagle_draft() else { return Ok(Vec::new()) };
    let read = |cfg: &ModelConfig| cfg.rope_theta().map(|f| (f.as_ref().map_or(DEFAULT_ROPE_THETA, |f| f.value), f));
    let (target_theta, target_field) = read(&ctx.target.config)?;
    let (draft_theta, draft_field) = read(&draft.effective)?;
    if draft_theta == target_theta {
        return Ok(Vec::new());
    }
    let shown = |theta: f64, explicit: bool| {
        if explicit {
            format!("{theta}")
        } else {
            format!("{theta} (absent: the default)")
        }
    };
    let evidence = |side: Side, field: &Option<crate::model::config::Field<f64>>| match field {
        Some(f) => ctx.field_evidence(side, f),
        None if side == Side::Draft => ctx.draft_evidence("/rope_theta", Value::Null),
        None => ctx.target_evidence("/rope_theta", Value::Null),
    };
    Ok(vec![Finding::new(
        ID,
        Severity::Warning,
        PhaseId::DrafterInit,
        format!(
            "The drafter's rope_theta is {} and the target's is {}. The drafter rotates positions with its own \
             theta, so this is right when it was trained that way (do not copy the target's); if it was exported \
             without its training theta, acceptance falls at longer positions.",
            shown(draft_theta, draft_field.is_some()),
            shown(target_theta, target_field.is_some()),
        ),
    )
    .with_evidence(evidence(Side::Target, &target_field))
    .with_evidence(evidence(Side::Draft, &draft_field))])
}
