//! `specdeck launch …`: the console on a TTY, else headless, over the in-process engine.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::catalog::known_remedies;
use super::flags::LaunchFlags;
use super::pasted::PastedLine;
use crate::console::session::{run_session, SessionConfig};
use crate::console::EngineControl;
use crate::engine::handle::EngineHandle;
use crate::engine::request::PreflightFn;
use crate::event::EventSink;
use crate::finding_text::ColorChoice;
use crate::server::control::ServingEngine;
use crate::server::options::ServeOptions;

pub const AFTER_HELP: &str = "\
Examples:
  specdeck launch --model-path T --speculative-draft-model-path D --speculative-algorithm EAGLE3
  specdeck launch --headless --model-path T --prompt 'Hello' --event-log run.jsonl
  specdeck launch --model-path T --speculative-draft-model-path D --apply clamp-context-length

Exit status: 0 quit (or, headless, ready with the prompt done), 1 the launch failed at a finding
(headless: with the --apply hint), 2 unreadable input, a bad flag value or an unknown --apply id,
130 Ctrl-C, 143 SIGTERM, 129 SIGHUP.";

#[derive(Args, Debug)]
pub struct LaunchArgs {
    #[command(flatten)]
    flags: LaunchFlags,
    /// Print the events instead of drawing the console, even on a TTY.
    #[arg(long)]
    headless: bool,
    /// Record every event as JSONL.
    #[arg(long, value_name = "FILE")]
    event_log: Option<PathBuf>,
    /// A prompt to generate once the engine is ready.
    #[arg(long)]
    prompt: Option<String>,
    /// Most tokens to generate for a prompt.
    #[arg(long, default_value_t = 64, value_name = "N")]
    max_new_tokens: usize,
    /// Send prompts through the tokenizer's chat template (`c` toggles it in the console).
    #[arg(long)]
    chat: bool,
    /// Console layout: default, compact, wide, or a layout file.
    #[arg(long, value_name = "NAME|FILE")]
    layout: Option<String>,
    /// Keymap file (default: $XDG_CONFIG_HOME/specdeck/keymap.toml when present).
    #[arg(long, value_name = "FILE")]
    keymap: Option<PathBuf>,
    /// Serve the OpenAI-compatible API on this port (SGLang's flag; a pasted line's counts too).
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// The address to serve on (default 127.0.0.1).
    #[arg(long, value_name = "ADDR")]
    host: Option<String>,
    /// Requests that may wait while one runs; beyond them the server answers 503.
    #[arg(long, value_name = "N")]
    max_queued_requests: Option<usize>,
    /// Record prompts and answers of served requests in the event log.
    #[arg(long)]
    log_requests: bool,
    #[command(flatten)]
    line: PastedLine,
}

/// `headless` is also true for `specdeck --headless launch`.
pub fn run(args: LaunchArgs, headless: bool, color: ColorChoice) -> anyhow::Result<i32> {
    known_remedies(&args.flags.apply)?;
    let mut spec = args.flags.to_spec(args.line.spec()?)?;
    // The serving flags are SGLang's, read by the server from the spec as a pasted line leaves them.
    let serving_flags = [
        ("--port", args.port.map(|p| p.to_string())),
        ("--host", args.host),
        ("--max-queued-requests", args.max_queued_requests.map(|n| n.to_string())),
    ];
    for (flag, value) in serving_flags {
        if let Some(v) = value {
            spec.set_flag(flag, &v)?;
        }
    }
    if args.log_requests && !spec.extra_flags.iter().any(|(f, _)| f == "--log-requests") {
        spec.extra_flags.push(("--log-requests".into(), None));
    }
    let serve = ServeOptions::from_spec(&spec).map_err(anyhow::Error::msg)?;
    let config = SessionConfig {
        spec,
        apply: args.flags.apply,
        prompt: args.prompt,
        max_new_tokens: args.max_new_tokens,
        layout: args.layout,
        keymap: args.keymap,
        event_log: args.event_log,
        headless: headless || args.headless,
        replay: None,
        color,
        chat: args.chat,
        serving: serve.is_some(),
    };
    match serve {
        Some(options) => run_session(config, |sink| serve_engine(sink, &options)),
        None => run_session(config, start_engine),
    }
}

/// The engine behind an HTTP server and the console together (src/server/).
fn serve_engine(sink: EventSink, options: &ServeOptions) -> anyhow::Result<Option<Box<dyn EngineControl>>> {
    let preflight: PreflightFn = Arc::new(crate::preflight::check_spec);
    Ok(Some(Box::new(ServingEngine::start(sink, preflight, options)?)))
}

/// The in-process engine behind the console (CONTRACTS.md 1 and 2), with the full
/// preflight rule set run in its preflight phase.
pub(super) fn start_engine(sink: EventSink) -> anyhow::Result<Option<Box<dyn EngineControl>>> {
    let preflight: PreflightFn = Arc::new(crate::preflight::check_spec);
    Ok(Some(Box::new(EngineHandle::spawn(sink, preflight))))
}
