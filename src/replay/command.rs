//! `specdeck replay LOG [--follow] [--json] [--speed X]`, headless: the timeline as it is
//! rebuilt, then the summary, or the report as JSON. (On a TTY the console shows the same
//! events instead: src/commands/replay.rs.)

use std::io::{self, Write};

use anyhow::bail;

use super::print::{render_event, render_summary};
use super::report::{is_rank_copy, Outcome};
use super::{run, ReplayOptions, Source};
use crate::event::Event;
use crate::finding::Finding;

/// How a headless replay reads and prints.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeadlessOptions {
    /// Keep reading as the file grows.
    pub follow: bool,
    /// Relative to the recorded times; 0 = as fast as possible.
    pub speed: f64,
    /// The report as JSON instead of the timeline text.
    pub json: bool,
}

/// The slowest pace accepted: slower, a recording of seconds would replay for years.
const MIN_SPEED: f64 = 1e-3;

/// `--speed`: 0 (as fast as possible), or a finite pace from `MIN_SPEED` up.
pub fn check_speed(speed: f64) -> anyhow::Result<()> {
    if !(speed == 0.0 || (MIN_SPEED..=f64::MAX).contains(&speed)) {
        bail!("--speed: expected 0 (as fast as possible) or a finite number from {MIN_SPEED} up, got {speed}");
    }
    Ok(())
}

/// Runs the command; returns the exit status (0 ready, 1 failed, 3 incomplete).
pub fn command(source: &Source, headless: &HeadlessOptions) -> anyhow::Result<i32> {
    let HeadlessOptions { follow, speed, json } = *headless;
    check_speed(speed)?;
    let opts = ReplayOptions { follow, speed, logs: false };
    let mut stdout = io::stdout().lock();
    // Write errors (a closed pipe) are not the replay's failure: the exit status still is.
    if json {
        // Following, the answer is known once the launch is ready or has failed.
        let report = run(source, &opts, &mut |_, _| {}, &mut |r| follow && r.outcome() != Outcome::Incomplete)?;
        let _ = writeln!(stdout, "{}", serde_json::to_string_pretty(&report)?);
        return Ok(report.outcome.exit_code());
    }
    let mut printed: Vec<Finding> = Vec::new();
    let report = run(
        source,
        &opts,
        &mut |line, ev| {
            // Another rank's copy of a finding is printed once, as the first rank's.
            if let Event::Finding(f) = &ev.event {
                if printed.iter().any(|seen| is_rank_copy(seen, f)) {
                    return;
                }
                printed.push(f.clone());
            }
            if let Some(text) = render_event(line, &ev) {
                let _ = writeln!(stdout, "{text}");
                let _ = stdout.flush();
            }
        },
        &mut |_| false,
    )?;
    let _ = write!(stdout, "{}", render_summary(&report));
    Ok(report.outcome.exit_code())
}
