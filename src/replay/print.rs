//! The headless replay output: one line per phase change, each finding in full (evidence and
//! remedies), then the timeline table and the outcome.

use std::fmt::Write;

use crate::event::{Event, PhaseState, TimedEvent};
use crate::finding::Finding;
use crate::finding_text::{self, Paint};

use super::report::ReplayReport;

const INDENT: &str = "                    ";

fn state_name(state: PhaseState) -> &'static str {
    match state {
        PhaseState::Started => "started",
        PhaseState::Done => "done",
        PhaseState::Failed => "failed",
        PhaseState::Skipped => "skipped",
    }
}

/// The line(s) printed for one event as it arrives, if any.
pub fn render_event(line: u64, ev: &TimedEvent) -> Option<String> {
    let at = format!("{:>8.1}s  line {:<6}", ev.t, line);
    match &ev.event {
        Event::Launch { attempt, spec } => Some(format!("{at}launch #{attempt}: {spec}")),
        Event::Phase { phase, state, detail } => {
            let detail = detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
            Some(format!("{at}{:<22}{}{detail}", phase.name(), state_name(*state)))
        }
        Event::Finding(f) => Some(format!("{at}{}", render_finding(f))),
        Event::Ready { elapsed_s, .. } => Some(format!("{at}ready after {elapsed_s:.1}s")),
        Event::Serving { .. } | Event::RequestFinished { .. } => ev.event.request_line().map(|l| format!("{at}{l}")),
        _ => None,
    }
}

/// The finding in the one text form (`finding_text`), its lines after the first indented
/// under the event's time and line.
fn render_finding(f: &Finding) -> String {
    let text = finding_text::text(f, Paint { color: false }, None);
    let mut lines = text.lines();
    let mut s = lines.next().unwrap_or_default().to_string();
    for line in lines {
        s.push('\n');
        if !line.is_empty() {
            s.push_str(INDENT);
            s.push_str(line);
        }
    }
    s
}

fn time_span(start: f64, end: Option<f64>) -> String {
    match end {
        Some(e) => format!("{start:.1}s → {e:.1}s"),
        None => format!("{start:.1}s →"),
    }
}

/// The timeline table and the outcome.
pub fn render_summary(r: &ReplayReport) -> String {
    let version = r.engine_version_guess.as_deref().map(|v| format!(" ({v})")).unwrap_or_default();
    let mut s = format!("replay of {}: {}{version}, {} lines\n", r.file, r.format.name(), r.lines);
    if !r.phases.is_empty() {
        let _ = writeln!(s, "  {:<22}{:<16}{:<22}state", "phase", "lines", "time");
        for p in &r.phases {
            let lines = match p.end_line {
                Some(end) => format!("{}–{end}", p.start_line),
                None => format!("{}–", p.start_line),
            };
            let _ = writeln!(s, "  {:<22}{:<16}{:<22}{}", p.phase.name(), lines, time_span(p.start_time, p.end_time), state_name(p.state));
        }
    }
    let mut ids: Vec<String> = r.findings.iter().map(|f| format!("{} ({})", f.id, f.severity.name())).collect();
    if r.findings_left_out > 0 {
        ids.push(format!("and {} more, not kept", r.findings_left_out));
    }
    if !ids.is_empty() {
        let _ = writeln!(s, "findings: {}", ids.join(", "));
    }
    let accept = r.accept_len.map_or("—".to_string(), |a| format!("{a:.2}"));
    let _ = writeln!(s, "final: {} (exit {}), accept len {accept}", r.outcome.name(), r.outcome.exit_code());
    s
}
