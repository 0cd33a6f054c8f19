//! Generate: the prompt input and the streaming output, with accepted draft tokens styled
//! apart from the target's own; live tokens/s, mean accept length and the accept-length
//! histogram.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};
use tui_input::{Input as TextInput, InputRequest};

use super::pane::{bar, Pane};
use crate::console::scroll::Scroll;
use crate::console::text::{truncate, wrap_runs};
use crate::event::GenerationStats;

/// The pane's state: the prompt being typed and the generation it started.
#[derive(Clone, Debug)]
pub struct Generate {
    prompt: TextInput,
    generation: Generation,
    /// A prompt given up front is sent once, at the first ready.
    auto_send: bool,
    /// Prompts go through the tokenizer's chat template.
    chat: bool,
}

impl Generate {
    pub(crate) fn new(prompt: Option<String>, chat: bool) -> Generate {
        let auto_send = prompt.is_some();
        Generate { prompt: TextInput::new(prompt.unwrap_or_default()), generation: Generation::default(), auto_send, chat }
    }

    pub fn chat(&self) -> bool {
        self.chat
    }

    /// Chat template on or off; returns the new setting.
    pub(crate) fn toggle_chat(&mut self) -> bool {
        self.chat = !self.chat;
        self.chat
    }

    pub fn prompt(&self) -> &str {
        self.prompt.value()
    }

    pub fn generation(&self) -> &Generation {
        &self.generation
    }

    pub(crate) fn edit(&mut self, request: InputRequest) {
        self.prompt.handle(request);
    }

    /// True once: whether the prompt given up front is still to be sent.
    pub(crate) fn take_auto_send(&mut self) -> bool {
        std::mem::take(&mut self.auto_send)
    }

    /// A new launch has no generation yet.
    pub(crate) fn clear_launch(&mut self) {
        self.generation = Generation::default();
    }

    /// A prompt on the stream (sent here, or replayed) fills the input and starts a generation.
    pub(crate) fn on_prompt(&mut self, t: f64, text: String) {
        if self.prompt.value() != text {
            self.prompt = TextInput::new(text.clone());
        }
        self.generation = Generation { prompt: text, sent_t: t, active: true, ..Generation::default() };
    }

    pub(crate) fn on_token(&mut self, t: f64, ids: usize, text: &str, drafted: bool) {
        self.generation.push(t, ids, text, drafted);
    }

    /// The engine's figures end the generation; returns whether one was running.
    pub(crate) fn on_stats(&mut self, stats: GenerationStats) -> bool {
        self.generation.stats = Some(stats);
        self.stop()
    }

    /// End the generation without figures; returns whether one was running.
    pub(crate) fn stop(&mut self) -> bool {
        std::mem::replace(&mut self.generation.active, false)
    }
}

/// The generation in progress or last finished.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Generation {
    pub prompt: String,
    /// Committed text runs; `true` marks accepted draft tokens.
    pub pieces: Vec<(String, bool)>,
    pub sent_t: f64,
    pub last_t: Option<f64>,
    pub tokens: usize,
    pub steps: usize,
    /// `histogram[n]`: verify steps that emitted n tokens (live count from Token events).
    pub histogram: Vec<u64>,
    pending_drafted: usize,
    /// The engine's own figures, once it sends them.
    pub stats: Option<GenerationStats>,
    pub active: bool,
}

impl Generation {
    pub fn tokens_per_s(&self) -> Option<f64> {
        if let Some(s) = &self.stats {
            return Some(s.tokens_per_s);
        }
        let span = self.last_t? - self.sent_t;
        (span > 0.0).then(|| self.tokens as f64 / span)
    }

    pub fn mean_accept_length(&self) -> Option<f64> {
        if let Some(s) = &self.stats {
            return Some(s.mean_accept_length);
        }
        (self.steps > 0).then(|| self.tokens as f64 / self.steps as f64)
    }

    pub fn accept_histogram(&self) -> &[u64] {
        match &self.stats {
            Some(s) if !s.accept_histogram.is_empty() => &s.accept_histogram,
            _ => &self.histogram,
        }
    }

    fn push(&mut self, t: f64, ids: usize, text: &str, drafted: bool) {
        match self.pieces.last_mut() {
            Some((s, d)) if *d == drafted => s.push_str(text),
            _ => self.pieces.push((text.to_string(), drafted)),
        }
        self.tokens += ids;
        self.last_t = Some(t);
        if drafted {
            self.pending_drafted += ids;
        } else {
            // The target's own token closes a verify step.
            let len = self.pending_drafted + ids;
            if self.histogram.len() <= len {
                self.histogram.resize(len + 1, 0);
            }
            self.histogram[len] += 1;
            self.steps += 1;
            self.pending_drafted = 0;
        }
    }
}

/// Whether the prompt can be sent: a recording's prompts were sent when it was recorded.
pub(super) enum Prompting {
    Recorded,
    NotReady,
    Ready,
}

pub(super) fn draw(pane: &Pane<'_>, generate: &Generate, prompting: Prompting, inserting: bool, scroll: Scroll, buf: &mut Buffer) {
    let theme = pane.theme;
    let mut title = vec![
        Span::styled(" Generate · ", theme.title()),
        Span::styled("draft-accepted", theme.drafted_token()),
        Span::styled(" / ", theme.title()),
        Span::styled("target", theme.target_token()),
        Span::styled(" tokens ", theme.title()),
    ];
    if generate.chat {
        title.push(Span::styled("· chat ", theme.title()));
    }
    let title = Line::from(title);
    let inner = pane.frame(title, buf);
    let generation = &generate.generation;
    let hist = generation.accept_histogram();
    let hist_rows = hist.iter().skip(1).count().min((inner.height as usize).saturating_sub(4) / 2);
    let [prompt_area, output_area, stats_area, hist_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1), Constraint::Length(1), Constraint::Length(hist_rows as u16)])
            .areas(inner);
    draw_prompt(pane, &generate.prompt, inserting, prompt_area, buf);
    let width = output_area.width as usize;
    let runs = generation.pieces.iter().map(|(text, drafted)| (text.as_str(), *drafted));
    let rows = if generation.pieces.is_empty() { Vec::new() } else { wrap_runs(runs, width) };
    // Show the tail: the newest text stays in view as it streams, unless scrolled back.
    let start = scroll.top(rows.len(), output_area.height as usize, rows.len());
    let end = (start + output_area.height as usize).min(rows.len());
    let lines: Vec<Line> = rows[start..end]
        .iter()
        .map(|row| {
            Line::from(
                row.iter()
                    .map(|(t, drafted)| Span::styled(t.clone(), if *drafted { theme.drafted_token() } else { theme.target_token() }))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let body = if lines.is_empty() {
        let hint = match prompting {
            Prompting::Recorded => "A recording: no engine to prompt.",
            Prompting::NotReady => "The engine is not ready yet.",
            Prompting::Ready => "Enter sends the prompt.",
        };
        vec![Line::styled(hint, theme.dim())]
    } else {
        lines
    };
    Paragraph::new(body).render(output_area, buf);
    Paragraph::new(stats_line(pane, generation)).render(stats_area, buf);
    draw_histogram(pane, hist, hist_rows, hist_area, buf);
}

fn draw_prompt(pane: &Pane<'_>, prompt: &TextInput, inserting: bool, area: ratatui::layout::Rect, buf: &mut Buffer) {
    let theme = pane.theme;
    // The prompt is one line on screen; show its newlines as ↵ (one cell each, so the
    // cursor arithmetic is unchanged).
    let value = prompt.value().replace('\n', "↵");
    let value = value.as_str();
    let width = (area.width as usize).saturating_sub(3);
    let mut spans = vec![Span::styled("> ", theme.key())];
    if inserting {
        let cursor = prompt.visual_cursor();
        let scroll = prompt.visual_scroll(width);
        let shown: String = value.chars().skip(scroll).collect();
        let at = cursor - scroll;
        let before: String = shown.chars().take(at).collect();
        let under: String = shown.chars().nth(at).map(String::from).unwrap_or_else(|| " ".into());
        let after: String = shown.chars().skip(at + 1).collect();
        spans.extend([Span::raw(before), Span::styled(under, theme.cursor()), Span::raw(after)]);
    } else {
        spans.push(Span::raw(truncate(value, width)));
    }
    Paragraph::new(Line::from(spans)).render(area, buf);
}

fn stats_line<'a>(pane: &Pane<'_>, g: &Generation) -> Line<'a> {
    let theme = pane.theme;
    if g.tokens == 0 && g.stats.is_none() {
        return Line::styled(if g.active { "generating…" } else { "" }, theme.dim());
    }
    let rate = g.tokens_per_s().map(|r| format!("{r:.1}")).unwrap_or_else(|| "–".into());
    let accept = g.mean_accept_length().map(|a| format!("{a:.2}")).unwrap_or_else(|| "–".into());
    let tokens = g.stats.as_ref().map(|s| s.tokens).unwrap_or(g.tokens);
    let state = if g.active { " · generating…" } else { " · done" };
    Line::from(vec![
        Span::styled(rate, theme.good()),
        Span::raw(" tok/s · accept "),
        Span::styled(accept, theme.good()),
        Span::raw(format!(" · {tokens} tokens")),
        Span::styled(state, theme.dim()),
    ])
}

fn draw_histogram(pane: &Pane<'_>, hist: &[u64], rows: usize, area: ratatui::layout::Rect, buf: &mut Buffer) {
    if rows == 0 {
        return;
    }
    let max = hist.iter().copied().max().unwrap_or(0).max(1);
    let width = area.width as usize;
    // The top bucket (every draft token accepted) stays when the rows run out.
    let top = hist.len() - 1;
    let shown = (1..hist.len()).take(rows.saturating_sub(1)).chain((rows > 0).then_some(top)).collect::<std::collections::BTreeSet<_>>();
    let lines: Vec<Line> = shown
        .into_iter()
        .map(|len| (len, &hist[len]))
        .map(|(len, &count)| {
            let lead = format!("accept {len:>2} ");
            let tail = format!(" {count}");
            let bar_width = width.saturating_sub(lead.len() + tail.len() + 1).min(40);
            let (filled, empty) = bar(bar_width, count as f64 / max as f64);
            Line::from(vec![
                Span::styled(lead, pane.theme.dim()),
                Span::styled(filled, pane.theme.gauge()),
                Span::styled(empty, pane.theme.dim()),
                Span::raw(tail),
            ])
        })
        .collect();
    Paragraph::new(lines).render(area, buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replayed_prompt_fills_the_input_and_starts_the_generation() {
        let mut g = Generate::new(None, false);
        g.on_prompt(3.0, "To be".into());
        assert_eq!((g.prompt(), g.generation.prompt.as_str(), g.generation.sent_t), ("To be", "To be", 3.0));
        assert!(g.generation.active);
    }
}
