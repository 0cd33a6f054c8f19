//! Log: the engine's lines (and the console's own notes), with a level filter, `/` search
//! with highlighted matches and their count, filters in and out, follow mode, wrapping, and
//! times since the launch or of the day.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};
use regex::Regex;

use super::pane::Pane;
use crate::console::log::{LogEntry, LogView};
use crate::console::text::{truncate, wrap_runs};
use crate::event::LogLevel;

/// Columns of the source (the TP rank of a replayed line, `engine`, `console`…).
const SOURCE_WIDTH: usize = 8;

pub(super) fn draw(pane: &Pane<'_>, log: &LogView, wall_epoch: Option<f64>, buf: &mut Buffer) {
    let theme = pane.theme;
    let inner = pane.frame(Line::styled(title(log), theme.title()), buf);
    let (body, prompt) = match log.search_input() {
        Some(_) if inner.height > 1 => {
            let [b, p] = Layout::vertical([Constraint::Fill(1), Constraint::Length(1)]).areas(inner);
            (b, Some(p))
        }
        _ => (inner, None),
    };
    let width = body.width as usize;
    let height = body.height as usize;
    let regex = log.search().map(|s| &s.regex);
    let epoch = wall_epoch.filter(|_| log.shows_clock());
    let mut rows: Vec<Line> = Vec::new();
    for e in log.window(height) {
        rows.extend(entry_rows(pane, e, regex, epoch, width, log.wraps()));
    }
    // Wrapped entries take more rows than the window has: the newest stay in view.
    let rows: Vec<Line> = rows.split_off(rows.len().saturating_sub(height));
    Paragraph::new(rows).render(body, buf);
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

fn title(log: &LogView) -> String {
    let level = match log.min_level() {
        None => "all levels".to_string(),
        Some(l) => format!("{}+", level_name(l)),
    };
    let mode = if log.follows() { "follow".to_string() } else { format!("paused, {} below", log.lines_below()) };
    let mut title = format!(" Log · {level} · {mode} ");
    if let Some(f) = log.filter() {
        title.push_str(&format!("· {} /{}/ ", if f.keep { "only" } else { "hiding" }, f.search.query));
    }
    if let Some(s) = log.search() {
        let count = match log.match_count() {
            (Some(at), n) => format!("{at}/{n}"),
            (None, n) => format!("{n} matches"),
        };
        title.push_str(&format!("· /{} {count} ", s.query));
    }
    if log.wraps() {
        title.push_str("· wrap ");
    }
    if log.shows_clock() {
        title.push_str("· UTC ");
    }
    title
}

fn level_name(level: LogLevel) -> &'static str {
    match level {
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warning => "warning",
        LogLevel::Error => "error",
    }
}

/// The source column keeps its end, where a TP rank is (`…rker_TP1`).
fn source_column(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    if chars.len() <= SOURCE_WIDTH {
        return source.to_string();
    }
    let tail: String = chars[chars.len() - (SOURCE_WIDTH - 1)..].iter().collect();
    format!("…{tail}")
}

/// `14:03:07.250`: the time of day (UTC) of `t` seconds after an epoch at Unix time `epoch`.
fn time_of_day(epoch: f64, t: f64) -> String {
    let ms = ((epoch + t) * 1000.0).round().max(0.0) as u64;
    let (s, ms) = (ms / 1000, ms % 1000);
    format!("{:02}:{:02}:{:02}.{ms:03}", s / 3600 % 24, s / 60 % 60, s % 60)
}

/// An entry's rows: one, cut to the width, or all of it wrapped under its text column.
fn entry_rows<'a>(pane: &Pane<'_>, e: &'a LogEntry, regex: Option<&Regex>, epoch: Option<f64>, width: usize, wrap: bool) -> Vec<Line<'a>> {
    let theme = pane.theme;
    let tag = match e.level {
        LogLevel::Debug => "D",
        LogLevel::Info => "I",
        LogLevel::Warning => "W",
        LogLevel::Error => "E",
    };
    let time = match epoch {
        Some(epoch) => time_of_day(epoch, e.t),
        None => format!("{:>8.3}", e.t),
    };
    let lead = format!("{time} {tag} {:<SOURCE_WIDTH$} ", source_column(&e.source));
    let lead_width = lead.chars().count();
    let room = width.saturating_sub(lead_width);
    let style = theme.level(e.level);
    if !wrap || room == 0 {
        let mut spans = vec![Span::styled(lead, theme.dim())];
        spans.extend(highlight(&truncate(&e.line, room), regex, style, theme.search_match()));
        return vec![Line::from(spans)];
    }
    let spans = highlight(&e.line, regex, style, theme.search_match());
    let pieces = wrap_runs(spans.iter().map(|s| (s.content.as_ref(), s.style)), room);
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, row)| {
            let lead = if i == 0 { Span::styled(lead.clone(), theme.dim()) } else { Span::raw(" ".repeat(lead_width)) };
            Line::from(std::iter::once(lead).chain(row.into_iter().map(|(text, style)| Span::styled(text, style))).collect::<Vec<_>>())
        })
        .collect()
}

/// Split `text` into spans with every match of the search highlighted.
fn highlight(text: &str, regex: Option<&Regex>, base: Style, hit: Style) -> Vec<Span<'static>> {
    let Some(regex) = regex else { return vec![Span::styled(text.to_string(), base)] };
    let mut spans = Vec::new();
    let mut at = 0;
    for m in regex.find_iter(text).filter(|m| !m.is_empty()) {
        if m.start() > at {
            spans.push(Span::styled(text[at..m.start()].to_string(), base));
        }
        spans.push(Span::styled(m.as_str().to_string(), hit));
        at = m.end();
    }
    if at < text.len() || spans.is_empty() {
        spans.push(Span::styled(text[at..].to_string(), base));
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_are_split_out_case_insensitively() {
        let regex = regex::RegexBuilder::new("weights").case_insensitive(true).build().unwrap();
        let spans = highlight("Loading Weights: weights 2/3", Some(&regex), Style::new(), Style::new().bold());
        let texts: Vec<&str> = spans.iter().map(|s| s.content.as_ref()).collect();
        assert_eq!(texts, ["Loading ", "Weights", ": ", "weights", " 2/3"]);
        assert_eq!(spans[1].style, Style::new().bold());
    }

    #[test]
    fn the_source_column_keeps_the_tp_rank_and_times_can_be_of_the_day() {
        assert_eq!(source_column("TP5 EP5"), "TP5 EP5");
        assert_eq!(source_column("Worker_TP13"), "…er_TP13");
        assert_eq!(time_of_day(1_700_000_000.0, 7.25), "22:13:27.250");
    }
}
