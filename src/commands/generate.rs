//! `specdeck generate`: launch the engine in this thread, generate from one prompt, print the
//! text (JSON with `--json`: tokens, accept lengths, phase times).

use clap::Args;
use serde_json::json;

use super::flags::LaunchFlags;
use super::in_process::{launch_spec, phase_seconds, phases_json, start};
use crate::engine::request::GenerateRequest;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    flags: LaunchFlags,
    #[arg(long)]
    prompt: String,
    /// Apply the tokenizer's chat template.
    #[arg(long)]
    chat: bool,
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0, value_parser = temperature)]
    temperature: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
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

pub fn run(args: &GenerateArgs) -> anyhow::Result<i32> {
    let spec = launch_spec(&args.flags)?;
    let (mut engine, mut rx) = match start(&spec, "specdeck generate") {
        Ok(e) => e,
        Err(code) => return Ok(code),
    };
    let req = GenerateRequest {
        prompt: args.prompt.clone(),
        max_new_tokens: args.max_new_tokens,
        chat: args.chat,
        temperature: args.temperature,
        seed: args.seed,
    };
    let g = engine.generate_with(&req, true)?;
    let phases = phase_seconds(&mut rx);
    let text = engine.decode(&g.tokens)?;
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
    Ok(0)
}
