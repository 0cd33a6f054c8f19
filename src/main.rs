use clap::Parser;

use specdeck::cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let result: anyhow::Result<i32> = match cli.command {
        Some(Command::Check(_)) => Err(anyhow::anyhow!("check: lands with the preflight issue")),
        Some(Command::Launch(_)) => Err(anyhow::anyhow!("launch: lands with the console issue")),
        Some(Command::Replay(args)) => specdeck::replay::command(&args),
        Some(Command::Generate(_)) | Some(Command::Bench(_)) => {
            Err(anyhow::anyhow!("generate/bench: land with the engine issue"))
        }
        Some(Command::Convert(_)) => Err(anyhow::anyhow!("convert: lands with the engine issue")),
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
