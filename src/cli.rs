//! Command-line definitions (clap). Flag names follow SGLang's, so a user can paste their
//! launch line. Each subcommand's work lives in the module that owns it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::spec::{LaunchSpec, SpecError};

#[derive(Parser, Debug)]
#[command(name = "specdeck", version, about = "Launch-and-debug console for speculative decoding (EAGLE-3)")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Run the embedded demo without the console even on a TTY.
    #[arg(long, global = true)]
    pub headless: bool,
    /// Apply a remedy by id before launching the demo (repeatable).
    #[arg(long = "apply", value_name = "FIX_ID")]
    pub apply: Vec<String>,
    /// Record every event of the demo as JSONL.
    #[arg(long, value_name = "FILE")]
    pub event_log: Option<PathBuf>,
    /// Console layout for the demo: default, compact, wide, or a layout file.
    #[arg(long, value_name = "NAME|FILE")]
    pub layout: Option<String>,
    /// Keymap file for the demo (default: $XDG_CONFIG_HOME/specdeck/keymap.toml when present).
    #[arg(long, value_name = "FILE")]
    pub keymap: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Preflight only: find every drafter/target mismatch from config.json, safetensors
    /// headers and tokenizer files, before any weights move. GPU count and memory come from
    /// NVML (SPECDECK_NVML=off ignores this machine's GPUs); --gpu-memory-gib sets the memory
    /// per GPU to budget for. Exit 0 clean, 1 errors, 2 unreadable input.
    Check(CheckArgs),
    /// Start a target + drafter: the console on a TTY, else headless.
    Launch(LaunchArgs),
    /// Rebuild the phase timeline and diagnosis from a log (ours, SGLang's or vLLM's).
    Replay(ReplayArgs),
    /// Generate headlessly and print the result as JSON.
    Generate(GenerateArgs),
    /// Measure tokens/s, accept length and phase times over a prompt file.
    Bench(BenchArgs),
    /// Convert model files.
    #[command(subcommand)]
    Convert(ConvertCommand),
    /// Check and time the CUDA backend on this machine's GPUs (scripts/gpu/run.sh).
    #[command(hide = true)]
    CudaCheck(CudaCheckArgs),
}

#[derive(Args, Debug)]
pub struct CudaCheckArgs {
    /// Folder for cuda-check.json.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// A large checkpoint folder for decode, start-up and step-cost figures.
    #[arg(long, value_name = "DIR")]
    pub large_model: Option<PathBuf>,
    /// Tokens to decode in the timed runs.
    #[arg(long, default_value_t = 128)]
    pub new_tokens: usize,
    /// Run only these sections (comma-separated; probe, kernel-compile and teardown always run).
    #[arg(long, value_delimiter = ',')]
    pub sections: Option<Vec<String>>,
}

/// The launch flags shared by `check`, `launch`, `generate` and `bench` (SGLang names).
#[derive(Args, Debug, Clone, Default)]
pub struct LaunchFlags {
    #[arg(long, alias = "model", value_name = "DIR")]
    pub model_path: Option<String>,
    #[arg(long, alias = "speculative-draft-model", value_name = "DIR")]
    pub speculative_draft_model_path: Option<String>,
    /// EAGLE3, EAGLE, STANDALONE or NONE.
    #[arg(long, value_name = "ALGO")]
    pub speculative_algorithm: Option<String>,
    #[arg(long, alias = "tp", value_name = "N")]
    pub tp_size: Option<String>,
    #[arg(long, value_name = "TOKENS")]
    pub context_length: Option<String>,
    #[arg(long, value_name = "S")]
    pub speculative_num_steps: Option<String>,
    #[arg(long, value_name = "K")]
    pub speculative_eagle_topk: Option<String>,
    #[arg(long, value_name = "N")]
    pub speculative_num_draft_tokens: Option<String>,
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<String>,
    #[arg(long, value_name = "F")]
    pub mem_fraction_static: Option<String>,
    #[arg(long, value_name = "B")]
    pub cuda_graph_max_bs: Option<String>,
    #[arg(long, value_name = "N")]
    pub max_running_requests: Option<String>,
    /// GPU memory per device for the budget when NVML has no GPU to ask.
    #[arg(long, value_name = "GIB")]
    pub gpu_memory_gib: Option<String>,
    /// auto (CUDA when present, else CPU), cpu or cuda.
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<String>,
    /// Batch-invariant matmuls everywhere, prefill included (SGLang's switch): output no
    /// longer depends on a step's row count or, over 2 GPUs, on the tensor-parallel split.
    #[arg(long)]
    pub enable_deterministic_inference: bool,
    /// Apply a remedy by its id (repeatable), then continue.
    #[arg(long = "apply", value_name = "FIX_ID")]
    pub apply: Vec<String>,
}

impl LaunchFlags {
    /// Build a spec: the flags given, on top of `base` (a pasted command line, or empty),
    /// with `SGLANG_*` variables of this process's environment added.
    pub fn to_spec(&self, base: LaunchSpec) -> Result<LaunchSpec, SpecError> {
        let mut spec = base;
        let pairs: [(&str, &Option<String>); 14] = [
            ("--model-path", &self.model_path),
            ("--speculative-draft-model-path", &self.speculative_draft_model_path),
            ("--speculative-algorithm", &self.speculative_algorithm),
            ("--tp-size", &self.tp_size),
            ("--context-length", &self.context_length),
            ("--speculative-num-steps", &self.speculative_num_steps),
            ("--speculative-eagle-topk", &self.speculative_eagle_topk),
            ("--speculative-num-draft-tokens", &self.speculative_num_draft_tokens),
            ("--dtype", &self.dtype),
            ("--mem-fraction-static", &self.mem_fraction_static),
            ("--cuda-graph-max-bs", &self.cuda_graph_max_bs),
            ("--max-running-requests", &self.max_running_requests),
            ("--gpu-memory-gib", &self.gpu_memory_gib),
            ("--device", &self.device),
        ];
        for (flag, value) in pairs {
            if let Some(v) = value {
                spec.set_flag(flag, v)?;
            }
        }
        if self.enable_deterministic_inference {
            spec.deterministic = true;
        }
        for (k, v) in std::env::vars() {
            if k.starts_with("SGLANG_") {
                spec.env.entry(k).or_insert(v);
            }
        }
        Ok(spec)
    }
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub flags: LaunchFlags,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// A whole pasted launch command (`-- SGLANG_X=1 python3 -m sglang.launch_server ...`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct LaunchArgs {
    #[command(flatten)]
    pub flags: LaunchFlags,
    /// Record every event as JSONL.
    #[arg(long, value_name = "FILE")]
    pub event_log: Option<PathBuf>,
    /// A prompt to generate once the engine is ready.
    #[arg(long)]
    pub prompt: Option<String>,
    #[arg(long, default_value_t = 64)]
    pub max_new_tokens: usize,
    /// Console layout name (layouts/*.toml) or path.
    #[arg(long)]
    pub layout: Option<String>,
    /// Keymap file (default: $XDG_CONFIG_HOME/specdeck/keymap.toml when present).
    #[arg(long, value_name = "FILE")]
    pub keymap: Option<PathBuf>,
    /// A pasted launch command, as for `check`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The log file, or - for standard input.
    pub log: String,
    /// Keep reading as the file grows (survives truncation and rotation).
    #[arg(long)]
    pub follow: bool,
    /// Print JSON instead of the timeline text.
    #[arg(long)]
    pub json: bool,
    /// Replay speed relative to the recorded times (0 = as fast as possible).
    #[arg(long, default_value_t = 0.0)]
    pub speed: f64,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub flags: LaunchFlags,
    #[arg(long)]
    pub prompt: String,
    /// Apply the tokenizer's chat template.
    #[arg(long)]
    pub chat: bool,
    #[arg(long, default_value_t = 64)]
    pub max_new_tokens: usize,
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub flags: LaunchFlags,
    /// JSONL file with one prompt per line (`{"prompt": ...}`).
    #[arg(long, value_name = "FILE.jsonl")]
    pub prompts: PathBuf,
    #[arg(long)]
    pub chat: bool,
    #[arg(long, default_value_t = 64)]
    pub max_new_tokens: usize,
    /// Also run target-only and check the outputs are identical.
    #[arg(long)]
    pub compare_target_only: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum ConvertCommand {
    /// Write an HF-style folder (config.json, bf16 model.safetensors, tokenizer.json) from a GGUF.
    Gguf {
        input: PathBuf,
        out_dir: PathBuf,
        /// Element type of model.safetensors: bf16, or f32 for an exact copy of the
        /// dequantized values.
        #[arg(long, default_value = "bf16", value_parser = ["bf16", "f32"])]
        dtype: String,
    },
}
