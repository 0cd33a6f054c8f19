//! The serving pane (`launch --port`): requests running and queued, tokens per second in
//! and out, the accept length over the last requests, TTFT and ITL percentiles. Its state is
//! read from the request events alone, so a replayed session shows the same figures.

use std::collections::{BTreeMap, VecDeque};

use ratatui::buffer::Buffer;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::pane::{fmt_secs, Pane};

/// Seconds the token rates average over.
pub const RATE_WINDOW: f64 = 10.0;
/// Finished requests the accept-length line and the percentiles cover.
const HISTORY: usize = 256;
const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

#[derive(Clone, Debug, Default)]
pub struct Serving {
    address: Option<String>,
    model: String,
    /// Queued requests by id, with their arrival times; running ones with their start.
    queued: BTreeMap<u64, f64>,
    running: BTreeMap<u64, f64>,
    /// Ended requests by finish reason (`stop`, `length`, `cancelled`, `invalid`, `error`).
    ended: BTreeMap<String, u64>,
    /// (time, tokens): prompts started and answers finished, for the rates.
    tokens_in: VecDeque<(f64, usize)>,
    tokens_out: VecDeque<(f64, usize)>,
    accept: VecDeque<f64>,
    ttft: VecDeque<f64>,
    itl: VecDeque<f64>,
}

fn keep<T>(q: &mut VecDeque<T>, v: T) {
    q.push_back(v);
    if q.len() > HISTORY {
        q.pop_front();
    }
}

/// The `p`-th percentile (0..=100) by nearest rank.
pub fn percentile(values: &VecDeque<f64>, p: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

impl Serving {
    pub(crate) fn on_serving(&mut self, address: String, model: String) {
        self.address = Some(address);
        self.model = model;
    }

    pub(crate) fn on_queued(&mut self, t: f64, id: u64) {
        self.queued.insert(id, t);
    }

    pub(crate) fn on_started(&mut self, t: f64, id: u64, prompt_tokens: usize) {
        self.queued.remove(&id);
        self.running.insert(id, t);
        self.tokens_in.push_back((t, prompt_tokens));
    }

    pub(crate) fn on_finished(&mut self, t: f64, f: Finished<'_>) {
        self.queued.remove(&f.id);
        self.running.remove(&f.id);
        *self.ended.entry(f.finish_reason.to_string()).or_default() += 1;
        self.tokens_out.push_back((t, f.completion_tokens));
        if f.mean_accept_length > 0.0 {
            keep(&mut self.accept, f.mean_accept_length);
        }
        if let Some(s) = f.ttft_s {
            keep(&mut self.ttft, s);
        }
        if let Some(s) = f.itl_s {
            keep(&mut self.itl, s);
        }
    }

    /// Whether the launch serves (the pane then takes its slot).
    pub fn is_serving(&self) -> bool {
        self.address.is_some()
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Tokens per second in (prompts started) and out (answers finished) over the last
    /// `RATE_WINDOW` seconds before `now`.
    pub fn rates(&self, now: f64) -> (f64, f64) {
        let rate = |q: &VecDeque<(f64, usize)>| {
            q.iter().filter(|(t, _)| now - t <= RATE_WINDOW).map(|(_, n)| *n).sum::<usize>() as f64 / RATE_WINDOW
        };
        (rate(&self.tokens_in), rate(&self.tokens_out))
    }

    /// The accept lengths of the last `width` requests as a sparkline over 1..=max.
    pub fn accept_line(&self, width: usize) -> String {
        let max = self.accept.iter().copied().fold(1.0, f64::max);
        let skip = self.accept.len().saturating_sub(width);
        let level = |a: f64| ((a - 1.0).max(0.0) / (max - 1.0).max(f64::EPSILON) * 7.0).round() as usize;
        self.accept.iter().skip(skip).map(|&a| SPARK[level(a).min(7)]).collect()
    }
}

/// What `RequestFinished` says, as the pane reads it.
pub struct Finished<'a> {
    pub id: u64,
    pub completion_tokens: usize,
    pub finish_reason: &'a str,
    pub ttft_s: Option<f64>,
    pub itl_s: Option<f64>,
    pub mean_accept_length: f64,
}

pub(super) fn draw(pane: &Pane<'_>, s: &Serving, now: f64, buf: &mut Buffer) {
    let title = format!(" Serving · {} ", s.address.as_deref().unwrap_or("-"));
    let inner = pane.frame(Line::styled(title, pane.theme.title()), buf);
    let (tin, tout) = s.rates(now);
    let ended: Vec<String> = s.ended.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let pct = |q: &VecDeque<f64>| match (percentile(q, 50.0), percentile(q, 99.0)) {
        (Some(a), Some(b)) => format!("p50 {} p99 {}", fmt_secs(a), fmt_secs(b)),
        _ => "-".to_string(),
    };
    let last = s.accept.back().map_or("-".to_string(), |a| format!("{a:.2}"));
    let width = (inner.width as usize).saturating_sub(22);
    let lines = vec![
        Line::from(vec![Span::styled("model ", pane.theme.dim()), Span::raw(s.model.clone())]),
        Line::from(format!("running {}  queued {}  {}", s.running(), s.queued(), ended.join("  "))),
        Line::from(format!("tokens/s in {tin:.1}  out {tout:.1}  ({RATE_WINDOW:.0} s)")),
        Line::from(vec![
            Span::styled("accept ", pane.theme.dim()),
            Span::styled(s.accept_line(width), pane.theme.gauge()),
            Span::raw(format!(" last {last}")),
        ]),
        Line::from(format!("TTFT {}", pct(&s.ttft))),
        Line::from(format!("ITL  {}", pct(&s.itl))),
    ];
    Paragraph::new(lines).render(inner, buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(id: u64, tokens: usize, reason: &str, ttft: f64, accept: f64) -> Finished<'_> {
        Finished {
            id,
            completion_tokens: tokens,
            finish_reason: reason,
            ttft_s: Some(ttft),
            itl_s: Some(ttft / 10.0),
            mean_accept_length: accept,
        }
    }

    #[test]
    fn counts_rates_percentiles_and_the_accept_line_follow_the_request_events() {
        let mut s = Serving::default();
        s.on_serving("http://127.0.0.1:30000".into(), "smol".into());
        for id in 1..=3 {
            s.on_queued(1.0, id);
        }
        s.on_started(2.0, 1, 40);
        assert_eq!((s.running(), s.queued()), (1, 2));
        s.on_finished(3.0, finished(1, 16, "length", 0.5, 2.0));
        s.on_started(3.0, 2, 20);
        s.on_finished(4.0, finished(2, 4, "stop", 0.1, 3.0));
        s.on_finished(4.5, finished(3, 0, "cancelled", 0.3, 0.0));
        assert_eq!((s.running(), s.queued()), (0, 0));
        assert_eq!(s.rates(5.0), (6.0, 2.0));
        // Window of 10 s: the first prompt (t 2) is out of it at t 12.5.
        assert_eq!(s.rates(12.5), (2.0, 2.0));
        assert_eq!(percentile(&s.ttft, 50.0), Some(0.3));
        assert_eq!(percentile(&s.ttft, 99.0), Some(0.5));
        assert_eq!(s.accept_line(8), "▅█");
        assert_eq!(s.ended.get("cancelled"), Some(&1));
    }
}
