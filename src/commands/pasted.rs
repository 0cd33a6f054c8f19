//! The user's own launch line, for `check` and `launch`: pasted after `--` (as words, or as
//! one quoted string) or read from a file (`--from-file launch.sh`, a script whose line that
//! runs sglang or vllm is taken).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::spec::LaunchSpec;

#[derive(Args, Debug)]
pub struct PastedLine {
    /// Read the launch line from a file: the line of a shell script that runs sglang or vllm
    /// (comments, `set -e` and `export VAR=value` lines allowed).
    #[arg(long, value_name = "FILE", conflicts_with = "command")]
    from_file: Option<PathBuf>,
    /// A whole pasted launch command (`-- SGLANG_X=1 python3 -m sglang.launch_server ...`,
    /// `-- docker run ... -e VAR=1 IMAGE python3 -m ...`, `-- vllm serve MODEL ...`).
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

impl PastedLine {
    /// The spec the line describes (empty without one).
    pub fn spec(&self) -> anyhow::Result<LaunchSpec> {
        match &self.from_file {
            Some(file) => {
                let text = std::fs::read_to_string(file).with_context(|| format!("--from-file {}", file.display()))?;
                LaunchSpec::from_command_line(&text).with_context(|| format!("--from-file {}", file.display()))
            }
            None => Ok(LaunchSpec::from_words(&self.command)?),
        }
    }
}
