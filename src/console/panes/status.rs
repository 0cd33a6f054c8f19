//! The status bar: where the launch stands (or the last notice) and key hints taken from
//! the keymap.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::pane::{fmt_secs, Pane};
use crate::console::action::Action;
use crate::console::app::State;
use crate::console::keymap::Keymap;

/// The bar sums up the whole console, so it reads the whole state.
pub(super) fn draw(pane: &Pane<'_>, s: &State, buf: &mut Buffer) {
    let theme = pane.theme;
    let summary_text = match s.notice() {
        Some(n) => n.to_string(),
        None => summary(s),
    };
    let width = pane.area.width as usize;
    let all_hints = hints(s.keymap());
    // Help and quit keep their place whatever the bar holds: a long title or notice is cut first.
    let essential: usize = all_hints.iter().filter(|(_, w)| matches!(*w, "help" | "quit")).map(|(k, w)| hint_len(k, w)).sum();
    let summary_width = summary_text.chars().count().min(48);
    // A replay's title leads the bar, so that no one takes the recording for a live launch;
    // a narrow bar names the file without its folders.
    let title = s.replay().map(|r| {
        let full = format!(" {} ·", r.title());
        if full.chars().count() + summary_width + essential + 2 <= width {
            full
        } else {
            format!(" {} ·", r.short_title())
        }
    });
    let title_width = title.as_ref().map_or(0, |t| t.chars().count());
    // The summary keeps up to 48 columns; hints fill the rest, most useful first.
    let room = width.saturating_sub(title_width + summary_width + 2).max(essential);
    let hints = fitting_hints(all_hints, room);
    let hint_width: usize = hints.iter().map(|(k, w)| hint_len(k, w)).sum();
    let [left, right] = Layout::horizontal([Constraint::Fill(1), Constraint::Length(hint_width as u16)]).areas(pane.area);
    let summary = match s.notice() {
        Some(_) => Span::styled(format!(" {summary_text}"), theme.warning()),
        None => Span::raw(format!(" {summary_text}")),
    };
    let left_spans = match title {
        Some(t) => vec![Span::styled(t, theme.title()), summary],
        None => vec![summary],
    };
    // A column between a cut summary and the hints.
    let left = Rect { width: left.width.saturating_sub(1), ..left };
    Paragraph::new(Line::from(left_spans)).render(left, buf);
    let mut spans = Vec::new();
    for (key, what) in hints {
        spans.push(Span::styled(key, theme.key()));
        spans.push(Span::raw(format!(" {what}  ")));
    }
    Paragraph::new(Line::from(spans)).render(right, buf);
}

fn summary(s: &State) -> String {
    if s.attempt() == 0 {
        return "waiting for the engine".to_string();
    }
    let attempt = format!("attempt {}", s.attempt());
    if let Some(r) = s.ready() {
        return format!("{attempt} · ready in {}", fmt_secs(r.elapsed_s));
    }
    if let Some(phase) = s.phases().failed() {
        let key = s.keymap().hint(&Action::ApplyRemedy(1)).filter(|_| s.diagnosis().findings().iter().any(|f| !f.remedies.is_empty()));
        let fix = key.map(|k| format!(" · press {k} to fix")).unwrap_or_default();
        return format!("{attempt} · failed at {phase}{fix}");
    }
    match s.phases().latest_running() {
        Some(p) => format!("{attempt} · {p}…"),
        None => attempt,
    }
}

fn hint_len(key: &str, what: &str) -> usize {
    key.chars().count() + what.chars().count() + 3
}

/// The hints that fit in `room` columns, chosen by priority, shown in their usual order.
fn fitting_hints(all: Vec<(String, &'static str)>, room: usize) -> Vec<(String, &'static str)> {
    const PRIORITY: [&str; 7] = ["fix", "quit", "help", "relaunch", "focus", "layout", "search"];
    let mut keep = vec![false; all.len()];
    let mut used = 0;
    for what in PRIORITY {
        if let Some(i) = all.iter().position(|(_, w)| *w == what) {
            let len = hint_len(&all[i].0, all[i].1);
            if used + len <= room {
                used += len;
                keep[i] = true;
            }
        }
    }
    all.into_iter().zip(keep).filter(|(_, k)| *k).map(|(h, _)| h).collect()
}

/// (key, what) pairs for the bar, from the keymap; unbound actions are left out.
fn hints(km: &Keymap) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    if let (Some(first), Some(last)) = (km.hint(&Action::ApplyRemedy(1)), km.hint(&Action::ApplyRemedy(9))) {
        out.push((format!("{first}-{last}"), "fix"));
    }
    for (action, what) in [
        (Action::Relaunch, "relaunch"),
        (Action::FocusNext, "focus"),
        (Action::CycleLayout, "layout"),
        (Action::Search, "search"),
        (Action::ToggleHelp, "help"),
        (Action::Quit, "quit"),
    ] {
        if let Some(key) = km.hint(&action) {
            out.push((key, what));
        }
    }
    out
}
