//! `hidden-size-mismatch`: the drafter consumes target hidden states of the wrong width.
//!
//! The drafter reads `target_hidden_size` (else `hidden_size`) as the width of each target
//! hidden state; `fc.weight` is `[H, n_aux × Ht]` (eagle3_spec §1.3). SGLang checks none of
//! this at start-up: the mismatch surfaces as a torch shape error on the first request
//! (failure_catalogue §1.4-F).

use serde_json::json;

use crate::finding::{Evidence, Finding, Severity, Side};
use crate::phase::PhaseId;
use crate::preflight::inputs::DRAFT_EMBED_NAMES;
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::Algorithm;

pub const ID: &str = "hidden-size-mismatch";

pub fn check(ctx: &RuleContext) -> RuleResult {
    let Some(draft) = ctx.eagle_draft() else { return Ok(Vec::new()) };
    let cfg = &draft.effective;
    let target_hidden = ctx.target.config.require_u64("hidden_size")?;
    let target_ev = ctx.field_evidence(Side::Target, &target_hidden);
    let Some(draft_hidden) = cfg.hidden_size()? else {
        return Ok(vec![finding(PhaseId::DrafterLoad, "The drafter's config.json has no hidden_size.".into())
            .with_evidence(ctx.draft_evidence("/hidden_size", serde_json::Value::Null))
            .with_evidence(target_ev)]);
    };
    let consumed = cfg.target_hidden_size()?.unwrap_or_else(|| draft_hidden.clone());
    let ht = target_hidden.value;
    let mut findings = Vec::new();
    if consumed.value != ht {
        findings.push(
            finding(
                PhaseId::Warmup,
                format!(
                    "The drafter expects target hidden states of width {} ({}), but the target's hidden_size is {ht}. \
                     SGLang does not check this at start-up: the first request fails with a shape error in the \
                     drafter's fc (\"mat1 and mat2 shapes cannot be multiplied\").",
                    consumed.value, consumed.pointer
                ),
            )
            .with_evidence(target_ev.clone())
            .with_evidence(ctx.field_evidence(Side::Draft, &consumed)),
        );
    }
    if ctx.algorithm != Algorithm::Eagle3 || draft.files.checkpoint.is_none() {
        return Ok(findings);
    }
    let n_aux = cfg.eagle_aux_layer_ids()?.map(|ids| ids.value.len()).unwrap_or(3) as u128;
    // In u128: n_aux × a hostile width must be shown as the product it is, never wrapped.
    let expected = [u128::from(draft_hidden.value), n_aux * u128::from(ht)];
    match draft.files.tensor("fc.weight") {
        Some(fc) if fc.shape.iter().map(|d| *d as u128).ne(expected) => findings.push(
            finding(
                PhaseId::DrafterLoad,
                format!(
                    "fc.weight is {:?}, but an EAGLE-3 drafter of hidden_size {} over {n_aux} target hidden \
                     states of width {ht} needs {expected:?}.",
                    fc.shape, draft_hidden.value
                ),
            )
            .with_evidence(Evidence::new(Side::Draft, fc.file, "fc.weight", json!(fc.shape)))
            .with_evidence(target_ev.clone()),
        ),
        Some(_) => {}
        None => findings.push(
            finding(
                PhaseId::DrafterLoad,
                format!("The drafter's weights have no fc.weight, which an EAGLE-3 drafter needs ({expected:?})."),
            )
            .with_evidence(Evidence::new(Side::Draft, draft.files.dir.display().to_string(), "fc.weight", json!(null))),
        ),
    }
    let has_embed = DRAFT_EMBED_NAMES.iter().any(|n| draft.files.tensor(n).is_some());
    if draft_hidden.value != ht && !has_embed {
        findings.push(
            finding(
                PhaseId::DrafterInit,
                format!(
                    "The drafter's hidden_size ({}) differs from the target's ({ht}), so it cannot share the target's \
                     embedding (SGLang's set_embed skips sharing when target_hidden_size != hidden_size), and its \
                     weights have no embed_tokens.weight of its own.",
                    draft_hidden.value
                ),
            )
            .with_evidence(ctx.field_evidence(Side::Draft, &draft_hidden))
            .with_evidence(target_ev),
        );
    }
    Ok(findings)
}

fn finding(phase: PhaseId, message: String) -> Finding {
    Finding::new(ID, Severity::Error, phase, message)
}
