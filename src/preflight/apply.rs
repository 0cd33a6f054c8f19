//! `--apply FIX_ID` (repeatable), the one path every command takes: each id is looked up
//! among the remedies of the findings for the spec as it stands (`offered`), applied, and the
//! spec re-checked before the next id. The console looks its ids up the same way, once a
//! launch has reported the findings.

use crate::finding::{Finding, Remedy};
use crate::preflight::report::Report;
use crate::spec::{LaunchSpec, SpecChange, SpecError};

/// One remedy applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    pub id: String,
    pub changes: Vec<SpecChange>,
}

impl Applied {
    pub fn describe(&self) -> String {
        let changes: Vec<String> = self.changes.iter().map(SpecChange::describe).collect();
        format!("applied {}: {}", self.id, changes.join(", "))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("--apply {id}: no current finding offers this remedy; available: {}", if available.is_empty() { "none".to_string() } else { available.join(", ") })]
    Unknown { id: String, available: Vec<String> },
    #[error("--apply {id}: {source}")]
    Spec { id: String, source: SpecError },
}

/// The remedy `id` among those `findings` offer; the error names the ones they do offer.
pub fn offered<'a>(findings: &'a [Finding], id: &str) -> Result<&'a Remedy, ApplyError> {
    findings
        .iter()
        .find_map(|f| f.remedy(id))
        .ok_or_else(|| ApplyError::Unknown { id: id.to_string(), available: Report::new(findings.to_vec()).remedy_ids() })
}

/// Apply `ids` in order, re-checking with `check` before each.
pub fn apply_all(spec: &mut LaunchSpec, ids: &[String], check: impl Fn(&LaunchSpec) -> Vec<Finding>) -> Result<Vec<Applied>, ApplyError> {
    let mut applied = Vec::new();
    for id in ids {
        let findings = check(spec);
        let remedy = offered(&findings, id)?;
        spec.apply_remedy(id, &remedy.changes).map_err(|source| ApplyError::Spec { id: id.clone(), source })?;
        applied.push(Applied { id: id.clone(), changes: remedy.changes.clone() });
    }
    Ok(applied)
}
