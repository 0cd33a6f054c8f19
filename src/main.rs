use std::sync::Arc;

use clap::Parser;

use specdeck::cli::{Cli, Command, ConvertCommand, LaunchArgs, ReplayArgs};
use specdeck::console::session::{has_tty, run_session, SessionConfig};
use specdeck::console::EngineControl;
use specdeck::demo;
use specdeck::engine::handle::EngineHandle;
use specdeck::engine::request::PreflightFn;
use specdeck::event::EventSink;
use specdeck::spec::LaunchSpec;

fn main() {
    let cli = Cli::parse();
    let result: anyhow::Result<i32> = match cli.command {
        Some(Command::Check(args)) => specdeck::preflight::command::run(&args),
        Some(Command::Launch(args)) => launch(args, cli.headless),
        Some(Command::Replay(args)) => replay(args, cli.headless),
        Some(Command::Generate(args)) => specdeck::engine::commands::generate(&args),
        Some(Command::Bench(args)) => specdeck::engine::commands::bench(&args),
        Some(Command::Convert(ConvertCommand::Gguf { input, out_dir, dtype })) => {
            specdeck::model::convert::run_cli(&input, &out_dir, &dtype)
        }
        Some(Command::CudaCheck(a)) => specdeck::cudacheck::command(&specdeck::cudacheck::Options {
            out: a.out,
            large_model: a.large_model,
            new_tokens: a.new_tokens,
            sections: a.sections,
        }),
        None => run_demo(&cli),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("specdeck: {e:#}");
            std::process::exit(2);
        }
    }
}

/// `specdeck launch …`: the console on a TTY, else headless.
fn launch(args: LaunchArgs, headless: bool) -> anyhow::Result<i32> {
    let base = if args.command.is_empty() { LaunchSpec::default() } else { LaunchSpec::from_words(&args.command)? };
    let spec = args.flags.to_spec(base)?;
    let config = SessionConfig {
        spec,
        apply: args.flags.apply,
        prompt: args.prompt,
        max_new_tokens: args.max_new_tokens,
        layout: args.layout,
        keymap: args.keymap,
        event_log: args.event_log,
        headless,
    };
    run_session(config, start_engine)
}

/// `specdeck replay LOG`: the console on a TTY (the same panes a live launch shows, fed by
/// the replay producer), else the headless timeline or `--json`.
fn replay(args: ReplayArgs, headless: bool) -> anyhow::Result<i32> {
    if args.json || headless || !has_tty() {
        return specdeck::replay::command(&args);
    }
    let source = specdeck::replay::Source::parse(&args.log);
    let opts = specdeck::replay::ReplayOptions { follow: args.follow, speed: args.speed, logs: true };
    let config = SessionConfig { max_new_tokens: 64, ..SessionConfig::default() };
    run_session(config, move |sink| {
        std::thread::spawn(move || {
            if let Err(e) = specdeck::replay::produce(&source, &opts, &sink) {
                sink.log(specdeck::event::LogLevel::Error, "replay", format!("{e:#}"));
            }
        });
        Ok(None)
    })
}

/// `specdeck` with no arguments: the embedded demo pair, its default prompt once ready.
fn run_demo(cli: &Cli) -> anyhow::Result<i32> {
    let pair = demo::extract()?;
    let config = SessionConfig {
        spec: pair.spec(),
        apply: cli.apply.clone(),
        prompt: Some(demo::DEFAULT_PROMPT.to_string()),
        max_new_tokens: 64,
        layout: cli.layout.clone(),
        keymap: cli.keymap.clone(),
        event_log: cli.event_log.clone(),
        headless: cli.headless,
    };
    run_session(config, start_engine)
}

/// The in-process engine behind the console (CONTRACTS.md 1 and 2), with the full
/// preflight rule set run in its preflight phase.
fn start_engine(sink: EventSink) -> anyhow::Result<Option<Box<dyn EngineControl>>> {
    let preflight: PreflightFn = Arc::new(specdeck::preflight::check_spec);
    Ok(Some(Box::new(EngineHandle::spawn(sink, preflight))))
}
