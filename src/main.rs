use clap::Parser;

use specdeck::cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let result: anyhow::Result<i32> = match cli.command {
        Some(Command::Check(_)) => Err(anyhow::anyhow!("check: lands with the preflight issue")),
        Some(Command::Launch(_)) => Err(anyhow::anyhow!("launch: lands with the console issue")),
        Some(Command::Replay(_)) => Err(anyhow::anyhow!("replay: lands with the replay issue")),
        Some(Command::Generate(args)) => specdeck::engine::commands::generate(&args),
        Some(Command::Bench(args)) => specdeck::engine::commands::bench(&args),
        Some(Command::Convert(_)) => Err(anyhow::anyhow!("convert: lands with the engine issue")),
        Some(Command::CudaCheck(args)) => specdeck::backend::cuda::selftest::command(&args),
        None => Err(anyhow::anyhow!("the demo lands with the console issue")),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("specdeck: {e:#}");
            std::process::exit(2);
        }
    }
}
