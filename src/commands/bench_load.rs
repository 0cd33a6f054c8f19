//! `specdeck bench --concurrency N [--request-rate R]`: the prompts sent to the in-process
//! scheduler (`engine::serving`) at most N at a time, arriving as a Poisson process of R
//! requests a second (all at once without R), and the serving figures: output tokens/s,
//! accept length, TTFT and ITL percentiles.

use std::time::{Duration, Instant};

use anyhow::anyhow;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use crate::engine::serving::{FinishReason, Prompt, SamplingParams, ServeConfig, ServeEvent, ServeHandle, ServeRequest};
use crate::event::EventSink;
use crate::preflight::check_spec;
use crate::spec::LaunchSpec;

/// The arrival offsets of `n` requests at `rate` a second (seeded, so runs compare).
pub fn arrivals(n: usize, rate: Option<f64>) -> Vec<Duration> {
    let Some(rate) = rate.filter(|r| r.is_finite() && *r > 0.0) else { return vec![Duration::ZERO; n] };
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            let at = Duration::from_secs_f64(t);
            t += -(1.0 - rng.random::<f64>()).ln() / rate;
            at
        })
        .collect()
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Run every prompt through a serving engine launched from `spec`, `concurrency` at a time.
pub fn run(
    spec: &LaunchSpec,
    prompts: &[String],
    chat: bool,
    max_tokens: usize,
    concurrency: usize,
    rate: Option<f64>,
) -> anyhow::Result<Value> {
    let concurrency = concurrency.max(1);
    let spec = LaunchSpec { max_running_requests: Some(spec.max_running_requests.unwrap_or(concurrency as u32)), ..spec.clone() };
    let (sink, _events) = EventSink::channel();
    let handle = ServeHandle::start(
        &spec,
        sink,
        std::sync::Arc::new(check_spec),
        ServeConfig { max_queued: Some(prompts.len()), log_requests: false },
    )
    .map_err(|f| anyhow!("the launch failed: {}", f.message))?;
    // The requests' clients are tasks of one thread: a step's tokens wake it once, not a
    // thread per request (64 threads woken a step took the serving thread's CPU).
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
    let start = Instant::now();
    let results = runtime.block_on(async {
        let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency));
        let mut clients = Vec::with_capacity(prompts.len());
        for (prompt, at) in prompts.iter().zip(arrivals(prompts.len(), rate)) {
            tokio::time::sleep(at.saturating_sub(start.elapsed())).await;
            let slot = slots.clone().acquire_owned().await?;
            let req = ServeRequest {
                prompt: Prompt::Text { text: prompt.clone(), chat },
                max_tokens,
                sampling: SamplingParams::default(),
                stop: Vec::new(),
                ignore_eos: true,
                endpoint: "bench",
            };
            let (_, mut rx) = handle.submit(req).map_err(|e| anyhow!("submit: {e}"))?;
            clients.push(tokio::spawn(async move {
                let mut tokens = Vec::new();
                let reason = loop {
                    match rx.recv().await {
                        Some(ServeEvent::Started { .. }) => {}
                        Some(ServeEvent::Tokens { ids, .. }) => tokens.extend(ids),
                        Some(ServeEvent::Finished { reason, .. }) => break reason,
                        None => break FinishReason::Error("the engine went away".into()),
                    }
                };
                drop(slot);
                (tokens, reason)
            }));
        }
        let mut results = Vec::with_capacity(clients.len());
        for client in clients {
            results.push(client.await?);
        }
        anyhow::Ok(results)
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let stats = handle.stats();
    let latency = handle.take_latency_samples();
    handle.shutdown();
    if let Some((_, reason)) = results.iter().find(|(_, r)| matches!(r, FinishReason::Error(_) | FinishReason::Cancelled)) {
        return Err(anyhow!("a request ended with {reason:?}"));
    }
    let output: usize = results.iter().map(|(t, _)| t.len()).sum();
    let t = stats.step_times;
    let per_step = |s: f64| s * 1e3 / t.steps.max(1) as f64;
    let load = Load { concurrency, rate, prompts: prompts.len(), seconds, output: output as u64, prompt_tokens: stats.prompt_tokens_total };
    let mut out = load.figures(&latency.ttft_seconds, &latency.itl_seconds);
    // Over the whole run: the recent-steps figure would see only the drain at its end.
    let verifies = stats.spec_verifies_total.max(1) as f64;
    out["mean_accept_length"] = json!(stats.spec_accepted_total as f64 / verifies);
    // Where a scheduler step's time went, on average: the host's parts and the wait for the device.
    out["step_ms"] = json!({"steps": t.steps, "schedule": per_step(t.schedule_s), "launch": per_step(t.launch_s), "wait": per_step(t.wait_s),
                            "commit": per_step(t.commit_s), "publish": per_step(t.publish_s),
                            "padding_seqs": t.padding_seqs as f64 / t.steps.max(1) as f64});
    out["token_ids"] = results.iter().map(|(t, _)| json!(t)).collect();
    Ok(out)
}

/// What a load run measured, in process or over HTTP (`bench_http`).
pub(super) struct Load {
    pub concurrency: usize,
    pub rate: Option<f64>,
    pub prompts: usize,
    pub seconds: f64,
    pub output: u64,
    pub prompt_tokens: u64,
}

impl Load {
    /// The figures both kinds of load run report, TTFT and ITL samples in seconds.
    pub fn figures(&self, ttft: &[f64], itl: &[f64]) -> Value {
        let ms = |v: &[f64], p| percentile(v.to_vec(), p) * 1e3;
        json!({
            "concurrency": self.concurrency,
            "request_rate": self.rate,
            "prompts": self.prompts,
            "seconds": self.seconds,
            "output_tokens": self.output,
            "output_tokens_per_s": self.output as f64 / self.seconds,
            "prompt_tokens": self.prompt_tokens,
            "ttft_ms": {"p50": ms(ttft, 0.5), "p99": ms(ttft, 0.99)},
            "itl_ms": {"p50": ms(itl, 0.5), "p99": ms(itl, 0.99)},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_all_at_once_without_a_rate_and_a_seeded_poisson_process_with_one() {
        assert_eq!(arrivals(3, None), vec![Duration::ZERO; 3]);
        let a = arrivals(2000, Some(10.0));
        assert_eq!(a, arrivals(2000, Some(10.0)));
        assert_eq!(a[0], Duration::ZERO);
        // 1999 gaps of mean 0.1 s: the last arrival near 199.9 s (the bound is ±5 %).
        let last = a[1999].as_secs_f64();
        assert!((last - 199.9).abs() < 10.0, "{last}");
        assert_eq!((percentile(vec![3.0, 1.0, 2.0], 0.5), percentile(vec![], 0.5)), (2.0, 0.0));
    }
}
