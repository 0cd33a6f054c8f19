//! The log pane's model: the lines, the level filter, the search (a regex, as lnav's: a fresh
//! query each time, a match count, wrap-around, filter in or out) and the scroll position.
//! Filtering and matching are incremental (indexes of the lines that pass and of those that
//! match), so a frame over a long log only touches the lines on screen.

use regex::{Regex, RegexBuilder};
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

/// A confirmed search: the query as typed and the regex it became (case-insensitive; a query
/// that is no regex is searched for as written).
#[derive(Clone, Debug)]
pub struct Search {
    pub query: String,
    pub regex: Regex,
}

impl Search {
    /// The search for `query`, and a note when it was taken literally.
    fn new(query: &str) -> (Search, Option<String>) {
        let build = |pattern: &str| RegexBuilder::new(pattern).case_insensitive(true).build();
        match build(query) {
            Ok(regex) => (Search { query: query.to_string(), regex }, None),
            Err(_) => {
                let regex = build(&regex::escape(query)).expect("an escaped pattern is a regex");
                (Search { query: query.to_string(), regex }, Some(format!("{query:?} is no regex: searching for it as written")))
            }
        }
    }

    pub fn is_match(&self, line: &str) -> bool {
        self.regex.is_match(line)
    }
}

/// Lines kept or hidden by a search (`&` / `!`).
#[derive(Clone, Debug)]
pub struct Filter {
    /// True: only matching lines are shown (filter in); false: they are hidden (filter out).
    pub keep: bool,
    pub search: Search,
}

/// What a jump to the next match found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jump {
    Found,
    /// Found past the end, from the other end.
    Wrapped,
    None,
}

#[derive(Clone, Debug)]
pub struct LogView {
    entries: Vec<LogEntry>,
    /// Indexes into `entries` of the lines the level filter and the search filter let through.
    visible: Vec<usize>,
    /// Positions in `visible` of the lines that match the search.
    matches: Vec<usize>,
    min_level: Option<LogLevel>,
    filter: Option<Filter>,
    /// Visible lines below the bottom of the view (0 = the newest line is at the bottom).
    back: usize,
    follow: bool,
    /// The confirmed search (highlighted; `n`/`N` jump between matches).
    search: Option<Search>,
    /// The search prompt while it is open.
    search_input: Option<TextInput>,
    /// Long lines wrap instead of being cut.
    wrap: bool,
    /// Times of day instead of seconds since the launch.
    clock: bool,
}

impl Default for LogView {
    fn default() -> LogView {
        LogView {
            entries: Vec::new(),
            visible: Vec::new(),
            matches: Vec::new(),
            min_level: None,
            filter: None,
            back: 0,
            follow: true,
            search: None,
            search_input: None,
            wrap: false,
            clock: false,
        }
    }
}

impl LogView {
    pub fn push(&mut self, t: f64, level: LogLevel, source: &str, line: impl Into<String>) {
        if self.entries.len() >= CAPACITY {
            self.entries.drain(..DROP_BLOCK);
            self.refilter();
        }
        self.entries.push(LogEntry { t, level, source: source.to_string(), line: line.into() });
        let index = self.entries.len() - 1;
        if self.passes(&self.entries[index]) {
            if self.search.as_ref().is_some_and(|s| s.is_match(&self.entries[index].line)) {
                self.matches.push(self.visible.len());
            }
            self.visible.push(index);
            if !self.follow {
                self.back += 1; // keep the view where the reader left it
            }
        }
    }

    fn passes(&self, entry: &LogEntry) -> bool {
        self.min_level.is_none_or(|min| entry.level >= min) && self.filter.as_ref().is_none_or(|f| f.search.is_match(&entry.line) == f.keep)
    }

    fn refilter(&mut self) {
        self.visible = (0..self.entries.len()).filter(|&i| self.passes(&self.entries[i])).collect();
        self.back = self.back.min(self.visible.len().saturating_sub(1));
        self.rematch();
    }

    fn rematch(&mut self) {
        self.matches = match &self.search {
            Some(s) => (0..self.visible.len()).filter(|&pos| s.is_match(&self.entries[self.visible[pos]].line)).collect(),
            None => Vec::new(),
        };
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
    pub fn search(&self) -> Option<&Search> {
        self.search.as_ref()
    }

    /// The lines kept or hidden by a search.
    pub fn filter(&self) -> Option<&Filter> {
        self.filter.as_ref()
    }

    /// (the match at the bottom of the view, 1-based, if it is one; how many lines match).
    pub fn match_count(&self) -> (Option<usize>, usize) {
        let bottom = self.visible.len().checked_sub(self.back + 1);
        let at = bottom.and_then(|b| self.matches.binary_search(&b).ok()).map(|i| i + 1);
        (at, self.matches.len())
    }

    pub fn wraps(&self) -> bool {
        self.wrap
    }

    pub fn shows_clock(&self) -> bool {
        self.clock
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

    /// Answer one of the log's own keys (search, follow, level filter, search filters, wrap,
    /// clock); returns a notice for the status bar when there is something to say.
    pub fn on_action(&mut self, action: &Action) -> Option<String> {
        match action {
            Action::Search => self.open_search(),
            Action::SearchNext | Action::SearchPrev => {
                let Some(query) = self.search.as_ref().map(|s| s.query.clone()) else {
                    return Some("press / to search the log".to_string());
                };
                return match self.jump(*action == Action::SearchNext) {
                    Jump::Found => None,
                    Jump::Wrapped => {
                        Some(format!("search wrapped ({})", if *action == Action::SearchNext { "from the top" } else { "from the bottom" }))
                    }
                    Jump::None => Some(format!("no match for {query:?}")),
                };
            }
            Action::ToggleFollow => self.toggle_follow(),
            Action::CycleLevel => self.cycle_level(),
            Action::Cancel => self.cancel_search(),
            Action::FilterIn | Action::FilterOut => return self.toggle_filter(*action == Action::FilterIn),
            Action::ToggleWrap => self.wrap = !self.wrap,
            Action::ToggleClock => self.clock = !self.clock,
            _ => {}
        }
        None
    }

    /// Keep (or hide) the lines matching the search; the same key again shows every line.
    fn toggle_filter(&mut self, keep: bool) -> Option<String> {
        if self.filter.as_ref().is_some_and(|f| f.keep == keep) {
            self.filter = None;
        } else {
            let Some(search) = self.search.clone() else {
                return Some("search first (/): the filter keeps or hides the lines that match".to_string());
            };
            self.filter = Some(Filter { keep, search });
        }
        self.back = 0;
        self.follow = true;
        self.refilter();
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

    /// A fresh query each time (the last one stays highlighted until this one is confirmed).
    pub fn open_search(&mut self) {
        self.search_input = Some(TextInput::default());
    }

    pub fn cancel_search(&mut self) {
        if self.search_input.take().is_none() {
            self.search = None; // a second Esc clears the highlight
            self.matches.clear();
        }
    }

    /// Search for the query and jump to the newest match; returns a note when the query was
    /// taken literally or matches nothing.
    pub fn confirm_search(&mut self) -> Option<String> {
        let query = self.search_input.take().map(|i| i.value().to_string()).unwrap_or_default();
        let (search, note) = if query.is_empty() {
            (None, None)
        } else {
            let (search, note) = Search::new(&query);
            (Some(search), note)
        };
        self.search = search;
        self.rematch();
        self.back = 0;
        if self.search.is_some() && self.jump_from(self.visible.len(), false).is_none() {
            return Some(note.unwrap_or_else(|| format!("no match for {query:?}")));
        }
        note
    }

    /// Jump to the next (older with `forward == false`) match from the bottom of the view,
    /// from the other end when there is none that way.
    pub fn jump(&mut self, forward: bool) -> Jump {
        let bottom = self.visible.len().saturating_sub(self.back + 1);
        let from = if forward { bottom + 1 } else { bottom };
        if self.jump_from(from, forward).is_some() {
            return Jump::Found;
        }
        let other_end = if forward { 0 } else { self.visible.len() };
        match self.jump_from(other_end, forward) {
            Some(pos) if pos != bottom => Jump::Wrapped,
            Some(_) => Jump::Found,
            None => Jump::None,
        }
    }

    /// Put the first match at or after `from` (before it, going back) at the bottom of the
    /// view; returns its position.
    fn jump_from(&mut self, from: usize, forward: bool) -> Option<usize> {
        let found = if forward {
            self.matches.iter().copied().find(|&pos| pos >= from)
        } else {
            self.matches.iter().copied().rev().find(|&pos| pos < from)
        }?;
        self.follow = false;
        self.back = self.visible.len() - 1 - found;
        Some(found)
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
        assert_eq!(log.confirm_search(), None);
        assert_eq!(log.bottom_entry().unwrap().line, "line 19");
        assert_eq!(log.match_count(), (Some(11), 11));
        assert_eq!(log.jump(false), Jump::Found);
        assert_eq!(log.bottom_entry().unwrap().line, "line 18");
        assert_eq!(log.jump(true), Jump::Found);
        assert_eq!(log.jump(true), Jump::Wrapped, "past the newest match, from the oldest");
        assert_eq!(log.bottom_entry().unwrap().line, "line 1");
        assert_eq!(log.match_count(), (Some(1), 11));
    }

    fn search(log: &mut LogView, query: &str) -> Option<String> {
        log.open_search();
        assert_eq!(log.search_input().unwrap().value(), "", "each search starts afresh");
        for c in query.chars() {
            log.edit_search(tui_input::InputRequest::InsertChar(c));
        }
        log.confirm_search()
    }

    #[test]
    fn queries_are_regexes_and_filter_the_lines_in_or_out() {
        let mut log = filled(30);
        assert_eq!(search(&mut log, r"line [12]\d$"), None);
        assert_eq!(log.match_count(), (Some(20), 20));
        assert_eq!(log.on_action(&Action::FilterIn), None);
        assert_eq!(log.visible_len(), 20);
        assert_eq!(lines(&log, 2), ["line 28", "line 29"]);
        assert_eq!(log.on_action(&Action::FilterOut), None);
        assert_eq!(lines(&log, 20), (0..10).map(|i| format!("line {i}")).collect::<Vec<_>>());
        assert_eq!(log.match_count(), (None, 0));
        log.on_action(&Action::FilterOut);
        assert_eq!(log.visible_len(), 30, "the same key again shows every line");
        assert_eq!(search(&mut log, "line (").as_deref(), Some("\"line (\" is no regex: searching for it as written"));
        assert_eq!(search(&mut log, "nothing"), Some("no match for \"nothing\"".to_string()));
        assert_eq!(log.on_action(&Action::SearchNext), Some("no match for \"nothing\"".to_string()));
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
