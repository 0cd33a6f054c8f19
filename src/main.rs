use clap::Parser;

use specdeck::cli::{Cli, Command, ConvertCommand};

fn main() {
    let cli = Cli::parse();
    let result: anyhow::Result<i32> = match cli.command {
        Some(Command::Check(args)) => specdeck::preflight::command::run(&args),
        Some(Command::Launch(_)) => Err(anyhow::anyhow!("launch: lands with the console issue")),
        Some(Command::Replay(_)) => Err(anyhow::anyhow!("replay: lands with the replay issue")),
        Some(Command::Generate(_)) | Some(Command::Bench(_)) => {
            Err(anyhow::anyhow!("generate/bench: land with the engine issue"))
        }
        Some(Command::Convert(ConvertCommand::Gguf { input, out_dir, dtype })) => {
            specdeck::model::convert::run_cli(&input, &out_dir, &dtype)
        }
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
