//! `specdeck cuda-check` (hidden; scripts/gpu/run.sh runs it): the GPU self-checks.

use std::path::PathBuf;

use clap::Args;

use crate::cudacheck::{self, Options};

#[derive(Args, Debug)]
pub struct CudaCheckArgs {
    /// Folder for cuda-check.json.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// A large checkpoint folder for decode, start-up and step-cost figures.
    #[arg(long, value_name = "DIR")]
    large_model: Option<PathBuf>,
    /// A folder of DeepSeek-V3-family checkpoints (testdata/deepseek) for CUDA against the CPU.
    #[arg(long, value_name = "DIR")]
    deepseek_models: Option<PathBuf>,
    /// Tokens to decode in the timed runs.
    #[arg(long, default_value_t = 128)]
    new_tokens: usize,
    /// Run only these sections (comma-separated; probe, kernel-compile and teardown always run).
    #[arg(long, value_delimiter = ',')]
    sections: Option<Vec<String>>,
}

pub fn run(args: &CudaCheckArgs) -> anyhow::Result<i32> {
    cudacheck::command(&Options {
        out: args.out.clone(),
        large_model: args.large_model.clone(),
        deepseek_models: args.deepseek_models.clone(),
        new_tokens: args.new_tokens,
        sections: args.sections.clone(),
    })
}
