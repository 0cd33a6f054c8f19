//! `specdeck replay LOG`: the console on a TTY (the same panes a live launch shows, fed by
//! the replay producer), else the headless timeline or `--json`.

use clap::Args;

use crate::console::app::ReplaySource;
use crate::console::session::{has_tty, run_session, SessionConfig};
use crate::event::LogLevel;
use crate::finding_text::ColorChoice;
use crate::replay::{self, HeadlessOptions, ReplayOptions, Source};

pub const AFTER_HELP: &str = "\
Examples:
  specdeck replay server.log
  specdeck replay --follow --headless /var/log/sglang.log
  kubectl logs pod/sglang-0 | specdeck replay --json -

Exit status: 0 the launch got ready, 1 it failed (the diagnosis says why), 2 an unreadable log or a
bad flag value, 3 the log ends before either (text and --json alike).";

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The log file, or - for standard input.
    log: String,
    /// Print the timeline instead of drawing the console, even on a TTY.
    #[arg(long)]
    headless: bool,
    /// Keep reading as the file grows (survives truncation and rotation).
    #[arg(long)]
    follow: bool,
    /// Print JSON instead of the timeline text.
    #[arg(long)]
    json: bool,
    /// Replay speed relative to the recorded times (0 = as fast as possible).
    #[arg(long, default_value_t = 0.0)]
    speed: f64,
}

/// `headless` is also true for `specdeck --headless replay`.
pub fn run(args: &ReplayArgs, headless: bool, color: ColorChoice) -> anyhow::Result<i32> {
    replay::check_speed(args.speed)?;
    let source = Source::parse(&args.log);
    if args.json || headless || args.headless || !has_tty() {
        return replay::command(&source, &HeadlessOptions { follow: args.follow, speed: args.speed, json: args.json });
    }
    let opts = ReplayOptions { follow: args.follow, speed: args.speed, logs: true };
    let replay = ReplaySource { file: source.label(), following: args.follow };
    let config = SessionConfig { max_new_tokens: 64, replay: Some(replay), color, ..SessionConfig::default() };
    run_session(config, move |sink| {
        std::thread::spawn(move || {
            if let Err(e) = replay::produce(&source, &opts, &sink) {
                sink.log(LogLevel::Error, "replay", format!("{e:#}"));
            }
        });
        Ok(None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;

    #[test]
    fn a_session_without_an_engine_does_not_sample_this_machines_gpus() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.jsonl");
        let config = SessionConfig { headless: true, event_log: Some(log.clone()), ..SessionConfig::default() };
        let code = run_session(config, |sink| {
            // Late enough for a sampler, had one started, to have reported this machine.
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(300));
                sink.emit(Event::Ready { elapsed_s: 0.1, reused_target: false });
            });
            Ok(None)
        })
        .unwrap();
        assert_eq!(code, 0);
        let recorded = std::fs::read_to_string(&log).unwrap();
        assert!(recorded.contains("\"type\":\"ready\""), "{recorded}");
        assert!(!recorded.contains("\"type\":\"telemetry\""), "{recorded}");
    }
}
