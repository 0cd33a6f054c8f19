//! Generate: the prompt input and the streaming output, with accepted draft tokens styled
//! apart from the target's own; live tokens/s, mean accept length and the accept-length
//! histogram.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::{bar, Pane};
use crate::console::text::{truncate, wrap_runs};

pub(super) fn draw(pane: &Pane<'_>, buf: &mut Buffer) {
    let s = pane.state;
    let theme = pane.theme;
    let title = Line::from(vec![
        Span::styled(" Generate · ", theme.title()),
        Span::styled("draft-accepted", theme.drafted_token()),
        Span::styled(" / ", theme.title()),
        Span::styled("target", theme.target_token()),
        Span::styled(" tokens ", theme.title()),
    ]);
    let inner = pane.frame(title, buf);
    let hist = s.generation.accept_histogram();
    let hist_rows = hist.iter().skip(1).count().min((inner.height as usize).saturating_sub(4) / 2);
    let [prompt_area, output_area, stats_area, hist_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1), Constraint::Length(1), Constraint::Length(hist_rows as u16)])
            .areas(inner);
    draw_prompt(pane, prompt_area, buf);
    let width = output_area.width as usize;
    let runs = s.generation.pieces.iter().map(|(text, drafted)| (text.as_str(), *drafted));
    let rows = if s.generation.pieces.is_empty() { Vec::new() } else { wrap_runs(runs, width) };
    // Show the tail: the newest text stays in view as it streams.
    let start = rows.len().saturating_sub(output_area.height as usize);
    let lines: Vec<Line> = rows[start..]
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
        let hint = if s.ready.is_some() { "Enter sends the prompt." } else { "The engine is not ready yet." };
        vec![Line::styled(hint, theme.dim())]
    } else {
        lines
    };
    Paragraph::new(body).render(output_area, buf);
    Paragraph::new(stats_line(pane)).render(stats_area, buf);
    draw_histogram(pane, hist, hist_rows, hist_area, buf);
}

fn draw_prompt(pane: &Pane<'_>, area: ratatui::layout::Rect, buf: &mut Buffer) {
    let theme = pane.theme;
    // The prompt is one line on screen; show its newlines as ↵ (one cell each, so the
    // cursor arithmetic is unchanged).
    let value = pane.state.prompt.value().replace('\n', "↵");
    let value = value.as_str();
    let width = (area.width as usize).saturating_sub(3);
    let mut spans = vec![Span::styled("> ", theme.key())];
    if pane.focused {
        let cursor = pane.state.prompt.visual_cursor();
        let scroll = pane.state.prompt.visual_scroll(width);
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

fn stats_line<'a>(pane: &Pane<'_>) -> Line<'a> {
    let g = &pane.state.generation;
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
    let lines: Vec<Line> = hist
        .iter()
        .enumerate()
        .skip(1)
        .take(rows)
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
