//! What the screen shows: the layouts to cycle through, the one in use, the slot with the
//! focus, and whether the help is drawn over them. Which pane a slot shows depends on the
//! panes' content, so `app::State` decides that; this only knows the layouts.

use super::layout::{Layout, PaneKind};

#[derive(Clone, Debug)]
pub struct Screen {
    layouts: Vec<Layout>,
    layout: usize,
    /// Index of the focused slot of the current layout.
    focus: usize,
    help_open: bool,
}

impl Screen {
    pub fn new(layouts: Vec<Layout>) -> Screen {
        assert!(!layouts.is_empty(), "a console needs at least one layout");
        let mut screen = Screen { layouts, layout: 0, focus: 0, help_open: false };
        screen.focus = screen.first_focus();
        screen
    }

    pub fn layout(&self) -> &Layout {
        &self.layouts[self.layout]
    }

    /// The focused slot of the current layout.
    pub fn focus(&self) -> usize {
        self.focus
    }

    pub fn help_open(&self) -> bool {
        self.help_open
    }

    pub fn set_help(&mut self, open: bool) {
        self.help_open = open;
    }

    /// Go to the next layout, focused on its first slot that takes keys.
    pub fn cycle_layout(&mut self) {
        self.layout = (self.layout + 1) % self.layouts.len();
        self.focus = self.first_focus();
    }

    /// Move the focus to the next (or previous) slot, the status bar left out.
    pub fn move_focus(&mut self, forward: bool) {
        let order = self.focusable_slots();
        if order.is_empty() {
            return;
        }
        let at = order.iter().position(|&i| i == self.focus).unwrap_or(0);
        let next = if forward { (at + 1) % order.len() } else { (at + order.len() - 1) % order.len() };
        self.focus = order[next];
    }

    fn focusable_slots(&self) -> Vec<usize> {
        let slots = self.layout().slot_panes();
        (0..slots.len()).filter(|&i| slots[i] != [PaneKind::Status]).collect()
    }

    /// Start on the first pane that is not a text field, so keys act rather than type.
    fn first_focus(&self) -> usize {
        let slots = self.layout().slot_panes();
        let focusable = self.focusable_slots();
        focusable.iter().copied().find(|&i| !slots[i].contains(&PaneKind::Generate)).or(focusable.first().copied()).unwrap_or(0)
    }
}
