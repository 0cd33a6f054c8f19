//! `unreadable-input`: a missing folder or file, bad JSON, a value of the wrong type, or a
//! truncated or invalid safetensors header. The launch cannot be judged, so `check` exits 2.

use crate::finding::{Evidence, Finding, Severity, Side, UNREADABLE_INPUT};
use crate::phase::PhaseId;
use crate::preflight::inputs::InputError;

pub const ID: &str = UNREADABLE_INPUT;

/// The finding for one unreadable input. The message is the error itself, which names the
/// file (and the line and column, key or tensor) and the reason.
pub fn finding(side: Side, error: &InputError) -> Finding {
    let side = if matches!(error, InputError::MissingFlag { .. }) { Side::Launch } else { side };
    // Weights fail where they would be loaded; configs and flags fail before anything runs.
    let phase = match (error.is_weights(), side) {
        (true, Side::Draft) => PhaseId::DrafterLoad,
        (true, _) => PhaseId::TargetLoad,
        (false, _) => PhaseId::Preflight,
    };
    Finding::new(ID, Severity::Error, phase, error.to_string()).with_evidence(Evidence::new(
        side,
        error.subject(),
        error.key(),
        error.value(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::checkpoint::CheckpointError;
    use serde_json::Value;
    use std::path::PathBuf;

    #[test]
    fn weights_fail_in_the_load_phase_of_their_side() {
        let e = InputError::Checkpoint(CheckpointError::BadHeader {
            file: PathBuf::from("d/model.safetensors"),
            reason: "the header length runs past the end of the file (truncated?)".into(),
        });
        let f = finding(Side::Draft, &e);
        assert_eq!((f.id.as_str(), f.phase), (ID, PhaseId::DrafterLoad));
        assert_eq!(f.evidence, vec![Evidence::new(Side::Draft, "d/model.safetensors", "", Value::Null)]);
        assert_eq!(
            f.message,
            "d/model.safetensors: invalid safetensors header: the header length runs past the end of the file (truncated?)"
        );
    }

    #[test]
    fn a_missing_flag_is_launch_evidence() {
        let f = finding(Side::Target, &InputError::MissingFlag { flag: "--model-path", what: "target model" });
        assert_eq!(f.evidence[0].side, Side::Launch);
        assert_eq!(f.evidence[0].file, "--model-path");
        assert_eq!(f.phase, PhaseId::Preflight);
    }
}
