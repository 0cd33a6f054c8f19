//! Phases: the start-up timeline with state and elapsed time per phase, load gauges (bytes,
//! rate, ETA; one per GPU when sharded), a gauge per graph-capture batch size, the ready time
//! of a relaunch next to the cold start, and the fixed command once a remedy is applied.

use std::collections::BTreeMap;

use ratatui::buffer::Buffer;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::pane::{bar, fmt_bytes, fmt_secs, Pane};
use crate::console::scroll::Scroll;
use crate::console::text::{truncate, wrap_words};
use crate::event::{PhaseState, ProgressUnit};
use crate::phase::PhaseId;

const NAME_WIDTH: usize = 21;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct PhaseRecord {
    pub state: Option<PhaseState>,
    pub started: Option<f64>,
    pub ended: Option<f64>,
    pub detail: Option<String>,
}

impl PhaseRecord {
    /// Seconds spent so far (running phases count up to `now`).
    pub fn elapsed(&self, now: f64) -> Option<f64> {
        let start = self.started?;
        Some((self.ended.unwrap_or(now) - start).max(0.0))
    }
}

/// One progress counter: a file of a load on one GPU, or one graph-capture batch size.
#[derive(Clone, Debug, PartialEq)]
pub struct Counter {
    pub phase: PhaseId,
    pub unit: ProgressUnit,
    pub gpu: Option<u32>,
    pub label: String,
    pub done: u64,
    pub total: u64,
    pub first_t: f64,
    pub first_done: u64,
    pub last_t: f64,
}

impl Counter {
    /// The counter a progress event at `t` starts.
    pub(crate) fn first(t: f64, phase: PhaseId, unit: ProgressUnit, gpu: Option<u32>, label: String, done: u64, total: u64) -> Counter {
        Counter { phase, unit, gpu, label, done, total, first_t: t, first_done: done, last_t: t }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadyInfo {
    pub attempt: u32,
    pub elapsed_s: f64,
    pub reused_target: bool,
}

/// The pane's state: the current launch's phases and counters, and the ready times of the
/// cold start and the latest relaunch (those outlive a launch).
#[derive(Clone, Debug, Default)]
pub struct Phases {
    records: BTreeMap<PhaseId, PhaseRecord>,
    counters: Vec<Counter>,
    cold_start: Option<ReadyInfo>,
    relaunch: Option<ReadyInfo>,
}

impl Phases {
    /// A new launch starts the timeline again.
    pub(crate) fn clear_launch(&mut self) {
        self.records.clear();
        self.counters.clear();
    }

    pub(crate) fn on_phase(&mut self, t: f64, phase: PhaseId, state: PhaseState, detail: Option<String>) {
        let record = self.records.entry(phase).or_default();
        match state {
            PhaseState::Started => {
                record.started = Some(t);
                record.ended = None;
            }
            // A phase may end without having been reported started (ready, or
            // skipped ones); it then has no elapsed time.
            _ => record.ended = Some(t),
        }
        record.state = Some(state);
        record.detail = detail;
    }

    /// Count a progress event, given as the counter it starts when it is the first of its
    /// phase, GPU and label. A batch-size count that goes on from the last one of its phase
    /// and GPU (same total, further along) is that capture moving to its next batch size, as
    /// SGLang's one tqdm bar does: it stays one gauge, labelled with the size now captured.
    pub(crate) fn on_progress(&mut self, sample: Counter) {
        let same_place = |c: &Counter| c.phase == sample.phase && c.gpu == sample.gpu;
        let counter = if sample.unit == ProgressUnit::BatchSize {
            // Only the latest capture of the place can go on: an earlier one has ended.
            let advancing = |c: &Counter| c.unit == ProgressUnit::BatchSize && c.total == sample.total && c.done < sample.done;
            self.counters.iter_mut().rev().find(|c| same_place(c)).filter(|c| c.label == sample.label || advancing(c))
        } else {
            self.counters.iter_mut().find(|c| same_place(c) && c.label == sample.label)
        };
        match counter {
            Some(c) => {
                c.label = sample.label;
                c.done = sample.done;
                c.total = sample.total;
                c.last_t = sample.last_t;
            }
            None => self.counters.push(sample),
        }
    }

    /// The first ready without a kept target is the cold start; every later one a relaunch.
    pub(crate) fn on_ready(&mut self, info: ReadyInfo) {
        if self.cold_start.is_none() && !info.reused_target {
            self.cold_start = Some(info);
        } else {
            self.relaunch = Some(info);
        }
    }

    pub fn record(&self, phase: PhaseId) -> Option<&PhaseRecord> {
        self.records.get(&phase)
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn cold_start(&self) -> Option<ReadyInfo> {
        self.cold_start
    }

    pub fn relaunch(&self) -> Option<ReadyInfo> {
        self.relaunch
    }

    pub fn state_of(&self, phase: PhaseId) -> Option<PhaseState> {
        self.records.get(&phase).and_then(|r| r.state)
    }

    /// Whether a phase is running (its elapsed time moves with the clock).
    pub fn any_running(&self) -> bool {
        self.records.values().any(|r| r.state == Some(PhaseState::Started))
    }

    /// The first phase, in timeline order, that failed.
    pub fn failed(&self) -> Option<PhaseId> {
        self.records.iter().find(|(_, r)| r.state == Some(PhaseState::Failed)).map(|(&phase, _)| phase)
    }

    /// The latest phase of the timeline that is running.
    pub fn latest_running(&self) -> Option<PhaseId> {
        PhaseId::ALL.into_iter().rev().find(|&p| self.state_of(p) == Some(PhaseState::Started))
    }
}

/// What the pane shows besides the phases' own state.
pub(super) struct View {
    pub attempt: u32,
    pub now: f64,
    /// The launch line with the applied remedies, once there are any.
    pub fixed: Option<String>,
    pub scroll: Scroll,
}

pub(super) fn draw(pane: &Pane<'_>, phases: &Phases, view: &View, buf: &mut Buffer) {
    let (attempt, now) = (view.attempt, view.now);
    let title = match attempt {
        0 => " Phases ".to_string(),
        1 => " Phases · launch ".to_string(),
        n => format!(" Phases · relaunch #{} ", n - 1),
    };
    let inner = pane.frame(Line::styled(title, pane.theme.title()), buf);
    let width = inner.width as usize;
    let mut rows: Vec<Line> = Vec::new();
    let mut current = 0;
    for phase in PhaseId::STARTUP {
        let record = phases.record(phase);
        if record.is_some_and(|r| r.state.is_some()) {
            current = rows.len();
        }
        rows.push(phase_row(pane, phase, record, now, width));
        for gauge in gauges(pane, phases, phase, width) {
            rows.push(gauge);
        }
    }
    rows.extend(ready_rows(pane, phases));
    if let Some(fixed) = &view.fixed {
        rows.push(Line::styled("fixed command (y copies it):", pane.theme.title()));
        rows.extend(wrap_words(fixed, width.saturating_sub(2)).into_iter().map(|row| Line::raw(format!("  {row}"))));
    }
    // Keep the phase in progress (or the one that failed) in view when rows do not fit; once
    // ready, the end: the ready times and all of the fixed command.
    let height = inner.height as usize;
    let ready = phases.state_of(PhaseId::Ready) == Some(PhaseState::Done);
    let own = if ready { rows.len() } else { current.saturating_sub(height / 2) };
    let start = view.scroll.top(rows.len(), height, own);
    let shown: Vec<Line> = rows.into_iter().skip(start).take(height).collect();
    Paragraph::new(shown).render(inner, buf);
}

fn phase_row<'a>(pane: &Pane<'_>, phase: PhaseId, record: Option<&PhaseRecord>, now: f64, width: usize) -> Line<'a> {
    let theme = pane.theme;
    let state = record.and_then(|r| r.state);
    let (symbol, word) = match state {
        None => ("·", ""),
        Some(PhaseState::Started) => ("▸", "running"),
        Some(PhaseState::Done) => ("✓", "done"),
        Some(PhaseState::Failed) => ("✗", "failed"),
        Some(PhaseState::Skipped) => ("–", "skipped"),
    };
    let style = theme.phase(state);
    let elapsed = match (state, record.and_then(|r| r.elapsed(now))) {
        (Some(PhaseState::Skipped), _) | (_, None) => String::new(),
        (_, Some(e)) => fmt_secs(e),
    };
    // Skipped phases have no time; their reason takes the time's place.
    let elapsed_width = if elapsed.is_empty() { 0 } else { 9 };
    let mut spans = vec![
        Span::styled(format!("{symbol} "), style),
        Span::styled(format!("{:<NAME_WIDTH$}", phase.name()), style),
        Span::styled(format!("{word:<8}"), style),
        Span::raw(format!("{elapsed:>elapsed_width$}")),
    ];
    if let Some(detail) = record.and_then(|r| r.detail.as_deref()) {
        let room = width.saturating_sub(2 + NAME_WIDTH + 8 + elapsed_width + 2);
        if room > 3 {
            spans.push(Span::styled(format!("  {}", truncate(detail, room)), theme.dim()));
        }
    }
    Line::from(spans)
}

/// Progress rows under a phase: one per GPU for byte loads, one per batch size for graph
/// capture, one per label otherwise.
fn gauges<'a>(pane: &Pane<'_>, phases: &Phases, phase: PhaseId, width: usize) -> Vec<Line<'a>> {
    let counters: Vec<&Counter> = phases.counters.iter().filter(|c| c.phase == phase).collect();
    let Some(first) = counters.first() else { return Vec::new() };
    let running = phases.state_of(phase) == Some(PhaseState::Started);
    match first.unit {
        ProgressUnit::Bytes => {
            let mut gpus: Vec<Option<u32>> = counters.iter().map(|c| c.gpu).collect();
            gpus.sort();
            gpus.dedup();
            gpus.into_iter()
                .map(|gpu| {
                    let of_gpu: Vec<&Counter> = counters.iter().copied().filter(|c| c.gpu == gpu).collect();
                    byte_gauge(pane, gpu, &of_gpu, running, width)
                })
                .collect()
        }
        ProgressUnit::BatchSize | ProgressUnit::Items => counters
            .iter()
            .map(|c| {
                let label = match c.unit {
                    ProgressUnit::BatchSize => format!("bs {:>4}", c.label),
                    _ => truncate(&c.label, 8),
                };
                let figures = format!(" {}/{}", c.done, c.total);
                gauge_line(pane, label, fraction(c.done, c.total), &[figures], width)
            })
            .collect(),
    }
}

fn fraction(done: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        done as f64 / total as f64
    }
}

fn byte_gauge<'a>(pane: &Pane<'_>, gpu: Option<u32>, counters: &[&Counter], running: bool, width: usize) -> Line<'a> {
    let done: u64 = counters.iter().map(|c| c.done).sum();
    let total: u64 = counters.iter().map(|c| c.total).sum();
    let moved: u64 = counters.iter().map(|c| c.done - c.first_done.min(c.done)).sum();
    let t0 = counters.iter().map(|c| c.first_t).fold(f64::INFINITY, f64::min);
    let t1 = counters.iter().map(|c| c.last_t).fold(f64::NEG_INFINITY, f64::max);
    let rate = if t1 > t0 { Some(moved as f64 / (t1 - t0)) } else { None };
    let amount = format!(" {}/{}", fmt_bytes(done), fmt_bytes(total));
    let rate_text = rate.map(|r| format!(" {}/s", fmt_bytes(r as u64))).unwrap_or_default();
    let eta = match rate {
        Some(r) if running && done < total && r > 0.0 => format!(" ETA {}", fmt_secs((total - done) as f64 / r)),
        _ => String::new(),
    };
    let label = match gpu {
        Some(g) => format!("gpu{g}"),
        None => "load".to_string(),
    };
    // The rate goes before the ETA when they do not both fit.
    let figures = [format!("{amount}{rate_text}{eta}"), format!("{amount}{eta}"), amount];
    gauge_line(pane, label, fraction(done, total), &figures, width)
}

/// A gauge with the first of `figures` (fullest first) that fits beside the narrowest bar.
fn gauge_line<'a>(pane: &Pane<'_>, label: String, fraction: f64, figures: &[String], width: usize) -> Line<'a> {
    let lead = format!("    {label:<8}");
    let room = width.saturating_sub(lead.chars().count() + 4);
    let figures = figures.iter().find(|f| f.chars().count() <= room).unwrap_or(&figures[figures.len() - 1]).clone();
    let bar_width = width.saturating_sub(lead.chars().count() + figures.chars().count()).clamp(4, 30);
    let (filled, empty) = bar(bar_width, fraction);
    Line::from(vec![
        Span::raw(lead),
        Span::styled(filled, pane.theme.gauge()),
        Span::styled(empty, pane.theme.dim()),
        Span::raw(truncate(&figures, width.saturating_sub(12 + bar_width))),
    ])
}

/// The ready line, and after a relaunch its time next to the cold start's.
fn ready_rows<'a>(pane: &Pane<'_>, phases: &Phases) -> Vec<Line<'a>> {
    let theme = pane.theme;
    let mut rows = Vec::new();
    if let Some(cold) = phases.cold_start {
        rows.push(Line::from(vec![Span::styled("cold start ", theme.dim()), Span::styled(fmt_secs(cold.elapsed_s), theme.good())]));
    }
    if let Some(re) = phases.relaunch {
        let kept = if re.reused_target { ", target kept" } else { "" };
        let ratio = match phases.cold_start {
            Some(cold) => format!(" ×{:.2} of cold{kept}", re.elapsed_s / cold.elapsed_s.max(1e-9)),
            None => kept.trim_start_matches(", ").to_string(),
        };
        rows.push(Line::from(vec![
            Span::styled("relaunch   ", theme.dim()),
            Span::styled(fmt_secs(re.elapsed_s), theme.good()),
            Span::raw(ratio),
        ]));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_counters_accumulate_per_gpu_and_label() {
        let mut phases = Phases::default();
        let mut progress = |t, gpu, done| {
            phases.on_progress(Counter::first(
                t,
                PhaseId::TargetLoad,
                ProgressUnit::Bytes,
                Some(gpu),
                "model.safetensors".into(),
                done,
                100,
            ))
        };
        progress(1.0, 0, 10);
        progress(1.0, 1, 20);
        progress(2.0, 0, 60);
        assert_eq!(phases.counters.len(), 2);
        assert_eq!((phases.counters[0].done, phases.counters[0].first_done, phases.counters[0].last_t), (60, 10, 2.0));
    }

    fn batch(phase: PhaseId, bs: &str, done: u64, total: u64) -> Counter {
        Counter::first(done as f64, phase, ProgressUnit::BatchSize, None, bs.into(), done, total)
    }

    /// SGLang's capture bar: `bs=8 0/4`, `bs=4 1/4`, `bs=2 2/4`, `bs=1 3/4`, `bs=1 4/4`.
    #[test]
    fn a_capture_bar_through_its_batch_sizes_is_one_counter() {
        let mut phases = Phases::default();
        for (bs, done) in [("8", 0), ("4", 1), ("2", 2), ("1", 3), ("1", 4)] {
            phases.on_progress(batch(PhaseId::TargetGraphCapture, bs, done, 4));
        }
        // The draft's bar is a capture of its own; a bar that starts again (draft extend)
        // is a new one, even where it comes to a batch size the first one had.
        for (bs, done) in [("4", 0), ("2", 1), ("1", 2), ("4", 0), ("2", 1), ("1", 2)] {
            phases.on_progress(batch(PhaseId::DraftGraphCapture, bs, done, 2));
        }
        let counters: Vec<(PhaseId, &str, u64, u64, f64)> =
            phases.counters.iter().map(|c| (c.phase, c.label.as_str(), c.done, c.first_done, c.last_t)).collect();
        assert_eq!(
            counters,
            [
                (PhaseId::TargetGraphCapture, "1", 4, 0, 4.0),
                (PhaseId::DraftGraphCapture, "1", 2, 0, 2.0),
                (PhaseId::DraftGraphCapture, "1", 2, 0, 2.0)
            ]
        );
        // One gauge per batch size, each counted on its own, stays one gauge each.
        let mut phases = Phases::default();
        for bs in ["1", "2", "4"] {
            phases.on_progress(batch(PhaseId::TargetGraphCapture, bs, 1, 1));
        }
        assert_eq!(phases.counters.len(), 3);
    }
}
