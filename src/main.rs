use clap::Parser;

use specdeck::commands::{self, Cli};

fn main() {
    match commands::run(Cli::parse()) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("specdeck: {e:#}");
            std::process::exit(2);
        }
    }
}
