//! Log: the engine's lines (and the console's own notes), with a level filter, `/` search
//! with highlighted matches, and follow mode.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::pane::Pane;
use crate::console::log::{LogEntry, LogView};
use crate::console::text::truncate;
use crate::event::LogLevel;

pub(super) fn draw(pane: &Pane<'_>, log: &LogView, buf: &mut Buffer) {
    let theme = pane.theme;
    let level = match log.min_level() {
        None => "all levels".to_string(),
        Some(l) => format!("{}+", level_name(l)),
    };
    let mode = if log.follows() { "follow".to_string() } else { format!("paused, {} below", log.lines_below()) };
    let mut title = format!(" Log · {level} · {mode} ");
    if let Some(q) = log.search() {
        title.push_str(&format!("· /{q} "));
    }
    let inner = pane.frame(Line::styled(title, theme.title()), buf);
    let (body, prompt) = match log.search_input() {
        Some(_) if inner.height > 1 => {
            let [b, p] = Layout::vertical([Constraint::Fill(1), Constraint::Length(1)]).areas(inner);
            (b, Some(p))
        }
        _ => (inner, None),
    };
    let width = body.width as usize;
    let query = log.search().map(str::to_lowercase);
    let lines: Vec<Line> = log.window(body.height as usize).map(|e| entry_line(pane, e, query.as_deref(), width)).collect();
    Paragraph::new(lines).render(body, buf);
    if let (Some(area), Some(input)) = (prompt, log.search_input()) {
        let value = input.value();
        let line = Line::from(vec![
            Span::styled("/", theme.key()),
            Span::raw(value.to_string()),
            Span::styled(" ", theme.cursor()),
            Span::styled("  Enter search · Esc cancel", theme.dim()),
        ]);
        Paragraph::new(line).render(area, buf);
    }
}

fn level_name(level: LogLevel) -> &'static str {
    match level {
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warning => "warning",
        LogLevel::Error => "error",
    }
}

fn entry_line<'a>(pane: &Pane<'_>, e: &'a LogEntry, query: Option<&str>, width: usize) -> Line<'a> {
    let theme = pane.theme;
    let tag = match e.level {
        LogLevel::Debug => "D",
        LogLevel::Info => "I",
        LogLevel::Warning => "W",
        LogLevel::Error => "E",
    };
    let lead = format!("{:>8.3} {tag} {:<8} ", e.t, truncate(&e.source, 8));
    let room = width.saturating_sub(lead.chars().count());
    let text = truncate(&e.line, room);
    let style = theme.level(e.level);
    let mut spans = vec![Span::styled(lead, theme.dim())];
    spans.extend(highlight(&text, query, style, theme.search_match()));
    Line::from(spans)
}

/// Split `text` into spans with every case-insensitive match of `query` highlighted.
fn highlight(text: &str, query: Option<&str>, base: Style, hit: Style) -> Vec<Span<'static>> {
    let Some(q) = query.filter(|q| !q.is_empty()) else { return vec![Span::styled(text.to_string(), base)] };
    let lower = text.to_lowercase();
    // Lower-casing can change byte lengths outside ASCII; fall back to no highlight then.
    if lower.len() != text.len() {
        return vec![Span::styled(text.to_string(), base)];
    }
    let mut spans = Vec::new();
    let mut at = 0;
    for (start, m) in lower.match_indices(q) {
        if start > at {
            spans.push(Span::styled(text[at..start].to_string(), base));
        }
        spans.push(Span::styled(text[start..start + m.len()].to_string(), hit));
        at = start + m.len();
    }
    if at < text.len() {
        spans.push(Span::styled(text[at..].to_string(), base));
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_are_split_out_case_insensitively() {
        let spans = highlight("Loading Weights: weights 2/3", Some("weights"), Style::new(), Style::new().bold());
        let texts: Vec<&str> = spans.iter().map(|s| s.content.as_ref()).collect();
        assert_eq!(texts, ["Loading ", "Weights", ": ", "weights", " 2/3"]);
        assert_eq!(spans[1].style, Style::new().bold());
    }
}
