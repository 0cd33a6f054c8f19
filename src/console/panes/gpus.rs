//! GPUs: memory used/total as a bar, utilisation, temperature and power for each GPU, under
//! column headers (dropped before a GPU row is), from the NVML sampler; or the one line saying
//! there is none and the CPU engine is in use. A replayed text log brings its own GPUs instead:
//! the memory its lines state, per TP rank.

use std::collections::BTreeMap;

use ratatui::buffer::Buffer;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget, Wrap};

use super::pane::{bar, fmt_bytes, Pane};
use crate::console::scroll::Scroll;
use crate::console::text::truncate;
use crate::event::GpuSample;

/// The pane's state: the latest sample of every GPU, or why there is none; and the memory a
/// replayed log stated, by GPU.
#[derive(Clone, Debug, Default)]
pub struct Gpus {
    samples: Vec<GpuSample>,
    note: Option<String>,
    logged: BTreeMap<u32, LoggedMemory>,
}

/// One GPU's memory as the log last stated it (a figure it never gave stays unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoggedMemory {
    pub free_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
}

impl Gpus {
    pub(crate) fn on_telemetry(&mut self, samples: Vec<GpuSample>, note: Option<String>) {
        self.samples = samples;
        self.note = note;
    }

    pub(crate) fn on_gpu_memory(&mut self, gpu: u32, free_bytes: Option<u64>, total_bytes: Option<u64>) {
        let known = self.logged.entry(gpu).or_default();
        known.free_bytes = free_bytes.or(known.free_bytes);
        known.total_bytes = total_bytes.or(known.total_bytes);
    }

    /// Whether there is anything to show yet: a sample, the note saying there is none, or a
    /// logged figure.
    pub fn has_content(&self) -> bool {
        !self.samples.is_empty() || self.note.is_some() || !self.logged.is_empty()
    }

    /// The memory the replayed log stated, by GPU.
    pub fn logged(&self) -> &BTreeMap<u32, LoggedMemory> {
        &self.logged
    }
}

pub(super) fn draw(pane: &Pane<'_>, gpus: &Gpus, scroll: Scroll, buf: &mut Buffer) {
    if gpus.samples.is_empty() && !gpus.logged.is_empty() {
        return draw_logged(pane, &gpus.logged, scroll, buf);
    }
    let title = match gpus.samples.len() {
        0 => " GPUs ".to_string(),
        n => format!(" GPUs · {n} "),
    };
    let inner = pane.frame(Line::styled(title, pane.theme.title()), buf);
    if gpus.samples.is_empty() {
        let text = gpus.note.clone().unwrap_or_else(|| "waiting for the first GPU sample…".to_string());
        Paragraph::new(Line::styled(text, pane.theme.dim())).wrap(Wrap { trim: true }).render(inner, buf);
        return;
    }
    let width = inner.width as usize;
    let height = inner.height as usize;
    let mut rows: Vec<Line> = Vec::new();
    let with_header = height > gpus.samples.len();
    if with_header {
        let header =
            format!("{:>2} {:<12} {:<width$}{}", "#", "name", "memory", TAIL_HEADER, width = width.saturating_sub(16 + TAIL_HEADER.len()));
        rows.push(Line::styled(truncate(&header, width), pane.theme.dim()));
    }
    let body = height - usize::from(with_header);
    let top = scroll.top(gpus.samples.len(), body, 0);
    rows.extend(gpus.samples.iter().skip(top).take(body).map(|g| gpu_row(pane, g, width)));
    Paragraph::new(rows).render(inner, buf);
}

/// The headers of the columns after the memory bar, as wide as `gpu_row`'s tail.
const TAIL_HEADER: &str = " util  temp  power";

fn gpu_row<'a>(pane: &Pane<'_>, g: &GpuSample, width: usize) -> Line<'a> {
    let lead = format!("{:>2} {:<12} ", g.index, truncate(&g.name, 12));
    let mem = format!(" {}/{}", fmt_bytes(g.memory_used_bytes), fmt_bytes(g.memory_total_bytes));
    let tail = format!(" {:>3}% {:>3}°C {:>4.0} W", g.utilization_pct, g.temperature_c, g.power_w);
    let used = lead.chars().count() + mem.chars().count() + tail.chars().count();
    let bar_width = width.saturating_sub(used).clamp(3, 40);
    let fraction = if g.memory_total_bytes == 0 { 0.0 } else { g.memory_used_bytes as f64 / g.memory_total_bytes as f64 };
    let (filled, empty) = bar(bar_width, fraction);
    let hot = g.temperature_c >= 85 || fraction >= 0.95;
    Line::from(vec![
        Span::raw(lead),
        Span::styled(filled, if hot { pane.theme.warning() } else { pane.theme.gauge() }),
        Span::styled(empty, pane.theme.dim()),
        Span::raw(mem),
        Span::raw(tail),
    ])
}

/// A replay's GPUs: what the log says of each rank's memory, used of total as a bar where it
/// gives the total, else the free memory alone. The log says nothing of load, heat or power.
fn draw_logged(pane: &Pane<'_>, logged: &BTreeMap<u32, LoggedMemory>, scroll: Scroll, buf: &mut Buffer) {
    let title = format!(" GPUs · {} in the log ", logged.len());
    let inner = pane.frame(Line::styled(title, pane.theme.title()), buf);
    let width = inner.width as usize;
    let top = scroll.top(logged.len(), inner.height as usize, 0);
    let rows: Vec<Line> = logged
        .iter()
        .skip(top)
        .map(|(&gpu, m)| {
            let lead = format!("{gpu:>2} TP{gpu:<10} ");
            let free = m.free_bytes.map(|f| format!(" {} free", fmt_bytes(f))).unwrap_or_default();
            let Some(total) = m.total_bytes else {
                return Line::from(vec![
                    Span::raw(lead),
                    Span::raw(free.trim_start().to_string()),
                    Span::styled(" (no total in the log)", pane.theme.dim()),
                ]);
            };
            let used = m.free_bytes.map(|f| total.saturating_sub(f));
            let mem = match used {
                Some(u) => format!(" {}/{}", fmt_bytes(u), fmt_bytes(total)),
                None => format!(" ?/{}", fmt_bytes(total)),
            };
            let bar_width = width.saturating_sub(lead.chars().count() + mem.chars().count() + free.chars().count()).clamp(3, 40);
            let fraction = used.map_or(0.0, |u| u as f64 / total.max(1) as f64);
            let (filled, empty) = bar(bar_width, fraction);
            let style = if fraction >= 0.95 { pane.theme.warning() } else { pane.theme.gauge() };
            Line::from(vec![
                Span::raw(lead),
                Span::styled(filled, style),
                Span::styled(empty, pane.theme.dim()),
                Span::raw(mem),
                Span::raw(free),
            ])
        })
        .collect();
    Paragraph::new(rows).render(inner, buf);
}
