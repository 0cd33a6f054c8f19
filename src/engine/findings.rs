//! The findings the engine raises itself: their ids, and an engine error as a finding that
//! cites the file and key or tensor it is about.

use serde_json::Value;

use crate::backend::BackendError;
use crate::engine::EngineError;
use crate::finding::{Evidence, Finding, Severity, Side, UNREADABLE_INPUT};
use crate::model::config::ConfigError;
use crate::phase::PhaseId;

pub const DEVICE_UNAVAILABLE: &str = "device-unavailable";
pub const UNSUPPORTED_ALGORITHM: &str = "unsupported-algorithm";
pub const OUT_OF_MEMORY: &str = "out-of-memory";
pub const BACKEND_ERROR: &str = "backend-error";

/// A finding for an engine error in `phase`, citing the file and key or tensor it names.
pub fn error_finding(side: Side, phase: PhaseId, e: &EngineError) -> Finding {
    let id = match e {
        EngineError::Backend(BackendError::OutOfMemory { .. }) => OUT_OF_MEMORY,
        EngineError::Backend(BackendError::Device(_)) | EngineError::Request(_) => BACKEND_ERROR,
        _ => UNREADABLE_INPUT,
    };
    let mut f = Finding::new(id, Severity::Error, phase, e.to_string());
    if let Some((file, key)) = e.location() {
        f = f.with_evidence(Evidence::new(side, file, key, quoted_value(e)));
    }
    f
}

/// The value a config error quotes (JSON text, or a number's digits), for its evidence;
/// null when it quotes none.
fn quoted_value(e: &EngineError) -> Value {
    match e {
        EngineError::Config(ConfigError::WrongType { value, .. } | ConfigError::OutOfRange { value, .. }) => {
            serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.clone()))
        }
        _ => Value::Null,
    }
}

/// A flag the launch cannot do without.
pub fn missing_flag(flag: &str, what: &str) -> Finding {
    Finding::new(UNREADABLE_INPUT, Severity::Error, PhaseId::Preflight, format!("{flag} is required: the {what}"))
        .with_evidence(Evidence::new(Side::Launch, flag, flag, Value::Null))
}
