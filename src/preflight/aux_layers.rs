//! `aux-layer-out-of-range`: the target layers an EAGLE-3 drafter reads must exist.
//!
//! SGLang captures the input of layer `id + 1` for each `eagle_aux_hidden_state_layer_ids`
//! entry ("for the ith layer, it takes the output of the (i-1)th layer"), and
//! `[2, L/2, L-3]` when the drafter names none (eagle3_spec §2.1). A capture index outside
//! the target's layers never fires: fewer hidden states reach `fc`, and the first request
//! fails with a shape error (or, silently, the wrong layers are read).

use serde_json::Value;

use crate::finding::{Finding, Severity, Side};
use crate::phase::PhaseId;
use crate::preflight::{RuleContext, RuleResult};

pub const ID: &str = "aux-layer-out-of-range";

const IDS_POINTER: &str = "/eagle_config/eagle_aux_hidden_state_layer_ids";

/// SGLang's capture indices (inputs of these layers) for an L-layer target. In i128, so
/// any u64 layer count and i64 id is exact (never wrapped or saturated in a message).
pub fn capture_layers(layer_ids: Option<&[i64]>, layers: u64) -> Vec<i128> {
    let l = i128::from(layers);
    match layer_ids {
        Some(ids) => ids.iter().map(|id| i128::from(*id) + 1).collect(),
        None => vec![2, l / 2, l - 3],
    }
}

pub fn check(ctx: &RuleContext) -> RuleResult {
    let Some(draft) = ctx.eagle3_draft() else { return Ok(Vec::new()) };
    let layers = ctx.target.config.require_u64("num_hidden_layers")?;
    let ids = draft.effective.eagle_aux_layer_ids()?;
    let capture = capture_layers(ids.as_ref().map(|f| f.value.as_slice()), layers.value);
    let last = i128::from(layers.value) - 1;
    let outside: Vec<i128> = capture.iter().copied().filter(|c| *c < 0 || *c > last).collect();
    if outside.is_empty() {
        return Ok(Vec::new());
    }
    let (source, draft_ev) = match &ids {
        Some(f) => (format!("{} = {:?} (+1, SGLang's convention)", f.pointer, f.value), ctx.field_evidence(Side::Draft, f)),
        None => (format!("SGLang's default [2, L/2, L-3] for L = {}", layers.value), ctx.draft_evidence(IDS_POINTER, Value::Null)),
    };
    Ok(vec![Finding::new(
        ID,
        Severity::Error,
        PhaseId::Warmup,
        format!(
            "The drafter reads the inputs of target layers {capture:?} ({source}), but the target has {} layers \
             (0–{last}): {outside:?} never fire. Fewer hidden states reach fc and the first request fails with a \
             shape error. SGLang does not check this at start-up.",
            layers.value
        ),
    )
    .with_evidence(draft_ev)
    .with_evidence(ctx.field_evidence(Side::Target, &layers))])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_adds_one_to_configured_ids() {
        // eagle3_spec §2.1 worked examples.
        assert_eq!(capture_layers(Some(&[2, 30, 58]), 61), vec![3, 31, 59]);
        assert_eq!(capture_layers(Some(&[1, 17, 33]), 36), vec![2, 18, 34]);
        assert_eq!(capture_layers(None, 32), vec![2, 16, 29]);
        assert_eq!(capture_layers(None, 80), vec![2, 40, 77]);
    }
}
