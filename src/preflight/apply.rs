//! `--apply FIX_ID` (repeatable): each id is looked up among the remedies of the findings
//! for the spec as it stands, applied, and the spec re-checked before the next id.

use crate::finding::Finding;
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

/// Apply `ids` in order, re-checking with `check` before each.
pub fn apply_all(spec: &mut LaunchSpec, ids: &[String], check: impl Fn(&LaunchSpec) -> Vec<Finding>) -> Result<Vec<Applied>, ApplyError> {
    let mut applied = Vec::new();
    for id in ids {
        let findings = check(spec);
        let Some(remedy) = findings.iter().find_map(|f| f.remedy(id)) else {
            return Err(ApplyError::Unknown { id: id.clone(), available: Report::new(findings).remedy_ids() });
        };
        spec.apply_remedy(id, &remedy.changes).map_err(|source| ApplyError::Spec { id: id.clone(), source })?;
        applied.push(Applied { id: id.clone(), changes: remedy.changes.clone() });
    }
    Ok(applied)
}
