//! The commands layer: one file per subcommand, the only code that knows clap. Each parses its
//! arguments, builds plain option structs and calls into preflight/, engine/, replay/,
//! console/ and model/. Flag names follow SGLang's, so a user can paste their launch line.

mod bench;
mod bench_load;
mod check;
mod convert;
mod cuda_check;
mod demo;
mod flags;
mod generate;
mod in_process;
mod launch;
mod replay;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "specdeck", version, about = "Launch-and-debug console for speculative decoding (EAGLE-3)")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Run the embedded demo without the console even on a TTY.
    #[arg(long, global = true)]
    headless: bool,
    #[command(flatten)]
    demo: demo::DemoArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Preflight only: find every drafter/target mismatch from config.json, safetensors
    /// headers and tokenizer files, before any weights move. GPU count and memory come from
    /// NVML (SPECDECK_NVML=off ignores this machine's GPUs); --gpu-memory-gib sets the memory
    /// per GPU to budget for. Exit 0 clean, 1 errors, 2 unreadable input.
    Check(check::CheckArgs),
    /// Start a target + drafter: the console on a TTY, else headless.
    Launch(launch::LaunchArgs),
    /// Rebuild the phase timeline and diagnosis from a log (ours, SGLang's or vLLM's).
    Replay(replay::ReplayArgs),
    /// Generate headlessly and print the result as JSON.
    Generate(generate::GenerateArgs),
    /// Measure tokens/s, accept length and phase times over a prompt file.
    Bench(bench::BenchArgs),
    /// Convert model files.
    #[command(subcommand)]
    Convert(convert::ConvertCommand),
    /// Check and time the CUDA backend on this machine's GPUs (scripts/gpu/run.sh).
    #[command(hide = true)]
    CudaCheck(cuda_check::CudaCheckArgs),
}

/// Parse this process's command line and run it: the exit status, or an error for status 2.
pub fn run_from_args() -> anyhow::Result<i32> {
    run(Cli::parse())
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Some(Command::Check(args)) => check::run(&args),
        Some(Command::Launch(args)) => launch::run(args, cli.headless),
        Some(Command::Replay(args)) => replay::run(&args, cli.headless),
        Some(Command::Generate(args)) => generate::run(&args),
        Some(Command::Bench(args)) => bench::run(&args),
        Some(Command::Convert(command)) => convert::run(&command),
        Some(Command::CudaCheck(args)) => cuda_check::run(&args),
        None => demo::run(cli.demo, cli.headless),
    }
}
