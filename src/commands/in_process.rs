//! What `generate` and `bench` share: the launch spec with `--apply` resolved as `check`
//! resolves it, and the engine launched in this thread with every preflight rule, its
//! findings printed in the one text form on failure.

use std::sync::Arc;

use serde_json::{json, Value};

use super::catalog::known_remedies;
use super::flags::LaunchFlags;
use super::json_error::{Failure, Kind};
use crate::engine::ranks::{engine_for, Serve};
use crate::engine::request::{Cancel, LaunchOutcome, PreflightFn};
use crate::event::{Event, EventReceiver, EventSink, LogLevel, PhaseTimer};
use crate::finding::{exit_code, Finding};
use crate::finding_text::{self, ColorChoice, Paint};
use crate::phase::PhaseId;
use crate::preflight::apply::apply_all;
use crate::preflight::check_spec;
use crate::spec::LaunchSpec;

/// The spec the flags describe, with their `--apply FIX_ID` remedies applied.
pub(super) fn launch_spec(flags: &LaunchFlags) -> Result<LaunchSpec, Failure> {
    known_remedies(&flags.apply).map_err(|e| Failure::new(Kind::Apply, e))?;
    let mut spec = flags.to_spec(LaunchSpec::default()).map_err(|e| Failure::new(Kind::Input, e))?;
    apply_all(&mut spec, &flags.apply, check_spec).map_err(|e| Failure::new(Kind::Apply, e))?;
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

/// A launched engine (the CPU reference, one GPU, or one rank per GPU with `--tp-size`), or
/// the findings that stopped the launch (printed on stderr, their fixes headed by `command`,
/// `specdeck generate`).
pub(super) fn start(spec: &LaunchSpec, command: &str, color: ColorChoice) -> Result<(Box<dyn Serve>, EventReceiver), Failure> {
    let paint = Paint::for_stderr(color);
    let refused = |findings: Vec<Finding>| {
        for f in &findings {
            eprint!("{}", finding_text::text(f, paint, Some(command)));
        }
        Failure::refused(exit_code(&findings).max(1), findings)
    };
    let (sink, mut rx) = EventSink::channel();
    // These commands keep the default signal dispositions: a signal ends the process at
    // once, so nothing needs to cancel a generation here.
    let mut engine = match engine_for(spec, &sink, &Cancel::default()) {
        Ok(e) => e,
        Err(f) => {
            phase_seconds(&mut rx);
            return Err(refused(vec![f]));
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
            findings.push(f);
        }
    }
    Err(refused(findings))
}
