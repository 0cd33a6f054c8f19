//! `specdeck launch …`: the console on a TTY, else headless, over the in-process engine.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::flags::LaunchFlags;
use crate::console::session::{run_session, SessionConfig};
use crate::console::EngineControl;
use crate::engine::handle::EngineHandle;
use crate::engine::request::PreflightFn;
use crate::event::EventSink;
use crate::spec::LaunchSpec;

#[derive(Args, Debug)]
pub struct LaunchArgs {
    #[command(flatten)]
    flags: LaunchFlags,
    /// Record every event as JSONL.
    #[arg(long, value_name = "FILE")]
    event_log: Option<PathBuf>,
    /// A prompt to generate once the engine is ready.
    #[arg(long)]
    prompt: Option<String>,
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// Send prompts through the tokenizer's chat template (`c` toggles it in the console).
    #[arg(long)]
    chat: bool,
    /// Console layout name (layouts/*.toml) or path.
    #[arg(long)]
    layout: Option<String>,
    /// Keymap file (default: $XDG_CONFIG_HOME/specdeck/keymap.toml when present).
    #[arg(long, value_name = "FILE")]
    keymap: Option<PathBuf>,
    /// A pasted launch command, as for `check`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

pub fn run(args: LaunchArgs, headless: bool) -> anyhow::Result<i32> {
    let spec = args.flags.to_spec(LaunchSpec::from_words(&args.command)?)?;
    let config = SessionConfig {
        spec,
        apply: args.flags.apply,
        prompt: args.prompt,
        max_new_tokens: args.max_new_tokens,
        layout: args.layout,
        keymap: args.keymap,
        event_log: args.event_log,
        headless,
        replay: None,
        chat: args.chat,
    };
    run_session(config, start_engine)
}

/// The in-process engine behind the console (CONTRACTS.md 1 and 2), with the full
/// preflight rule set run in its preflight phase.
pub(super) fn start_engine(sink: EventSink) -> anyhow::Result<Option<Box<dyn EngineControl>>> {
    let preflight: PreflightFn = Arc::new(crate::preflight::check_spec);
    Ok(Some(Box::new(EngineHandle::spawn(sink, preflight))))
}
