//! What every pane draws with: its frame (the border, the title, the focus) and the formats of
//! its figures. Kept apart from `panes/mod.rs` so that a pane's file, which also holds the
//! pane's state, never reaches the whole console state that `mod.rs` draws from.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Block, Widget};

use crate::console::theme::Theme;

/// Where a pane draws: the theme, its area and whether it has the focus.
pub(super) struct Pane<'a> {
    pub theme: &'a Theme,
    pub area: Rect,
    pub focused: bool,
}

impl Pane<'_> {
    /// Draw the pane's border and title; returns the inner area.
    pub fn frame(&self, title: Line<'_>, buf: &mut Buffer) -> Rect {
        let block = Block::bordered().border_style(self.theme.border(self.focused)).title(title);
        let inner = block.inner(self.area);
        block.render(self.area, buf);
        inner
    }
}

/// `0.8 ms`, `412 ms`, `2.31 s`, `1m05s`.
pub fn fmt_secs(s: f64) -> String {
    if s < 0.001 {
        format!("{:.1} ms", s * 1000.0)
    } else if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else if s < 60.0 {
        format!("{s:.2} s")
    } else {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    }
}

/// Binary units with one decimal: `512 B`, `1.5 KiB`, `3.2 GiB`.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A text bar `width` cells wide, filled to `fraction`.
pub fn bar(width: usize, fraction: f64) -> (String, String) {
    let filled = ((fraction.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    ("█".repeat(filled), "░".repeat(width - filled))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_format_compactly() {
        assert_eq!(fmt_secs(0.0004), "0.4 ms");
        assert_eq!(fmt_secs(0.412), "412 ms");
        assert_eq!(fmt_secs(2.314), "2.31 s");
        assert_eq!(fmt_secs(65.2), "1m05s");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(3 * 1024 * 1024 * 1024 + 200 * 1024 * 1024), "3.2 GiB");
        assert_eq!(bar(4, 0.5), ("██".to_string(), "░░".to_string()));
        assert_eq!(bar(4, 2.0).1, "");
    }
}
