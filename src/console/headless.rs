//! The no-TTY front end: prints the phases, the findings and the generated text as the
//! events arrive, and on failure a hint naming the `--apply` ids that would fix it.

use std::io::{self, Write};

use super::app::State;
use super::panes::fmt_secs;
use super::run::Frontend;
use crate::event::{Event, LogLevel, PhaseState, TimedEvent};
use crate::finding_text::{self, escaped_keeping_lines, Paint};
use crate::spec::SpecChange;

pub struct Printer<W: Write, E: Write> {
    out: W,
    err: E,
    /// Generated text is being written without a newline.
    mid_line: bool,
    gpu_reported: bool,
}

impl<W: Write, E: Write> Printer<W, E> {
    pub fn new(out: W, err: E) -> Self {
        Printer { out, err, mid_line: false, gpu_reported: false }
    }

    pub fn into_parts(self) -> (W, E) {
        (self.out, self.err)
    }

    fn end_line(&mut self) -> io::Result<()> {
        if std::mem::take(&mut self.mid_line) {
            writeln!(self.out)?;
        }
        Ok(())
    }
}

impl<W: Write, E: Write> Frontend for Printer<W, E> {
    fn on_event(&mut self, ev: &TimedEvent, state: &State) -> io::Result<()> {
        match &ev.event {
            Event::Token { text, .. } => {
                if !self.mid_line {
                    writeln!(self.out, "--- generated ---")?;
                    write!(self.out, "{}", state.generate().generation().prompt)?;
                }
                // The text comes from the tokenizer's files: it may hold escapes.
                write!(self.out, "{}", escaped_keeping_lines(text))?;
                self.mid_line = true;
                return self.out.flush();
            }
            Event::Launch { attempt, spec } => {
                self.end_line()?;
                let what = if *attempt > 1 { "relaunch" } else { "launch" };
                writeln!(self.out, "{what} #{attempt}: {spec}")?;
            }
            Event::Phase { phase, state: phase_state, detail } => {
                self.end_line()?;
                let elapsed = match (phase_state, state.phases().record(*phase).and_then(|r| r.started)) {
                    (PhaseState::Done | PhaseState::Failed, Some(start)) => format!(" ({})", fmt_secs(ev.t - start)),
                    _ => String::new(),
                };
                let word = match phase_state {
                    PhaseState::Started => "started",
                    PhaseState::Done => "done",
                    PhaseState::Failed => "FAILED",
                    PhaseState::Skipped => "skipped",
                };
                let detail = detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default();
                writeln!(self.out, "[{:>8.3}] {:<21} {word}{elapsed}{detail}", ev.t, phase.name())?;
            }
            Event::Finding(f) => {
                self.end_line()?;
                write!(self.out, "{}", finding_text::text(f, Paint { color: false }, None))?;
            }
            Event::RemedyApplied { id, changes } => {
                self.end_line()?;
                let what: Vec<String> = changes.iter().map(SpecChange::describe).collect();
                writeln!(self.out, "applied remedy {id}: {}", what.join("; "))?;
            }
            Event::Ready { elapsed_s, reused_target } => {
                self.end_line()?;
                let kept = if *reused_target { " (target kept resident)" } else { "" };
                writeln!(self.out, "ready in {}{kept}", fmt_secs(*elapsed_s))?;
            }
            Event::Stats(s) => {
                self.end_line()?;
                writeln!(
                    self.out,
                    "--- {} tokens, {:.1} tokens/s, mean accept length {:.2} ---",
                    s.tokens, s.tokens_per_s, s.mean_accept_length
                )?;
            }
            // Whether the server listens, and how each request ended (the queue's steps stay in the event log).
            Event::Serving { .. } | Event::RequestFinished { .. } => {
                self.end_line()?;
                writeln!(self.out, "{}", ev.event.request_line().unwrap_or_default())?;
            }
            Event::Log { level, source, line } if *level >= LogLevel::Warning => {
                self.end_line()?;
                let tag = if *level == LogLevel::Error { "error" } else { "warning" };
                writeln!(self.out, "[{tag}] {source}: {}", escaped_keeping_lines(line))?;
            }
            Event::Telemetry { gpus, note } if !self.gpu_reported => {
                self.gpu_reported = true;
                self.end_line()?;
                match note {
                    Some(n) if gpus.is_empty() => writeln!(self.out, "gpus: {n}")?,
                    _ => writeln!(self.out, "gpus: {}", gpus.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(", "))?,
                }
            }
            _ => {}
        }
        self.out.flush()
    }

    fn finish(&mut self, state: &State, code: i32) -> io::Result<()> {
        self.end_line()?;
        if code == 0 {
            return self.out.flush();
        }
        if code > 128 {
            writeln!(self.err, "specdeck: stopped by signal {} (exit {code})", code - 128)?;
            return self.err.flush();
        }
        let ids: Vec<&str> =
            state.diagnosis().findings().iter().filter(|f| f.is_error()).flat_map(|f| f.remedies.iter().map(|r| r.id.as_str())).collect();
        match ids.first() {
            Some(first) => {
                writeln!(self.err, "specdeck: the launch failed; to apply a remedy and continue, pass --apply {first}")?;
                for id in &ids[1..] {
                    writeln!(self.err, "          (or --apply {id})")?;
                }
            }
            None => writeln!(self.err, "specdeck: the launch failed (exit {code})")?,
        }
        self.err.flush()
    }
}
