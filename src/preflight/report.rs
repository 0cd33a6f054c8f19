//! The result of a check: the findings and the exit status, with the `--json` form
//! `{"findings":[{"id","severity","phase","message","evidence":[{"side","file","key","value"}],
//! "remedies":[{"id","key","description","changes"}]}],"not_checked":[{"flag","value"}],
//! "fixed_command":TEXT|null,"exit":N}`.

use serde::Serialize;
use serde_json::json;

use crate::finding::{exit_code, Finding, Severity};
use crate::preflight::not_checked;
use crate::spec::LaunchSpec;

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

    /// `check --json`: the findings, the launch's flags no rule checks, the fixed launch line
    /// (null when no fix was applied) and the exit status.
    pub fn check_json(&self, spec: &LaunchSpec, fixed_command: Option<String>) -> String {
        let unchecked: Vec<_> = not_checked(spec).into_iter().map(|(flag, value)| json!({"flag": flag, "value": value})).collect();
        let v = json!({"findings": self.findings, "not_checked": unchecked, "fixed_command": fixed_command, "exit": self.exit});
        v.to_string()
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
