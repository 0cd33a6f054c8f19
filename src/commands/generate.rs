//! `specdeck generate`: launch the engine in this thread, generate from one prompt, print the
//! text (JSON with `--json`: tokens, accept lengths, phase times; a JSON error object when it
//! fails).

use clap::Args;
use serde_json::json;

use super::flags::LaunchFlags;
use super::in_process::{launch_spec, phase_seconds, phases_json, start};
use super::json_error::{Failure, Kind};
use crate::engine::request::GenerateRequest;
use crate::finding_text::ColorChoice;

pub const AFTER_HELP: &str = "\
Examples:
  specdeck generate --model-path T --speculative-draft-model-path D --speculative-algorithm EAGLE3 --prompt 'Hello'
  specdeck generate --model-path T --prompt 'Write a haiku' --chat --temperature 0.7 --seed 1 --json

Exit status: 0 generated, 1 a finding stopped the launch (before anything loads), 2 unreadable input,
a bad flag value, an --apply id that no finding offers, or an engine error. With --json a failure
prints {\"error\": {\"kind\", \"message\", \"findings\"}} on stdout.";

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    flags: LaunchFlags,
    /// The prompt to generate from.
    #[arg(long)]
    prompt: String,
    /// Apply the tokenizer's chat template.
    #[arg(long)]
    chat: bool,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 64, value_name = "N")]
    max_new_tokens: usize,
    /// Sampling temperature; 0 = greedy.
    #[arg(long, default_value_t = 0.0, value_parser = temperature, value_name = "T")]
    temperature: f32,
    /// Seed of the sampler (with a temperature above 0).
    #[arg(long, default_value_t = 0, value_name = "N")]
    seed: u64,
    /// Print one JSON object (tokens, text, accept lengths, phase times) instead of the text.
    #[arg(long)]
    json: bool,
}

/// `--temperature`: 0 (greedy) or a finite number above it; a negative or NaN one is not
/// quietly read as greedy.
fn temperature(value: &str) -> Result<f32, String> {
    let t: f32 = value.trim().parse().map_err(|e| format!("{e}"))?;
    if t >= 0.0 && t.is_finite() {
        Ok(t)
    } else {
        Err("expected 0 (greedy) or a finite number above 0".into())
    }
}

pub fn run(args: &GenerateArgs, color: ColorChoice) -> anyhow::Result<i32> {
    Ok(generate(args, color).map_or_else(|failure| failure.report(args.json), |()| 0))
}

fn generate(args: &GenerateArgs, color: ColorChoice) -> Result<(), Failure> {
    let spec = launch_spec(&args.flags)?;
    let (mut engine, mut rx) = start(&spec, "specdeck generate", color)?;
    let req = GenerateRequest {
        prompt: args.prompt.clone(),
        max_new_tokens: args.max_new_tokens,
        chat: args.chat,
        temperature: args.temperature,
        seed: args.seed,
    };
    let g = engine.generate_with(&req, true).map_err(|e| Failure::new(Kind::Engine, e))?;
    let phases = phase_seconds(&mut rx);
    let text = engine.decode(&g.tokens).map_err(|e| Failure::new(Kind::Engine, e))?;
    if args.json {
        let out = json!({
            "tokens": g.tokens,
            "text": text,
            "accept_lengths": g.accept_lengths,
            "mean_accept_length": g.mean_accept_length(),
            "tokens_per_s": g.tokens_per_s(),
            "phases": phases_json(&phases),
        });
        println!("{out}");
    } else {
        println!("{text}");
        eprintln!("{} tokens, {:.2} tokens/s, mean accept length {:.2}", g.tokens.len(), g.tokens_per_s(), g.mean_accept_length());
    }
    Ok(())
}
