//! Help: every binding of the keymap in force, drawn over the panes.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Widget};

use crate::console::keymap::Keymap;
use crate::console::scroll::Scroll;
use crate::console::theme::Theme;

pub(super) fn draw(keymap: &Keymap, engine_attached: bool, scroll: Scroll, theme: &Theme, area: Rect, buf: &mut Buffer) {
    // A replay has no prompt to type into: only the search takes text.
    let typing = if engine_attached {
        " In the prompt and the search, letters type; Enter sends; Tab leaves "
    } else {
        " In the search, letters type; Enter confirms "
    };
    let rows = keymap.help_rows();
    let key_width = rows.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0).min(24);
    let lines: Vec<Line> = rows
        .into_iter()
        .map(|(keys, what)| Line::from(vec![Span::styled(format!(" {keys:<key_width$}  "), theme.key()), Span::raw(what)]))
        .collect();
    // The status bar stays in view below (a replay's title is there): the popup is centred
    // in the rows above it.
    let area = Rect { height: area.height.saturating_sub(1), ..area };
    let height = (lines.len() as u16 + 2).min(area.height);
    // The scroll keys move the list when it is taller than the screen.
    let top = scroll.top(lines.len(), usize::from(height.saturating_sub(2)), 0);
    let lines: Vec<Line> = lines.into_iter().skip(top).collect();
    let width = area.width.saturating_sub(4).min(90);
    let [popup] = Layout::horizontal([Constraint::Length(width)]).flex(Flex::Center).areas(area);
    let [popup] = Layout::vertical([Constraint::Length(height)]).flex(Flex::Center).areas(popup);
    Clear.render(popup, buf);
    let block = Block::bordered()
        .border_style(theme.border(true))
        .title(Line::styled(" Keys (? or Esc closes) ", theme.title()))
        .title_bottom(Line::styled(typing, theme.dim()));
    Paragraph::new(lines).block(block).render(popup, buf);
}
