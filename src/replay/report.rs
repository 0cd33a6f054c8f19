//! The replay's summary, folded from the event stream itself (so a JSONL replay and a text
//! replay are summarised by the same code): phase spans with their lines and times, the
//! findings, the outcome, the mean accept length.

use serde::Serialize;

use crate::event::{Event, PhaseState, TimedEvent};
use crate::finding::Finding;
use crate::phase::PhaseId;

use super::detect::Format;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ready,
    Failed,
    Incomplete,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ready => "ready",
            Outcome::Failed => "failed",
            Outcome::Incomplete => "incomplete",
        }
    }

    /// `replay`'s exit status: 0 ready, 1 failed, 3 incomplete.
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Ready => 0,
            Outcome::Failed => 1,
            Outcome::Incomplete => 3,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseSpan {
    pub phase: PhaseId,
    /// `started` while the log has not ended it.
    pub state: PhaseState,
    pub start_line: u64,
    pub end_line: Option<u64>,
    pub start_time: f64,
    pub end_time: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayReport {
    pub file: String,
    pub format: Format,
    pub engine_version_guess: Option<String>,
    pub lines: u64,
    pub phases: Vec<PhaseSpan>,
    pub findings: Vec<Finding>,
    /// Findings past `MAX_FINDINGS`, counted but not kept (a recording of millions of them).
    #[serde(skip_serializing_if = "is_zero")]
    pub findings_left_out: u64,
    #[serde(rename = "final")]
    pub outcome: Outcome,
    pub accept_len: Option<f64>,
}

/// The findings a report keeps; a text log reports each kind once, far fewer than this.
pub const MAX_FINDINGS: usize = 1000;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Folds events, in order, into the report.
#[derive(Debug)]
pub struct ReportBuilder {
    phases: Vec<PhaseSpan>,
    findings: Vec<Finding>,
    findings_left_out: u64,
    outcome: Outcome,
    accept_len: Option<f64>,
}

impl Default for ReportBuilder {
    fn default() -> Self {
        ReportBuilder { phases: Vec::new(), findings: Vec::new(), findings_left_out: 0, outcome: Outcome::Incomplete, accept_len: None }
    }
}

impl ReportBuilder {
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    pub fn observe(&mut self, line: u64, ev: &TimedEvent) {
        match &ev.event {
            // A relaunch: the timeline and the outcome are the new attempt's; findings stay.
            Event::Launch { .. } => {
                self.phases.clear();
                self.outcome = Outcome::Incomplete;
            }
            Event::Phase { phase, state: PhaseState::Started, .. } => {
                // A second start of a phase is a new run in the same file (a restarted server).
                self.phases.retain(|s| s.phase != *phase);
                self.phases.push(PhaseSpan {
                    phase: *phase,
                    state: PhaseState::Started,
                    start_line: line,
                    end_line: None,
                    start_time: ev.t,
                    end_time: None,
                });
            }
            Event::Phase { phase, state, .. } => {
                let span = match self.phases.iter_mut().find(|s| s.phase == *phase) {
                    Some(span) => span,
                    None => {
                        self.phases.push(PhaseSpan {
                            phase: *phase,
                            state: *state,
                            start_line: line,
                            end_line: None,
                            start_time: ev.t,
                            end_time: None,
                        });
                        self.phases.last_mut().expect("just pushed")
                    }
                };
                span.state = *state;
                span.end_line = Some(line);
                span.end_time = Some(ev.t);
                match (phase, state) {
                    (_, PhaseState::Failed) => self.outcome = Outcome::Failed,
                    (PhaseId::Ready, PhaseState::Done) => self.outcome = Outcome::Ready,
                    _ => {}
                }
            }
            Event::Ready { .. } => self.outcome = Outcome::Ready,
            Event::Exit { code, .. } if *code != 0 => self.outcome = Outcome::Failed,
            // Another rank's copy of a finding is the same finding.
            Event::Finding(f) if self.findings.iter().any(|seen| is_rank_copy(seen, f)) => {}
            Event::Finding(_) if self.findings.len() == MAX_FINDINGS => self.findings_left_out += 1,
            Event::Finding(f) => self.findings.push(f.clone()),
            Event::Stats(s) if s.mean_accept_length > 0.0 => self.accept_len = Some(s.mean_accept_length),
            _ => {}
        }
    }

    pub fn build(self, file: String, format: Format, engine_version_guess: Option<String>, lines: u64) -> ReplayReport {
        ReplayReport {
            file,
            format,
            engine_version_guess,
            lines,
            phases: self.phases,
            findings: self.findings,
            findings_left_out: self.findings_left_out,
            outcome: self.outcome,
            accept_len: self.accept_len.map(|a| (a * 1000.0).round() / 1000.0),
        }
    }
}

/// `f` is `seen` again, as another TP rank reported it.
pub fn is_rank_copy(seen: &Finding, f: &Finding) -> bool {
    seen.id == f.id && seen.phase == f.phase && seen.severity == f.severity && seen.rank != f.rank
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::LaunchSpec;

    fn at(t: f64, event: Event) -> TimedEvent {
        TimedEvent { t, event }
    }

    fn phase(p: PhaseId, state: PhaseState) -> Event {
        Event::Phase { phase: p, state, detail: None }
    }

    #[test]
    fn spans_outcome_and_relaunch() {
        let mut b = ReportBuilder::default();
        b.observe(1, &at(0.0, phase(PhaseId::Preflight, PhaseState::Started)));
        b.observe(2, &at(0.5, phase(PhaseId::Preflight, PhaseState::Failed)));
        assert_eq!(b.outcome(), Outcome::Failed);
        b.observe(3, &at(1.0, Event::Launch { attempt: 2, spec: LaunchSpec::default() }));
        assert_eq!(b.outcome(), Outcome::Incomplete);
        b.observe(4, &at(1.0, phase(PhaseId::Warmup, PhaseState::Done)));
        b.observe(5, &at(2.0, Event::Ready { elapsed_s: 1.0, reused_target: true }));
        let r = b.build("x".into(), Format::Jsonl, None, 5);
        assert_eq!(r.outcome, Outcome::Ready);
        assert_eq!(r.phases.len(), 1);
        let warmup = &r.phases[0];
        assert_eq!((warmup.start_line, warmup.end_line, warmup.state), (4, Some(4), PhaseState::Done));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["final"], "ready");
        assert_eq!(json["format"], "jsonl");
        assert_eq!(json["phases"][0]["phase"], "warmup");
    }
}
