//! `specdeck convert gguf IN OUT_DIR`: a GGUF file as an HF-style model folder.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum ConvertCommand {
    /// Write an HF-style folder (config.json, bf16 model.safetensors, tokenizer.json) from a GGUF.
    Gguf {
        /// The GGUF file to read.
        input: PathBuf,
        /// The folder to write config.json, model.safetensors and tokenizer.json into.
        out_dir: PathBuf,
        /// Element type of model.safetensors: bf16, or f32 for an exact copy of the
        /// dequantized values.
        #[arg(long, default_value = "bf16", value_parser = ["bf16", "f32"])]
        dtype: String,
    },
}

pub fn run(command: &ConvertCommand) -> anyhow::Result<i32> {
    match command {
        ConvertCommand::Gguf { input, out_dir, dtype } => crate::model::convert::run_cli(input, out_dir, dtype),
    }
}
