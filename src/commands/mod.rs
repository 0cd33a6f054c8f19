//! The commands layer: one file per subcommand, the only code that knows clap. Each parses its
//! arguments, builds plain option structs and calls into preflight/, engine/, replay/,
//! console/ and model/. Flag names follow SGLang's, so a user can paste their launch line.

mod bench;
mod bench_http;
mod bench_load;
mod bench_table;
pub mod catalog;
mod check;
mod convert;
mod cuda_check;
mod demo;
mod flags;
mod generate;
mod in_process;
mod json_error;
mod launch;
mod pasted;
mod replay;
mod version;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::finding_text::ColorChoice;

const EXAMPLES: &str = "\
Examples:
  specdeck                                    the embedded demo: the console on a TTY, headless otherwise
  specdeck check --model-path T --speculative-draft-model-path D --speculative-algorithm EAGLE3
  specdeck check -- python3 -m sglang.launch_server --model-path T --speculative-draft-model-path D
  specdeck launch --model-path T --speculative-draft-model-path D --apply clamp-context-length
  specdeck replay server.log --follow
  specdeck generate --model-path T --prompt 'Hello' --json
  specdeck bench --model-path T --prompts prompts.jsonl --compare-target-only

Each command's --help lists its exit statuses; README.md lists them all, with the finding and remedy ids.";

#[derive(Parser, Debug)]
#[command(name = "specdeck", version, about = "Launch-and-debug console for speculative decoding (EAGLE-3)", after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Colour text output: auto (a terminal, and NO_COLOR unset), always or never.
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto, value_name = "WHEN")]
    color: Color,
    /// Print the demo's events instead of drawing the console, even on a TTY (also accepted
    /// before `launch`).
    #[arg(long)]
    headless: bool,
    #[command(flatten)]
    demo: demo::DemoArgs,
}

/// `--color WHEN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Color {
    Auto,
    Always,
    Never,
}

impl From<Color> for ColorChoice {
    fn from(color: Color) -> ColorChoice {
        match color {
            Color::Auto => ColorChoice::Auto,
            Color::Always => ColorChoice::Always,
            Color::Never => ColorChoice::Never,
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Preflight only: find every drafter/target mismatch from config.json, safetensors
    /// headers and tokenizer files, before any weights move. GPU count and memory come from
    /// NVML (SPECDECK_NVML=off ignores this machine's GPUs); --gpu-memory-gib sets the memory
    /// per GPU to budget for.
    #[command(after_help = check::AFTER_HELP)]
    Check(check::CheckArgs),
    /// Start a target + drafter: the console on a TTY, else headless.
    #[command(after_help = launch::AFTER_HELP)]
    Launch(launch::LaunchArgs),
    /// Rebuild the phase timeline and diagnosis from a log (ours, SGLang's or vLLM's).
    #[command(after_help = replay::AFTER_HELP)]
    Replay(replay::ReplayArgs),
    /// Generate headlessly and print the text (or JSON).
    #[command(after_help = generate::AFTER_HELP)]
    Generate(generate::GenerateArgs),
    /// Measure tokens/s, accept length and phase times over a prompt file.
    #[command(after_help = bench::AFTER_HELP)]
    Bench(bench::BenchArgs),
    /// Convert model files.
    #[command(subcommand)]
    Convert(convert::ConvertCommand),
    /// Check and time the CUDA backend on this machine's GPUs (scripts/gpu/run.sh).
    #[command(hide = true)]
    CudaCheck(cuda_check::CudaCheckArgs),
}

/// The command line's grammar, `--version`'s build text included (tests walk it).
pub fn command() -> clap::Command {
    Cli::command().long_version(version::long())
}

/// Parse this process's command line and run it: the exit status, or an error for status 2.
pub fn run_from_args() -> anyhow::Result<i32> {
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    run(cli)
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    let color = ColorChoice::from(cli.color);
    color.install();
    if cli.headless && !matches!(cli.command, None | Some(Command::Launch(_) | Command::Replay(_))) {
        command().error(clap::error::ErrorKind::ArgumentConflict, "--headless applies to launch, replay and the demo only").exit();
    }
    match cli.command {
        Some(Command::Check(args)) => check::run(&args, color),
        Some(Command::Launch(args)) => launch::run(args, cli.headless, color),
        Some(Command::Replay(args)) => replay::run(&args, cli.headless, color),
        Some(Command::Generate(args)) => generate::run(&args, color),
        Some(Command::Bench(args)) => bench::run(&args, color),
        Some(Command::Convert(command)) => convert::run(&command),
        Some(Command::CudaCheck(args)) => cuda_check::run(&args),
        None => demo::run(cli.demo, cli.headless, color),
    }
}
