//! What `generate` and `bench` share: the launch spec with `--apply` resolved as `check`
//! resolves it, and the engine launched in this thread with every preflight rule, its
//! findings printed in the one text form on failure.

use std::sync::Arc;

use serde_json::{json, Value};

use super::flags::LaunchFlags;
use crate::engine::ranks::{engine_for, Serve};
use crate::engine::request::{Cancel, LaunchOutcome, PreflightFn};
use crate::event::{Event, EventReceiver, EventSink, LogLevel, PhaseTimer};
use crate::finding::{exit_code, Finding};
use crate::finding_text::{self, Paint};
use crate::phase::PhaseId;
use crate::preflight::apply::apply_all;
use crate::preflight::check_spec;
use crate::spec::LaunchSpec;

/// The spec the flags describe, with their `--apply FIX_ID` remedies applied.
pub(super) fn launch_spec(flags: &LaunchFlags) -> anyhow::Result<LaunchSpec> {
    let mut spec = flags.to_spec(LaunchSpec::default())?;
    apply_all(&mut spec, &flags.apply, check_spec)?;
    Ok(spec)
}

/// Seconds per phase that ran, in order, from the launch's events; log lines go to stderr.
pub(super) fn phase_seconds(rx: &mut EventReceiver) -> Vec<(PhaseId, f64)> {
    let mut timer = PhaseTimer::default();
    while let Ok(ev) = rx.try_recv() {
        if let Event::Log { level, source, line } = &ev.event {
            if *level >= LogLevel::Info {
                eprintln!("specdeck: {source}: {}", finding_text::escaped_keeping_lines(line));
            }
        }
        timer.observe(&ev);
    }
    timer.ended
}

pub(super) fn phases_json(phases: &[(PhaseId, f64)]) -> Value {
    phases.iter().map(|(p, s)| json!({"phase": p.name(), "seconds": s})).collect()
}

/// A finding on stderr, its fixes headed by `command` (`specdeck generate`).
fn print_finding(f: &Finding, command: &str) {
    eprint!("{}", finding_text::text(f, Paint { color: false }, Some(command)));
}

/// A launched engine (the CPU reference, one GPU, or one rank per GPU with `--tp-size`), or
/// the exit status of a failed launch (after printing why).
pub(super) fn start(spec: &LaunchSpec, command: &str) -> Result<(Box<dyn Serve>, EventReceiver), i32> {
    let (sink, mut rx) = EventSink::channel();
    // These commands keep the default signal dispositions: a signal ends the process at
    // once, so nothing needs to cancel a generation here.
    let mut engine = match engine_for(spec, &sink, &Cancel::default()) {
        Ok(e) => e,
        Err(f) => {
            phase_seconds(&mut rx);
            print_finding(&f, command);
            return Err(exit_code(std::slice::from_ref(&f)).max(1));
        }
    };
    let preflight: PreflightFn = Arc::new(check_spec);
    if matches!(engine.launch(spec, &preflight), LaunchOutcome::Ready { .. }) {
        return Ok((engine, rx));
    }
    drop(engine);
    let mut findings: Vec<Finding> = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        if let Event::Finding(f) = ev.event {
            print_finding(&f, command);
            findings.push(f);
        }
    }
    Err(exit_code(&findings).max(1))
}
