//! `/metrics`: Prometheus text under SGLang's metric names, so dashboards and scrapers
//! written for `sglang.launch_server` read specdeck unchanged.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::generator::Load;

/// The window `sglang:gen_throughput` averages over.
const THROUGHPUT_WINDOW: Duration = Duration::from_secs(5);

pub struct Metrics {
    registry: Registry,
    prompt_tokens: Counter,
    generation_tokens: Counter,
    ttft: Histogram,
    itl: Histogram,
    accept_length: Gauge<f64, AtomicU64>,
    running: Gauge,
    queued: Gauge,
    gen_throughput: Gauge<f64, AtomicU64>,
    /// Tokens generated lately, with when.
    recent: Mutex<VecDeque<(Instant, usize)>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            prompt_tokens: Counter::default(),
            generation_tokens: Counter::default(),
            // 1 ms to about 33 s.
            ttft: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            itl: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            accept_length: Gauge::default(),
            running: Gauge::default(),
            queued: Gauge::default(),
            gen_throughput: Gauge::default(),
            recent: Mutex::default(),
            registry: Registry::default(),
        };
        registry.register("sglang:prompt_tokens", "Prompt tokens of the requests started", m.prompt_tokens.clone());
        registry.register("sglang:generation_tokens", "Tokens generated", m.generation_tokens.clone());
        registry.register("sglang:time_to_first_token_seconds", "Seconds from a request's arrival to its first token", m.ttft.clone());
        registry.register("sglang:inter_token_latency_seconds", "Seconds between two tokens of a request", m.itl.clone());
        registry.register("sglang:spec_accept_length", "Mean tokens per verify step of the last finished request", m.accept_length.clone());
        registry.register("sglang:num_running_reqs", "Requests the engine is generating for", m.running.clone());
        registry.register("sglang:num_queue_reqs", "Requests waiting in the queue", m.queued.clone());
        registry.register("sglang:gen_throughput", "Generated tokens per second over the last 5 s", m.gen_throughput.clone());
        Metrics { registry, ..m }
    }
}

impl Metrics {
    pub fn on_started(&self, prompt_tokens: usize) {
        self.prompt_tokens.inc_by(prompt_tokens as u64);
    }

    /// `tokens` new tokens of one request; `gap` the seconds since its previous tokens (or
    /// since its arrival, for the first).
    pub fn on_tokens(&self, tokens: usize, gap: f64, first: bool) {
        self.generation_tokens.inc_by(tokens as u64);
        if first {
            self.ttft.observe(gap);
        } else {
            // Tokens accepted together arrive together: the gap is spread over them.
            for _ in 0..tokens {
                self.itl.observe(gap / tokens as f64);
            }
        }
        self.recent.lock().expect("metrics lock").push_back((Instant::now(), tokens));
    }

    pub fn on_finished(&self, mean_accept_length: f64) {
        if mean_accept_length > 0.0 {
            self.accept_length.set(mean_accept_length);
        }
    }

    /// The text a scrape gets.
    pub fn render(&self, load: Load) -> String {
        self.running.set(load.running as i64);
        self.queued.set(load.queued as i64);
        let mut recent = self.recent.lock().expect("metrics lock");
        while recent.front().is_some_and(|(t, _)| t.elapsed() > THROUGHPUT_WINDOW) {
            recent.pop_front();
        }
        let tokens: usize = recent.iter().map(|(_, n)| n).sum();
        drop(recent);
        self.gen_throughput.set(tokens as f64 / THROUGHPUT_WINDOW.as_secs_f64());
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglangs_names_with_the_values_observed() {
        let m = Metrics::default();
        m.on_started(7);
        m.on_tokens(1, 0.25, true);
        m.on_tokens(3, 0.003, false);
        m.on_finished(2.5);
        let text = m.render(Load { running: 1, queued: 2 });
        for line in [
            "sglang:prompt_tokens_total 7",
            "sglang:generation_tokens_total 4",
            "sglang:num_running_reqs 1",
            "sglang:num_queue_reqs 2",
            "sglang:spec_accept_length 2.5",
            "sglang:gen_throughput 0.8",
            "sglang:time_to_first_token_seconds_count 1",
            "sglang:time_to_first_token_seconds_sum 0.25",
            "sglang:inter_token_latency_seconds_count 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
