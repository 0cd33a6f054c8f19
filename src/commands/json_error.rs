//! How `generate` and `bench` fail: the reason on stderr as ever and, with `--json`, one object
//! on stdout, `{"error": {"kind", "message", "findings"}}`, so that a script reading stdout
//! always gets JSON. The exit status is the same with and without `--json`.

use serde_json::{json, Value};

use crate::finding::Finding;

/// Exit status for a failure that is not a finding: bad input, an `--apply` id, the engine.
const EXIT_ERROR: i32 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Findings stopped the launch, before anything loaded or at a start-up phase.
    Preflight,
    /// An `--apply` id no remedy has, or one no finding of this launch offers.
    Apply,
    /// A flag value or an input file that cannot be used.
    Input,
    /// The engine failed after the launch.
    Engine,
    /// The server `bench --url` sends to could not be reached, or answered wrongly.
    Server,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Preflight => "preflight",
            Kind::Apply => "apply",
            Kind::Input => "input",
            Kind::Engine => "engine",
            Kind::Server => "server",
        }
    }
}

#[derive(Debug)]
pub(super) struct Failure {
    kind: Kind,
    message: String,
    /// For `Preflight`: the findings, already printed on stderr in the one text form.
    findings: Vec<Finding>,
    code: i32,
}

impl Failure {
    /// Findings stopped the launch; `code` is their exit status.
    pub fn refused(code: i32, findings: Vec<Finding>) -> Failure {
        let ids: Vec<&str> = findings.iter().map(|f| f.id.as_str()).collect();
        let message = format!("the launch stopped at {}: {}", plural(ids.len(), "finding"), ids.join(", "));
        Failure { kind: Kind::Preflight, message, findings, code }
    }

    /// The message is the error with its causes, as `main` prints an error.
    pub fn new(kind: Kind, error: impl Into<anyhow::Error>) -> Failure {
        Failure { kind, message: format!("{:#}", error.into()), findings: Vec::new(), code: EXIT_ERROR }
    }

    pub fn to_json(&self) -> Value {
        json!({"error": {"kind": self.kind.name(), "message": self.message, "findings": self.findings}})
    }

    /// Say why (stderr; stdout as well with `json`) and give the exit status.
    pub fn report(&self, json: bool) -> i32 {
        if self.kind != Kind::Preflight {
            eprintln!("specdeck: {}", self.message);
        }
        if json {
            println!("{}", self.to_json());
        }
        self.code
    }
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Severity;
    use crate::phase::PhaseId;

    #[test]
    fn the_object_names_the_kind_the_message_and_the_findings() {
        let f = Finding::new("hidden-size-mismatch", Severity::Error, PhaseId::Preflight, "fc expects 4096");
        let refused = Failure::refused(1, vec![f.clone()]);
        assert_eq!(refused.code, 1);
        let v = refused.to_json();
        assert_eq!(v["error"]["kind"], "preflight");
        assert_eq!(v["error"]["message"], "the launch stopped at 1 finding: hidden-size-mismatch");
        assert_eq!(v["error"]["findings"], json!([f]));
        let bad = Failure::new(Kind::Input, anyhow::anyhow!("p.jsonl: cannot read"));
        assert_eq!(bad.code, 2);
        assert_eq!(bad.to_json(), json!({"error": {"kind": "input", "message": "p.jsonl: cannot read", "findings": []}}));
    }
}
