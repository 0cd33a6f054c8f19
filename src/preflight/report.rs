//! The result of a check: the findings and the exit status, with the `--json` form
//! `{"findings":[{"id","severity","phase","message","evidence":[{"side","file","key","value"}],
//! "remedies":[{"id","key","description","changes"}]}],"exit":N}`.

use serde::Serialize;

use crate::finding::{exit_code, Finding, Severity};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// 0 no errors (warnings allowed), 1 errors, 2 unreadable input.
    pub exit: i32,
}

impl Report {
    pub fn new(findings: Vec<Finding>) -> Report {
        let exit = exit_code(&findings);
        Report { findings, exit }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("findings always serialize")
    }

    pub fn count(&self, severity: Severity) -> usize {
        self.findings.iter().filter(|f| f.severity == severity).count()
    }

    /// Remedy ids on offer, in order, without repeats.
    pub fn remedy_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = Vec::new();
        for r in self.findings.iter().flat_map(|f| &f.remedies) {
            if !ids.contains(&r.id) {
                ids.push(r.id.clone());
            }
        }
        ids
    }
}
