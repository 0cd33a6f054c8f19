//! `specdeck bench`: launch the engine in this thread, generate greedily from every prompt
//! of a file, and print the figures (tokens/s, accept lengths, phase times; on the CPU the
//! machine's memory bandwidth and the target-only floor it sets).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use clap::Args;
use rayon::prelude::*;
use serde_json::{json, Value};

use super::bench_table;
use super::flags::LaunchFlags;
use super::in_process::{launch_spec, phase_seconds, phases_json, start};
use super::json_error::{Failure, Kind};
use crate::engine::ranks::Serve;
use crate::engine::request::GenerateRequest;
use crate::engine::spec_decode::Generation;
use crate::finding_text::ColorChoice;
use crate::model::open::{read_text_capped, JSON_LIMIT};
use crate::spec::Algorithm;

pub const AFTER_HELP: &str = "\
Examples:
  specdeck bench --model-path T --speculative-draft-model-path D --speculative-algorithm EAGLE3 --prompts p.jsonl
  specdeck bench --model-path T --speculative-draft-model-path D --prompts p.jsonl --compare-target-only --json
  specdeck bench --url http://127.0.0.1:30000 --prompts p.jsonl --max-new-tokens 256 --concurrency 32 --json

Exit status: 0 measured, 1 a finding stopped the launch (before anything loads) or, with
--compare-target-only, the speculative tokens differ from the target-only ones, 2 unreadable input,
a bad flag value, an --apply id that no finding offers, an engine error, or (with --url) a server
that cannot be reached or answers wrongly. With --json a failure
prints {\"error\": {\"kind\", \"message\", \"findings\"}} on stdout.";

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    flags: LaunchFlags,
    /// JSONL file with one prompt per line (`{"prompt": ...}`).
    #[arg(long, value_name = "FILE.jsonl")]
    prompts: PathBuf,
    /// Apply the tokenizer's chat template to every prompt.
    #[arg(long)]
    chat: bool,
    /// Most tokens to generate per prompt.
    #[arg(long, default_value_t = 64, value_name = "N")]
    max_new_tokens: usize,
    /// Also run target-only and check the outputs are identical.
    #[arg(long)]
    compare_target_only: bool,
    /// Print one JSON object (every figure, each prompt's token ids) instead of the table.
    #[arg(long)]
    json: bool,
    /// Also list each prompt's token ids under the table.
    #[arg(long)]
    verbose: bool,
    /// Serve the prompts through the continuous-batching scheduler, N requests in flight
    /// (and `--max-running-requests N` unless given).
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// With --concurrency: requests arrive as a Poisson process of R a second (else all at once).
    #[arg(long, value_name = "R", requires = "concurrency")]
    request_rate: Option<f64>,
    /// With --concurrency: send the prompts to the OpenAI-compatible server at this address
    /// (specdeck's, SGLang's or vLLM's) as streamed requests, instead of launching an engine.
    #[arg(long, value_name = "http://HOST:PORT", requires = "concurrency")]
    url: Option<String>,
}

fn read_prompts(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = read_text_capped(path, JSON_LIMIT).with_context(|| format!("{}: cannot read", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).with_context(|| format!("{}: line {}: invalid JSON", path.display(), i + 1))?;
        let p = v.get("prompt").and_then(Value::as_str);
        out.push(p.ok_or_else(|| anyhow!("{}: line {}: no \"prompt\" string", path.display(), i + 1))?.to_string());
    }
    if out.is_empty() {
        bail!("{}: no prompts (one JSON object with a \"prompt\" string per line)", path.display());
    }
    Ok(out)
}

/// Figures over a set of generations.
fn aggregate(gens: &[Generation]) -> Value {
    let tokens: usize = gens.iter().map(|g| g.tokens.len()).sum();
    let seconds: f64 = gens.iter().map(|g| g.seconds).sum();
    let decode: f64 = gens.iter().map(|g| g.seconds - g.prefill_seconds).sum();
    let draft: f64 = gens.iter().map(|g| g.draft_seconds).sum();
    let lengths: Vec<usize> = gens.iter().flat_map(|g| g.accept_lengths.iter().copied()).collect();
    let all = Generation { accept_lengths: lengths, ..Generation::default() };
    let per_cycle_ms = |s: f64| if all.accept_lengths.is_empty() { 0.0 } else { s * 1e3 / all.accept_lengths.len() as f64 };
    json!({
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens as f64 / seconds,
        "decode_tokens_per_s": tokens as f64 / decode,
        "verify_steps": all.accept_lengths.len(),
        "mean_accept_length": all.mean_accept_length(),
        "accept_histogram": all.accept_histogram(),
        // Where a cycle's time goes: drafting, and the rest (the verify step and the host).
        "draft_ms_per_cycle": per_cycle_ms(draft),
        "verify_ms_per_cycle": per_cycle_ms(decode - draft),
        // Time to the first decode step, per prompt (its prefill, and the drafter's).
        "prefill_ms_median": median(gens.iter().map(|g| g.prefill_seconds * 1e3).collect()),
    })
}

/// The middle value (the mean of the middle two for an even count); 0 for none.
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Greedy generations of every prompt; with `compare`, each prompt also target-only (the
/// drafter stays loaded), the two modes alternating first and second from prompt to prompt so
/// that both see the same machine load.
fn run_all(
    engine: &mut dyn Serve,
    prompts: &[String],
    args: &BenchArgs,
    compare: bool,
) -> anyhow::Result<(Vec<Generation>, Vec<Generation>)> {
    let (mut main, mut base) = (Vec::new(), Vec::new());
    for (i, p) in prompts.iter().enumerate() {
        let req = GenerateRequest { prompt: p.clone(), max_new_tokens: args.max_new_tokens, chat: args.chat, temperature: 0.0, seed: 0 };
        let order: &[bool] = match (compare, i % 2) {
            (false, _) => &[true],
            (true, 0) => &[true, false],
            (true, _) => &[false, true],
        };
        for &speculative in order {
            let g = engine.generate_with(&req, speculative)?;
            if speculative {
                main.push(g)
            } else {
                base.push(g)
            }
        }
    }
    Ok((main, base))
}

/// Read bandwidth of this machine: the best of several parallel passes over a buffer far
/// larger than the caches, in bytes per second.
fn memory_bandwidth() -> f64 {
    const LEN: usize = 64 << 20; // 256 MiB of f32, 8× this machine's L3
    let data: Vec<f32> = (0..LEN).into_par_iter().map(|i| (i % 7) as f32).collect();
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t = Instant::now();
        let sum: f32 = data.par_chunks(1 << 16).map(|c| crate::backend::cpu::dot(c, c)).sum();
        let s = t.elapsed().as_secs_f64();
        std::hint::black_box(sum);
        best = best.max((LEN * 4) as f64 / s);
    }
    best
}

pub fn run(args: &BenchArgs, color: ColorChoice) -> anyhow::Result<i32> {
    Ok(bench(args, color).unwrap_or_else(|failure| failure.report(args.json)))
}

/// The figures printed; the status is 1 when speculative and target-only tokens differ.
fn bench(args: &BenchArgs, color: ColorChoice) -> Result<i32, Failure> {
    if let (Some(url), Some(concurrency)) = (&args.url, args.concurrency) {
        if !args.flags.is_empty() {
            let e = anyhow!("--url sends to a running server: launch flags (--model-path, --apply, ...) do not apply");
            return Err(Failure::new(Kind::Input, e));
        }
        let prompts = read_prompts(&args.prompts).map_err(|e| Failure::new(Kind::Input, e))?;
        let out = super::bench_http::run(url, &prompts, args.chat, args.max_new_tokens, concurrency, args.request_rate)
            .map_err(|e| Failure::new(Kind::Server, e))?;
        return Ok(print_bench(&out, args));
    }
    let spec = launch_spec(&args.flags)?;
    let prompts = read_prompts(&args.prompts).map_err(|e| Failure::new(Kind::Input, e))?;
    if let Some(concurrency) = args.concurrency {
        let out = super::bench_load::run(&spec, &prompts, args.chat, args.max_new_tokens, concurrency, args.request_rate)
            .map_err(|e| Failure::new(Kind::Engine, e))?;
        return Ok(print_bench(&out, args));
    }
    let bandwidth_before = memory_bandwidth();
    let (mut engine, mut rx) = start(&spec, "specdeck bench", color)?;
    let phases = phase_seconds(&mut rx);
    let speculative = spec.speculative_algorithm.is_some_and(|a| a != Algorithm::None);
    let compare = args.compare_target_only && speculative;
    let (gens, base) = run_all(&mut *engine, &prompts, args, compare).map_err(|e| Failure::new(Kind::Engine, e))?;
    let (target_bytes, draft_bytes) = engine.weight_bytes();
    let mut out = aggregate(&gens);
    let (device, tp) = engine.placement();
    out["device"] = json!(device);
    out["tp_size"] = json!(tp);
    out["prompts"] = json!(prompts.len());
    out["phases"] = phases_json(&phases);
    // Per prompt, so two runs (TP 2 against TP 1, say) can be compared token for token.
    out["token_ids"] = gens.iter().map(|g| json!(g.tokens)).collect();
    if compare {
        let mismatches: Vec<usize> = (0..prompts.len()).filter(|&i| base[i].tokens != gens[i].tokens).collect();
        out["target_only"] = aggregate(&base);
        out["identical"] = json!(mismatches.is_empty());
        out["mismatched_prompts"] = json!(mismatches);
    }
    // The bytes of weights a decode step reads (a MoE target's active ones), which a floor
    // divides a bandwidth by.
    out["target_weight_bytes"] = json!(target_bytes);
    out["draft_weight_bytes"] = json!(draft_bytes);
    if device != "cpu" {
        // The host's bandwidth is no floor for a GPU (scripts/gpu measures the device's).
        return Ok(print_bench(&out, args));
    }
    // Measured before and after the run; the floor takes the better one, since other load on
    // the machine can only lower a measurement.
    let bandwidth_after = memory_bandwidth();
    let bandwidth = bandwidth_before.max(bandwidth_after);
    let floor = bandwidth / target_bytes as f64;
    out["memory_bandwidth_gb_s"] = json!(bandwidth / 1e9);
    out["memory_bandwidth_samples_gb_s"] = json!([bandwidth_before / 1e9, bandwidth_after / 1e9]);
    out["target_only_floor_tokens_per_s"] = json!(floor);
    // Target-only decoding reads every target weight once per token: its decode rate over
    // the bandwidth floor says how close the CPU kernels come to the machine's limit.
    let target_only = if speculative { out.get("target_only").cloned() } else { Some(out.clone()) };
    if let Some(rate) = target_only.and_then(|t| t["decode_tokens_per_s"].as_f64()) {
        out["target_only_ratio_to_floor"] = json!(rate / floor);
    }
    Ok(print_bench(&out, args))
}

/// Print the bench figures; the status is 1 when speculative and target-only tokens differ.
fn print_bench(out: &Value, args: &BenchArgs) -> i32 {
    if args.json {
        println!("{out}");
    } else {
        print!("{}", bench_table::render(out, args.verbose));
    }
    if out.get("identical") == Some(&json!(false)) {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_takes_the_middle_or_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![9.0, 1.0, 4.0]), 4.0);
        assert_eq!(median(vec![30.0, 1.0, 4.0, 6.0]), 5.0);
    }
}
