//! The log pane's model: the lines, the level filter, the search and the scroll position.
//! Filtering is incremental (an index of the lines that pass), so a frame over a long log
//! only touches the lines on screen.

use tui_input::{Input as TextInput, InputRequest};

use super::action::{Action, PAGE};
use crate::event::LogLevel;

/// Lines kept; the oldest are dropped in blocks beyond this.
const CAPACITY: usize = 100_000;
const DROP_BLOCK: usize = 10_000;

#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry {
    pub t: f64,
    pub level: LogLevel,
    pub source: String,
    pub line: String,
}

#[derive(Clone, Debug)]
pub struct LogView {
    entries: Vec<LogEntry>,
    /// Indexes into `entries` of the lines the level filter lets through.
    visible: Vec<usize>,
    min_level: Option<LogLevel>,
    /// Visible lines below the bottom of the view (0 = the newest line is at the bottom).
    back: usize,
    follow: bool,
    /// The confirmed search (highlighted; `n`/`N` jump between matches).
    search: Option<String>,
    /// The search prompt while it is open.
    search_input: Option<TextInput>,
}

impl Default for LogView {
    fn default() -> LogView {
        LogView { entries: Vec::new(), visible: Vec::new(), min_level: None, back: 0, follow: true, search: None, search_input: None }
    }
}

impl LogView {
    pub fn push(&mut self, t: f64, level: LogLevel, source: &str, line: impl Into<String>) {
        if self.entries.len() >= CAPACITY {
            self.entries.drain(..DROP_BLOCK);
            self.refilter();
        }
        self.entries.push(LogEntry { t, level, source: source.to_string(), line: line.into() });
        if self.passes(level) {
            self.visible.push(self.entries.len() - 1);
            if !self.follow {
                self.back += 1; // keep the view where the reader left it
            }
        }
    }

    fn passes(&self, level: LogLevel) -> bool {
        self.min_level.is_none_or(|min| level >= min)
    }

    fn refilter(&mut self) {
        self.visible = (0..self.entries.len()).filter(|&i| self.passes(self.entries[i].level)).collect();
        self.back = self.back.min(self.visible.len().saturating_sub(1));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn visible_len(&self) -> usize {
        self.visible.len()
    }

    /// The lowest level shown (`None`: every level).
    pub fn min_level(&self) -> Option<LogLevel> {
        self.min_level
    }

    /// Whether the view follows the newest line.
    pub fn follows(&self) -> bool {
        self.follow
    }

    /// Visible lines below the bottom of the view.
    pub fn lines_below(&self) -> usize {
        self.back
    }

    /// The confirmed search.
    pub fn search(&self) -> Option<&str> {
        self.search.as_deref()
    }

    /// The search prompt, while it is open.
    pub fn search_input(&self) -> Option<&TextInput> {
        self.search_input.as_ref()
    }

    /// Type into the search prompt; false when it is not open.
    pub fn edit_search(&mut self, request: InputRequest) -> bool {
        match &mut self.search_input {
            Some(input) => {
                input.handle(request);
                true
            }
            None => false,
        }
    }

    /// The visible lines in a view `height` rows tall, oldest first.
    pub fn window(&self, height: usize) -> impl Iterator<Item = &LogEntry> {
        let bottom = self.visible.len().saturating_sub(self.back);
        let top = bottom.saturating_sub(height);
        let end = (top + height).min(self.visible.len());
        self.visible[top..end].iter().map(|&i| &self.entries[i])
    }

    pub fn cycle_level(&mut self) {
        self.min_level = match self.min_level {
            None => Some(LogLevel::Info),
            Some(LogLevel::Debug | LogLevel::Info) => Some(LogLevel::Warning),
            Some(LogLevel::Warning) => Some(LogLevel::Error),
            Some(LogLevel::Error) => None,
        };
        self.back = 0;
        self.follow = true;
        self.refilter();
    }

    /// Answer one of the log's own keys (search, follow, level filter); returns a notice
    /// for the status bar when a search jump finds nothing.
    pub fn on_action(&mut self, action: &Action) -> Option<String> {
        match action {
            Action::Search => self.open_search(),
            Action::SearchNext | Action::SearchPrev => {
                let found = self.jump(*action == Action::SearchNext);
                return (!found).then(|| match &self.search {
                    Some(q) => format!("no more matches for {q:?}"),
                    None => "press / to search the log".to_string(),
                });
            }
            Action::ToggleFollow => self.toggle_follow(),
            Action::CycleLevel => self.cycle_level(),
            Action::Cancel => self.cancel_search(),
            _ => {}
        }
        None
    }

    /// Move the view by a scroll key.
    pub fn scroll(&mut self, action: &Action) {
        match action {
            Action::ScrollUp => self.scroll_up(1),
            Action::ScrollDown => self.scroll_down(1),
            Action::PageUp => self.scroll_up(PAGE),
            Action::PageDown => self.scroll_down(PAGE),
            Action::ScrollTop => self.scroll_top(),
            _ => self.follow_bottom(),
        }
    }

    pub fn scroll_up(&mut self, n: usize) {
        self.follow = false;
        self.back = (self.back + n).min(self.visible.len().saturating_sub(1));
    }

    pub fn scroll_down(&mut self, n: usize) {
        self.back = self.back.saturating_sub(n);
    }

    pub fn scroll_top(&mut self) {
        self.scroll_up(self.visible.len());
    }

    pub fn follow_bottom(&mut self) {
        self.back = 0;
        self.follow = true;
    }

    pub fn toggle_follow(&mut self) {
        if self.follow {
            self.follow = false;
        } else {
            self.follow_bottom();
        }
    }

    pub fn open_search(&mut self) {
        self.search_input = Some(TextInput::new(self.search.clone().unwrap_or_default()));
    }

    pub fn cancel_search(&mut self) {
        if self.search_input.take().is_none() {
            self.search = None; // a second Esc clears the highlight
        }
    }

    /// Keep the query and jump to the newest match.
    pub fn confirm_search(&mut self) {
        let query = self.search_input.take().map(|i| i.value().to_string()).unwrap_or_default();
        self.search = (!query.is_empty()).then_some(query);
        self.back = 0;
        if self.search.is_some() {
            self.jump_from(self.visible.len(), false);
        }
    }

    /// Jump to the next (older with `forward == false`) match from the bottom of the view.
    /// False when there is none.
    pub fn jump(&mut self, forward: bool) -> bool {
        let bottom = self.visible.len().saturating_sub(self.back + 1);
        let from = if forward { bottom + 1 } else { bottom };
        self.jump_from(from, forward)
    }

    fn jump_from(&mut self, from: usize, forward: bool) -> bool {
        let Some(query) = self.search.as_deref().map(str::to_lowercase) else { return false };
        let is_match = |&pos: &usize| self.entries[self.visible[pos]].line.to_lowercase().contains(&query);
        let found =
            if forward { (from..self.visible.len()).find(is_match) } else { (0..from.min(self.visible.len())).rev().find(is_match) };
        match found {
            Some(pos) => {
                self.follow = false;
                self.back = self.visible.len() - 1 - pos;
                true
            }
            None => false,
        }
    }

    /// The visible line at the bottom of the view (a search jump lands there).
    pub fn bottom_entry(&self) -> Option<&LogEntry> {
        let pos = self.visible.len().checked_sub(self.back + 1)?;
        Some(&self.entries[self.visible[pos]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(n: usize) -> LogView {
        let mut log = LogView::default();
        for i in 0..n {
            let level = if i % 10 == 0 { LogLevel::Warning } else { LogLevel::Info };
            log.push(i as f64, level, "engine", format!("line {i}"));
        }
        log
    }

    fn lines(log: &LogView, h: usize) -> Vec<String> {
        log.window(h).map(|e| e.line.clone()).collect()
    }

    #[test]
    fn follow_shows_the_newest_lines() {
        let log = filled(30);
        assert_eq!(lines(&log, 3), ["line 27", "line 28", "line 29"]);
    }

    #[test]
    fn scrolling_up_holds_the_view_while_lines_arrive() {
        let mut log = filled(30);
        log.scroll_up(5);
        assert_eq!(lines(&log, 2), ["line 23", "line 24"]);
        log.push(30.0, LogLevel::Info, "engine", "line 30");
        assert_eq!(lines(&log, 2), ["line 23", "line 24"]);
        log.follow_bottom();
        assert_eq!(lines(&log, 1), ["line 30"]);
        log.scroll_top();
        assert_eq!(lines(&log, 2), ["line 0", "line 1"]);
    }

    #[test]
    fn the_level_filter_cycles() {
        let mut log = filled(30);
        log.cycle_level();
        assert_eq!(log.visible_len(), 30);
        log.cycle_level();
        assert_eq!(lines(&log, 5), ["line 0", "line 10", "line 20"]);
        log.cycle_level();
        assert_eq!(log.visible_len(), 0);
        log.cycle_level();
        assert_eq!(log.visible_len(), 30);
    }

    #[test]
    fn search_jumps_between_matches() {
        let mut log = filled(30);
        log.open_search();
        for c in "LINE 1".chars() {
            log.search_input.as_mut().unwrap().handle(tui_input::InputRequest::InsertChar(c));
        }
        log.confirm_search();
        assert_eq!(log.bottom_entry().unwrap().line, "line 19");
        assert!(log.jump(false));
        assert_eq!(log.bottom_entry().unwrap().line, "line 18");
        assert!(log.jump(true));
        assert!(!log.jump(true));
        assert_eq!(log.bottom_entry().unwrap().line, "line 19");
    }

    #[test]
    fn capacity_drops_the_oldest_block() {
        let mut log = LogView::default();
        for i in 0..CAPACITY + 1 {
            log.push(0.0, LogLevel::Info, "x", i.to_string());
        }
        assert_eq!(log.len(), CAPACITY - DROP_BLOCK + 1);
        assert_eq!(log.window(1).next().unwrap().line, CAPACITY.to_string());
    }
}
