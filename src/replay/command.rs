//! `specdeck replay LOG [--follow] [--json] [--speed X]`, headless. (On a TTY the console
//! will show the same events; until it does, a TTY gets this output too.)

use std::io::{self, Write};

use anyhow::bail;

use crate::cli::ReplayArgs;

use super::print::{render_event, render_summary};
use super::report::Outcome;
use super::{run, ReplayOptions, Source};

/// Runs the command; returns the exit status (0 ready, 1 failed, 3 incomplete).
pub fn command(args: &ReplayArgs) -> anyhow::Result<i32> {
    if !(args.speed >= 0.0 && args.speed.is_finite()) {
        bail!("--speed: expected a number ≥ 0 (0 = as fast as possible), got {}", args.speed);
    }
    let source = Source::parse(&args.log);
    let opts = ReplayOptions { follow: args.follow, speed: args.speed, logs: false };
    let mut stdout = io::stdout().lock();
    // Write errors (a closed pipe) are not the replay's failure: the exit status still is.
    if args.json {
        // Following, the answer is known once the launch is ready or has failed.
        let follow = args.follow;
        let report = run(&source, &opts, &mut |_, _| {}, &mut |r| follow && r.outcome() != Outcome::Incomplete)?;
        let _ = writeln!(stdout, "{}", serde_json::to_string_pretty(&report)?);
        return Ok(report.outcome.exit_code());
    }
    let report = run(
        &source,
        &opts,
        &mut |line, ev| {
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
