//! What a key can ask the console to do. Keys become `Action`s through the keymap; the
//! state update (`app::State::apply`, and the pane states it hands them to) is the only
//! place that interprets them.

use tui_input::InputRequest;

/// Rows a page key moves a pane by.
pub const PAGE: usize = 10;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Quit with a clean teardown (the engine is shut down first).
    Quit,
    /// Launch again with the current spec.
    Relaunch,
    /// Apply remedy N (1–9) of the diagnosis shown and relaunch.
    ApplyRemedy(u8),
    ToggleHelp,
    FocusNext,
    FocusPrev,
    CycleLayout,
    /// Open the log search prompt.
    Search,
    SearchNext,
    SearchPrev,
    ToggleFollow,
    /// Cycle the log's minimum level: all, info, warning, error.
    CycleLevel,
    ScrollUp,
    ScrollDown,
    PageUp,
    PageDown,
    ScrollTop,
    ScrollBottom,
    NextFinding,
    PrevFinding,
    /// Enter: send the prompt, or confirm the search.
    Submit,
    /// Esc: close help, or cancel the search.
    Cancel,
    /// Copy the fixed launch command (on the diagnosis: the diagnosis as text).
    Copy,
    /// Put the keyboard in the prompt (INSERT) until Esc.
    EditPrompt,
    /// Prompts go through the tokenizer's chat template, or not.
    ToggleChat,
    /// Show the focused pane full-screen, or the layout again.
    Zoom,
    /// Log: wrap long lines instead of cutting them.
    ToggleWrap,
    /// Log: show only the lines that match the search (again: every line).
    FilterIn,
    /// Log: hide the lines that match the search (again: every line).
    FilterOut,
    /// Log: wall-clock times instead of seconds since the launch.
    ToggleClock,
    /// Text entry into the prompt or the search (never bound in the keymap: printable keys
    /// and the editing keys produce these while a text field has the focus).
    Edit(InputRequest),
}

impl Action {
    /// Whether the action acts on an engine (a replay has none to act on, and no prompt).
    pub fn acts_on_engine(&self) -> bool {
        matches!(self, Action::Relaunch | Action::ApplyRemedy(_) | Action::EditPrompt | Action::ToggleChat)
    }

    /// Every action a keymap can bind, in the order help lists them.
    pub fn bindable() -> Vec<Action> {
        let mut all = vec![Action::Quit, Action::Relaunch];
        all.extend((1..=9).map(Action::ApplyRemedy));
        all.extend([
            Action::Submit,
            Action::Cancel,
            Action::ToggleHelp,
            Action::FocusNext,
            Action::FocusPrev,
            Action::CycleLayout,
            Action::Search,
            Action::SearchNext,
            Action::SearchPrev,
            Action::ToggleFollow,
            Action::CycleLevel,
            Action::NextFinding,
            Action::PrevFinding,
            Action::ScrollUp,
            Action::ScrollDown,
            Action::PageUp,
            Action::PageDown,
            Action::ScrollTop,
            Action::ScrollBottom,
            Action::Copy,
            Action::EditPrompt,
            Action::ToggleChat,
            Action::Zoom,
            Action::ToggleWrap,
            Action::FilterIn,
            Action::FilterOut,
            Action::ToggleClock,
        ]);
        all
    }

    /// The name used in keymap files (`quit`, `remedy-3`, ...). `None` for text editing.
    pub fn name(&self) -> Option<String> {
        let fixed = match self {
            Action::ApplyRemedy(n) => return Some(format!("remedy-{n}")),
            Action::Edit(_) => return None,
            Action::Quit => "quit",
            Action::Relaunch => "relaunch",
            Action::ToggleHelp => "help",
            Action::FocusNext => "focus-next",
            Action::FocusPrev => "focus-prev",
            Action::CycleLayout => "cycle-layout",
            Action::Search => "search",
            Action::SearchNext => "search-next",
            Action::SearchPrev => "search-prev",
            Action::ToggleFollow => "follow",
            Action::CycleLevel => "level-filter",
            Action::ScrollUp => "scroll-up",
            Action::ScrollDown => "scroll-down",
            Action::PageUp => "page-up",
            Action::PageDown => "page-down",
            Action::ScrollTop => "scroll-top",
            Action::ScrollBottom => "scroll-bottom",
            Action::NextFinding => "next-finding",
            Action::PrevFinding => "prev-finding",
            Action::Submit => "submit",
            Action::Cancel => "cancel",
            Action::Copy => "copy",
            Action::EditPrompt => "prompt",
            Action::ToggleChat => "chat",
            Action::Zoom => "zoom",
            Action::ToggleWrap => "wrap",
            Action::FilterIn => "filter-in",
            Action::FilterOut => "filter-out",
            Action::ToggleClock => "clock",
        };
        Some(fixed.to_string())
    }

    pub fn from_name(name: &str) -> Option<Action> {
        Action::bindable().into_iter().find(|a| a.name().as_deref() == Some(name))
    }

    /// One line for the help pane.
    pub fn describe(&self) -> String {
        match self {
            Action::ApplyRemedy(n) => format!("apply remedy {n} of the diagnosis and relaunch"),
            Action::Quit => "quit (shuts the engine down, restores the terminal)".into(),
            Action::Relaunch => "relaunch with the current spec".into(),
            Action::ToggleHelp => "show or hide this help".into(),
            Action::FocusNext => "focus the next pane".into(),
            Action::FocusPrev => "focus the previous pane".into(),
            Action::CycleLayout => "switch to the next layout".into(),
            Action::Search => "search the log".into(),
            Action::SearchNext => "jump to the next log match".into(),
            Action::SearchPrev => "jump to the previous log match".into(),
            Action::ToggleFollow => "log: follow new lines on/off".into(),
            Action::CycleLevel => "log: cycle the level filter".into(),
            Action::ScrollUp => "scroll the focused pane up".into(),
            Action::ScrollDown => "scroll the focused pane down".into(),
            Action::PageUp => "scroll the focused pane up a page".into(),
            Action::PageDown => "scroll the focused pane down a page".into(),
            Action::ScrollTop => "scroll the focused pane to the top".into(),
            Action::ScrollBottom => "scroll to the bottom (log: follow again)".into(),
            Action::NextFinding => "diagnosis: show the next finding".into(),
            Action::PrevFinding => "diagnosis: show the previous finding".into(),
            Action::Submit => "send the prompt / confirm the search".into(),
            Action::Cancel => "close help / cancel the search / leave the prompt".into(),
            Action::Copy => "copy the fixed command (on the diagnosis: the diagnosis)".into(),
            Action::EditPrompt => "type into the prompt (Esc leaves it)".into(),
            Action::ToggleChat => "prompt: chat template on/off".into(),
            Action::Zoom => "show the focused pane full-screen, or the layout".into(),
            Action::ToggleWrap => "log: wrap long lines on/off".into(),
            Action::FilterIn => "log: only lines matching the search (again: all)".into(),
            Action::FilterOut => "log: hide lines matching the search (again: all)".into(),
            Action::ToggleClock => "log: wall-clock times on/off".into(),
            Action::Edit(_) => "edit text".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bindable_action_round_trips_through_its_name() {
        let all = Action::bindable();
        assert_eq!(all.len(), 38);
        for a in all {
            let name = a.name().unwrap();
            assert_eq!(Action::from_name(&name), Some(a), "{name}");
        }
        assert_eq!(Action::from_name("remedy-0"), None);
        assert_eq!(Action::from_name("remedy-10"), None);
    }
}
