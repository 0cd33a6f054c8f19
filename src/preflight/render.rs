//! Human text for a check: what was checked (and what not) and applied, each finding in the
//! one text form (`finding_text`), the fixed launch line, and a summary line with the exit
//! status.

use std::fmt::Write as _;

use crate::finding::Severity;
use crate::finding_text::{self, Paint};
use crate::preflight::apply::Applied;
use crate::preflight::not_checked;
use crate::preflight::report::Report;
use crate::spec::LaunchSpec;

/// The whole report: what was checked, what was applied, each finding, and a summary line.
pub fn text(report: &Report, spec: &LaunchSpec, applied: &[Applied], fixed_command: Option<&str>, paint: Paint) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "specdeck check");
    for (label, path) in [("target", &spec.model_path), ("draft", &spec.draft_model_path)] {
        if let Some(p) = path {
            let _ = writeln!(out, "  {label:<7}{}", finding_text::escaped(p));
        }
    }
    let _ = writeln!(out, "  launch {}", finding_text::escaped(&spec.to_string()));
    let unchecked: Vec<String> = not_checked(spec)
        .into_iter()
        .map(|(flag, value)| value.filter(|v| !v.is_empty()).map_or(flag.clone(), |v| format!("{flag} {v}")))
        .collect();
    if !unchecked.is_empty() {
        let _ = writeln!(out, "  not checked {}", finding_text::escaped(&unchecked.join(" ")));
    }
    for a in applied {
        let _ = writeln!(out, "  {}", a.describe());
    }
    out.push('\n');
    for f in &report.findings {
        out.push_str(&finding_text::text(f, paint, Some("specdeck check")));
        out.push('\n');
    }
    if let Some(line) = fixed_command {
        let _ = writeln!(out, "fixed command:");
        for l in line.lines() {
            let _ = writeln!(out, "{}", finding_text::escaped(l));
        }
        out.push('\n');
    }
    let count = |s: Severity, one: &str, many: &str| {
        let n = report.count(s);
        format!("{n} {}", if n == 1 { one } else { many })
    };
    let mut totals = vec![count(Severity::Error, "error", "errors"), count(Severity::Warning, "warning", "warnings")];
    if report.count(Severity::Info) > 0 {
        totals.push(count(Severity::Info, "note", "notes"));
    }
    let _ = writeln!(out, "{}: exit {}", totals.join(", "), report.exit);
    out
}
