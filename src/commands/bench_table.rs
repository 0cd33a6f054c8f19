//! `bench` without `--json`: the figures of the JSON object as a table a person reads, the
//! speculative run beside the target-only one when both ran, or the load run's serving figures
//! (`--concurrency`). Token ids are left out unless asked for (`--verbose`); `--json` always
//! has them.

use std::fmt::Write as _;

use serde_json::Value;

/// (label, key, decimals) of the rows, in order; a missing figure shows as `—`.
const ROWS: &[(&str, &str, usize)] = &[
    ("tokens", "tokens", 0),
    ("tokens/s", "tokens_per_s", 2),
    ("decode tokens/s", "decode_tokens_per_s", 2),
    ("verify steps", "verify_steps", 0),
    ("mean accept length", "mean_accept_length", 2),
    ("draft ms/cycle", "draft_ms_per_cycle", 3),
    ("verify ms/cycle", "verify_ms_per_cycle", 3),
    ("prefill ms (median)", "prefill_ms_median", 3),
];

const LABEL: usize = 22;
const COLUMN: usize = 14;

fn figure(v: &Value, key: &str, decimals: usize) -> String {
    v.get(key).and_then(Value::as_f64).map_or("—".to_string(), |x| format!("{x:.decimals$}"))
}

/// The accept-length histogram as `length:count` pairs, lengths that never occurred left out.
fn histogram(v: &Value) -> String {
    let counts = v.get("accept_histogram").and_then(Value::as_array).cloned().unwrap_or_default();
    let pairs: Vec<String> =
        counts.iter().enumerate().filter_map(|(len, n)| n.as_u64().filter(|&n| n > 0).map(|n| format!("{len}:{n}"))).collect();
    if pairs.is_empty() {
        "—".to_string()
    } else {
        pairs.join(" ")
    }
}

/// The table for `out`, the object `bench --json` prints.
pub fn render(out: &Value, verbose: bool) -> String {
    let mut s = if out.get("concurrency").is_some() { render_load(out) } else { render_runs(out) };
    if verbose {
        for (i, ids) in out["token_ids"].as_array().into_iter().flatten().enumerate() {
            let _ = writeln!(s, "  token ids, prompt {}: {ids}", i + 1);
        }
    }
    s
}

/// A load run through the scheduler: throughput, and TTFT and ITL percentiles.
fn render_load(out: &Value) -> String {
    let mut s = String::new();
    let arrivals = match out["request_rate"].as_f64() {
        Some(rate) => format!("arriving at {rate} a second"),
        None => "all at once".to_string(),
    };
    let _ = writeln!(
        s,
        "bench: {} prompts at concurrency {}, {arrivals}, in {} s",
        out["prompts"],
        out["concurrency"],
        figure(out, "seconds", 2)
    );
    for (label, key, decimals) in [
        ("output tokens", "output_tokens", 0),
        ("output tokens/s", "output_tokens_per_s", 2),
        ("prompt tokens", "prompt_tokens", 0),
        ("mean accept length", "mean_accept_length", 2),
    ] {
        let _ = writeln!(s, "  {label:<LABEL$}{:>COLUMN$}", figure(out, key, decimals));
    }
    for (label, key) in [("TTFT ms p50 / p99", "ttft_ms"), ("ITL ms p50 / p99", "itl_ms")] {
        let _ = writeln!(s, "  {label:<LABEL$}{:>COLUMN$}", format!("{} / {}", figure(&out[key], "p50", 1), figure(&out[key], "p99", 1)));
    }
    s
}

/// Batch-1 runs: the speculative one beside target-only when both ran.
fn render_runs(out: &Value) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "bench: {} prompts on {}, tp {}",
        out["prompts"],
        out["device"].as_str().unwrap_or("?"),
        out["tp_size"].as_u64().unwrap_or(1)
    );
    let base = out.get("target_only");
    let mut header = format!("  {:<LABEL$}{:>COLUMN$}", "", "run");
    if base.is_some() {
        header = format!("  {:<LABEL$}{:>COLUMN$}{:>COLUMN$}", "", "speculative", "target-only");
    }
    let _ = writeln!(s, "{}", header.trim_end());
    for (label, key, decimals) in ROWS {
        let _ = write!(s, "  {label:<LABEL$}{:>COLUMN$}", figure(out, key, *decimals));
        if let Some(b) = base {
            let _ = write!(s, "{:>COLUMN$}", figure(b, key, *decimals));
        }
        s.push('\n');
    }
    let _ = writeln!(s, "  {:<LABEL$}{}", "accept histogram", histogram(out));
    if let Some(identical) = out.get("identical").and_then(Value::as_bool) {
        let verdict = if identical { "yes".to_string() } else { format!("no: prompts {}", out["mismatched_prompts"]) };
        let _ = writeln!(s, "  {:<LABEL$}{verdict}", "identical tokens");
    }
    let phases: Vec<String> = out["phases"]
        .as_array()
        .map(|ps| {
            ps.iter().map(|p| format!("{} {:.3} s", p["phase"].as_str().unwrap_or("?"), p["seconds"].as_f64().unwrap_or(0.0))).collect()
        })
        .unwrap_or_default();
    if !phases.is_empty() {
        let _ = writeln!(s, "  {:<LABEL$}{}", "phases", phases.join(" · "));
    }
    if let Some(bandwidth) = out.get("memory_bandwidth_gb_s").and_then(Value::as_f64) {
        let floor = figure(out, "target_only_floor_tokens_per_s", 2);
        let _ = write!(s, "  {:<LABEL$}{bandwidth:.1} GB/s, target-only floor {floor} tokens/s", "memory bandwidth");
        if let Some(ratio) = out.get("target_only_ratio_to_floor").and_then(Value::as_f64) {
            let _ = write!(s, ", target-only at {:.1} % of it", ratio * 100.0);
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn out() -> Value {
        json!({
            "tokens": 32, "seconds": 0.5, "tokens_per_s": 64.0, "decode_tokens_per_s": 80.0, "verify_steps": 10,
            "mean_accept_length": 3.2, "accept_histogram": [0, 2, 0, 3, 5], "draft_ms_per_cycle": 1.5,
            "verify_ms_per_cycle": 4.25, "prefill_ms_median": 12.0, "device": "cpu", "tp_size": 1, "prompts": 2,
            "phases": [{"phase": "preflight", "seconds": 0.002}, {"phase": "target-load", "seconds": 0.25}],
            "token_ids": [[5, 9, 11], [40]],
            "target_only": {"tokens": 32, "tokens_per_s": 40.0, "decode_tokens_per_s": 45.5, "verify_steps": 32,
                "mean_accept_length": 1.0, "accept_histogram": [0, 32], "draft_ms_per_cycle": 0.0,
                "verify_ms_per_cycle": 3.0, "prefill_ms_median": 11.5},
            "identical": false, "mismatched_prompts": [1],
            "memory_bandwidth_gb_s": 12.34, "target_only_floor_tokens_per_s": 60.0, "target_only_ratio_to_floor": 0.758,
        })
    }

    #[test]
    fn the_table_puts_both_runs_side_by_side_without_token_ids() {
        let expected = "\
bench: 2 prompts on cpu, tp 1
                           speculative   target-only
  tokens                            32            32
  tokens/s                       64.00         40.00
  decode tokens/s                80.00         45.50
  verify steps                      10            32
  mean accept length              3.20          1.00
  draft ms/cycle                 1.500         0.000
  verify ms/cycle                4.250         3.000
  prefill ms (median)           12.000        11.500
  accept histogram      1:2 3:3 4:5
  identical tokens      no: prompts [1]
  phases                preflight 0.002 s · target-load 0.250 s
  memory bandwidth      12.3 GB/s, target-only floor 60.00 tokens/s, target-only at 75.8 % of it
";
        assert_eq!(render(&out(), false), expected);
    }

    /// `bench --concurrency`'s object (bench_load.rs) as its own table, not the batch-1 rows.
    #[test]
    fn a_load_run_shows_throughput_and_latency_percentiles() {
        let out = json!({
            "concurrency": 4, "request_rate": null, "prompts": 48, "seconds": 6.46733, "output_tokens": 1536,
            "output_tokens_per_s": 237.5014, "prompt_tokens": 1624, "mean_accept_length": 2.953125,
            "ttft_ms": {"p50": 124.7103, "p99": 210.3351}, "itl_ms": {"p50": 11.2514, "p99": 94.826},
            "token_ids": [[5, 9]],
        });
        let expected = "\
bench: 48 prompts at concurrency 4, all at once, in 6.47 s
  output tokens                   1536
  output tokens/s               237.50
  prompt tokens                   1624
  mean accept length              2.95
  TTFT ms p50 / p99      124.7 / 210.3
  ITL ms p50 / p99         11.3 / 94.8
";
        assert_eq!(render(&out, false), expected);
        let mut paced = out;
        paced["request_rate"] = json!(2.5);
        assert!(render(&paced, true).starts_with("bench: 48 prompts at concurrency 4, arriving at 2.5 a second, in 6.47 s\n"));
        assert!(render(&paced, true).ends_with("  token ids, prompt 1: [5,9]\n"));
    }

    #[test]
    fn verbose_adds_each_prompts_token_ids_and_one_run_has_one_column() {
        let mut v = out();
        let table = render(&v, true);
        assert!(table.ends_with("of it\n  token ids, prompt 1: [5,9,11]\n  token ids, prompt 2: [40]\n"), "{table}");
        for key in ["target_only", "identical", "memory_bandwidth_gb_s"] {
            v.as_object_mut().unwrap().remove(key);
        }
        let table = render(&v, false);
        assert!(
            table.starts_with(
                "bench: 2 prompts on cpu, tp 1\n                                   run\n  tokens                            32\n"
            ),
            "{table}"
        );
        assert!(!table.contains("identical") && !table.contains("bandwidth"), "{table}");
    }
}
