//! `specdeck` with no subcommand: the embedded demo pair in the console, its default prompt
//! generated once the engine is ready.

use std::path::PathBuf;

use clap::Args;

use super::catalog::known_remedies;
use super::launch::start_engine;
use crate::console::session::{run_session, SessionConfig};
use crate::demo;
use crate::finding_text::ColorChoice;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Apply a remedy by id before launching the demo (repeatable).
    #[arg(long = "apply", value_name = "FIX_ID")]
    apply: Vec<String>,
    /// Record every event of the demo as JSONL.
    #[arg(long, value_name = "FILE")]
    event_log: Option<PathBuf>,
    /// Console layout for the demo: default, compact, wide, or a layout file.
    #[arg(long, value_name = "NAME|FILE")]
    layout: Option<String>,
    /// Keymap file for the demo (default: $XDG_CONFIG_HOME/specdeck/keymap.toml when present).
    #[arg(long, value_name = "FILE")]
    keymap: Option<PathBuf>,
}

pub fn run(args: DemoArgs, headless: bool, color: ColorChoice) -> anyhow::Result<i32> {
    known_remedies(&args.apply)?;
    let pair = demo::extract()?;
    let config = SessionConfig {
        spec: pair.spec(),
        apply: args.apply,
        prompt: Some(demo::DEFAULT_PROMPT.to_string()),
        max_new_tokens: 64,
        layout: args.layout,
        keymap: args.keymap,
        event_log: args.event_log,
        headless,
        replay: None,
        color,
        chat: false,
        serving: false,
    };
    run_session(config, start_engine)
}
