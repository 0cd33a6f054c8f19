//! `algorithm-mismatch`: `--speculative-algorithm` against the kind of drafter.
//!
//! The dangerous case is silent: an EAGLE-3 drafter under `EAGLE` starts without error, the
//! target captures no aux hidden states, `fc` is skipped, and acceptance stays near 1.0
//! token per step (sglang PR #21272; failure_catalogue §1.4-E). A missing flag is also
//! reported: SGLang needs it to speculate at all, and the other rules then assume the
//! algorithm the drafter implies.

use serde_json::{json, Value};

use crate::finding::{Finding, Remedy, Severity};
use crate::phase::PhaseId;
use crate::preflight::architecture::{DraftFamily, DraftKind};
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::{Algorithm, SpecChange};

pub const ID: &str = "algorithm-mismatch";
pub const SET_ALGORITHM: &str = "set-speculative-algorithm";
pub const UNSET_ALGORITHM: &str = "unset-speculative-algorithm";

const FLAG: &str = "--speculative-algorithm";

pub fn check(ctx: &RuleContext) -> RuleResult {
    let given = ctx.spec.speculative_algorithm.filter(|a| *a != Algorithm::None);
    let finding = match (&ctx.draft_kind, given) {
        (Some(kind), None) => Some(flag_missing(ctx, kind)),
        (Some(kind), Some(algo)) if algo != kind.family.algorithm() => Some(mismatch(ctx, kind, algo)),
        (None, Some(algo)) => no_drafter(ctx, algo)?,
        _ => None,
    };
    Ok(finding.into_iter().collect())
}

fn set_algorithm(algo: Algorithm) -> Remedy {
    Remedy::new(
        SET_ALGORITHM,
        FLAG,
        format!("Run the launch with {FLAG} {}.", algo.name()),
        vec![SpecChange::SetFlag { flag: FLAG.into(), value: algo.name().into() }],
    )
}

fn flag_missing(ctx: &RuleContext, kind: &DraftKind) -> Finding {
    let inferred = kind.family.algorithm();
    let given = ctx.spec.speculative_algorithm.map(|a| json!(a.name())).unwrap_or(Value::Null);
    Finding::new(
        ID,
        Severity::Warning,
        PhaseId::Preflight,
        format!(
            "A drafter is given but {FLAG} is {}: SGLang then runs the target alone and never loads the drafter. \
             The drafter is {} ({} = {}), so the other rules assumed {} — pass the flag so this check and the \
             launch agree.",
            if given.is_null() { "absent" } else { "NONE" },
            kind.family.describe(),
            kind.evidence.key,
            kind.evidence.value,
            inferred.name()
        ),
    )
    .with_evidence(ctx.launch_evidence(FLAG, given))
    .with_evidence(kind.evidence.clone())
    .with_remedy(set_algorithm(inferred))
}

fn mismatch(ctx: &RuleContext, kind: &DraftKind, algo: Algorithm) -> Finding {
    let (phase, consequence) = match (algo, kind.family) {
        (Algorithm::Eagle, DraftFamily::Eagle3) => (
            PhaseId::Ready,
            "SGLang starts without an error: the target captures no aux hidden states, the drafter's fc is skipped, \
             and it accepts about 1.0 token per step (sglang PR #21272), slower than no speculation.",
        ),
        (Algorithm::Eagle3, DraftFamily::Eagle) => (
            PhaseId::Warmup,
            "The target captures three aux hidden states (3×hidden) for a drafter whose fc takes [embedding; \
             hidden] (2×hidden): the shapes disagree at the first forward.",
        ),
        (Algorithm::Standalone, _) => (
            PhaseId::DrafterLoad,
            "STANDALONE runs the drafter as a full model from token ids, but an EAGLE drafter has no embedding or \
             input path of its own: it needs the target's hidden states.",
        ),
        _ => (
            PhaseId::DrafterInit,
            "The EAGLE workers call set_embed / hot_token_id on the drafter, which an ordinary model class does not \
             have (AttributeError, sglang#36528).",
        ),
    };
    Finding::new(
        ID,
        Severity::Error,
        phase,
        format!(
            "{FLAG} {} is used with {} ({} = {}). {consequence}",
            algo.name(),
            kind.family.describe(),
            kind.evidence.key,
            kind.evidence.value
        ),
    )
    .with_evidence(ctx.launch_evidence(FLAG, algo.name()))
    .with_evidence(kind.evidence.clone())
    .with_remedy(set_algorithm(kind.family.algorithm()))
}

/// A speculative algorithm without a drafter: only EAGLE on a target with bundled NextN/MTP
/// layers works (SGLang: "DeepSeek MTP does not require setting speculative_draft_model_path").
fn no_drafter(ctx: &RuleContext, algo: Algorithm) -> Result<Option<Finding>, crate::preflight::inputs::InputError> {
    let nextn = ctx.target.config.u64("num_nextn_predict_layers")?;
    if algo == Algorithm::Eagle && nextn.as_ref().is_some_and(|n| n.value > 0) {
        return Ok(None);
    }
    let mut f = Finding::new(
        ID,
        Severity::Error,
        PhaseId::DrafterInit,
        format!(
            "{FLAG} {} needs --speculative-draft-model-path. Without it SGLang reuses the target checkpoint as the \
             drafter and fails on the missing set_embed / hot_token_id (sglang#36528; made mandatory by PR #36593).",
            algo.name()
        ),
    )
    .with_evidence(ctx.launch_evidence(FLAG, algo.name()))
    .with_evidence(ctx.launch_evidence("--speculative-draft-model-path", Value::Null));
    if let Some(n) = nextn {
        f = f.with_evidence(ctx.field_evidence(crate::finding::Side::Target, &n));
    }
    Ok(Some(f.with_remedy(Remedy::new(
        UNSET_ALGORITHM,
        FLAG,
        "Run the target alone (no speculative decoding).",
        vec![SpecChange::UnsetFlag { flag: FLAG.into() }],
    ))))
}
