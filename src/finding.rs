//! Findings (the unit of diagnosis) and remedies (typed changes to a launch spec).
//!
//! `check`, the engine and log replay all report problems as `Finding`s with the same stable
//! ids, so tools and tests can depend on them. A `Remedy` never touches the user's files: it
//! only changes the `LaunchSpec` (flags, environment, in-memory config overrides).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::phase::PhaseId;
use crate::spec::SpecChange;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// Which input a piece of evidence comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    Target,
    Draft,
    Launch,
    Log,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Target => "target",
            Side::Draft => "draft",
            Side::Launch => "launch",
            Side::Log => "log",
        }
    }
}

/// One fact behind a finding: a value at a key of a file (or a line of a log).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub side: Side,
    /// The file the value was read from (a config.json, a safetensors file, a log), or a
    /// description of the launch input such as `--context-length`.
    pub file: String,
    /// A JSON pointer (`/text_config/max_position_embeddings`), a tensor name, a flag, an env
    /// var name, or `line N` for logs.
    pub key: String,
    pub value: Value,
}

impl Evidence {
    pub fn new(side: Side, file: impl Into<String>, key: impl Into<String>, value: impl Into<Value>) -> Self {
        Evidence { side, file: file.into(), key: key.into(), value: value.into() }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Remedy {
    /// Stable kebab-case id, usable with `--apply`.
    pub id: String,
    /// The main launch key this remedy changes (a flag or env var name).
    pub key: String,
    pub description: String,
    pub changes: Vec<SpecChange>,
}

impl Remedy {
    pub fn new(id: &str, key: &str, description: impl Into<String>, changes: Vec<SpecChange>) -> Self {
        Remedy { id: id.to_string(), key: key.to_string(), description: description.into(), changes }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable kebab-case id, e.g. `context-length-exceeds-draft`.
    pub id: String,
    pub severity: Severity,
    /// The start-up phase that would fail (or did fail) because of this.
    pub phase: PhaseId,
    pub message: String,
    pub evidence: Vec<Evidence>,
    pub remedies: Vec<Remedy>,
    /// The TP rank whose lines showed it, where a multi-rank log names one (replay): each
    /// rank's copy is an event of its own, and the console shows them as one finding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
}

impl Finding {
    pub fn new(id: &str, severity: Severity, phase: PhaseId, message: impl Into<String>) -> Self {
        Finding { id: id.to_string(), severity, phase, message: message.into(), evidence: Vec::new(), remedies: Vec::new(), rank: None }
    }

    pub fn with_evidence(mut self, evidence: Evidence) -> Self {
        self.evidence.push(evidence);
        self
    }

    pub fn with_remedy(mut self, remedy: Remedy) -> Self {
        self.remedies.push(remedy);
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    pub fn remedy(&self, id: &str) -> Option<&Remedy> {
        self.remedies.iter().find(|r| r.id == id)
    }
}

/// Exit status shared by `check` and `launch`: 0 clean (warnings allowed), 1 errors found,
/// 2 inputs unreadable.
pub fn exit_code(findings: &[Finding]) -> i32 {
    if findings.iter().any(|f| f.id == UNREADABLE_INPUT) {
        2
    } else if findings.iter().any(Finding::is_error) {
        1
    } else {
        0
    }
}

/// The finding id for a missing or malformed input file.
pub const UNREADABLE_INPUT: &str = "unreadable-input";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finding_json_shape_matches_the_check_contract() {
        let f = Finding::new("context-length-exceeds-draft", Severity::Error, PhaseId::DrafterInit, "too long")
            .with_evidence(Evidence::new(Side::Target, "t/config.json", "/max_position_embeddings", 262144))
            .with_remedy(Remedy::new(
                "clamp-context-length",
                "--context-length",
                "use the drafter's length",
                vec![SpecChange::SetFlag { flag: "--context-length".into(), value: "131072".into() }],
            ));
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["id"], "context-length-exceeds-draft");
        assert_eq!(v["severity"], "error");
        assert_eq!(v["phase"], "drafter-init");
        assert_eq!(v["evidence"][0]["side"], "target");
        assert_eq!(v["evidence"][0]["key"], "/max_position_embeddings");
        assert_eq!(v["evidence"][0]["value"], 262144);
        assert_eq!(v["remedies"][0]["changes"][0]["op"], "set-flag");
        assert_eq!(v["remedies"][0]["changes"][0]["flag"], "--context-length");
        let back: Finding = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn exit_codes() {
        let warn = Finding::new("rope-mismatch", Severity::Warning, PhaseId::Preflight, "");
        let err = Finding::new("vocab-mismatch", Severity::Error, PhaseId::Preflight, "");
        let bad = Finding::new(UNREADABLE_INPUT, Severity::Error, PhaseId::Preflight, "");
        assert_eq!(exit_code(&[]), 0);
        assert_eq!(exit_code(std::slice::from_ref(&warn)), 0);
        assert_eq!(exit_code(&[warn.clone(), err.clone()]), 1);
        assert_eq!(exit_code(&[err, bad]), 2);
    }
}
