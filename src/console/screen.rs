//! What the screen shows: the layouts to cycle through, the one in use, the slot with the
//! focus, whether that slot is zoomed to the whole screen, whether the help is drawn over them,
//! and where the panes without a scroll of their own are scrolled. Which pane a slot shows
//! depends on the panes' content, so `app::State` decides that; this only knows the layouts.

use std::collections::BTreeMap;

use super::layout::{Layout, PaneKind};
use super::scroll::Scroll;

/// Below this many columns or rows the compact layout is chosen (when none was asked for).
pub const COMPACT_BELOW: (u16, u16) = (100, 30);

#[derive(Clone, Debug)]
pub struct Screen {
    layouts: Vec<Layout>,
    layout: usize,
    /// Index of the focused slot of the current layout.
    focus: usize,
    help_open: bool,
    zoomed: bool,
    /// Whether the layout follows the terminal's size (no layout was asked for, and `L` was
    /// not pressed).
    sized: bool,
    scrolls: BTreeMap<PaneKind, Scroll>,
    help_scroll: Scroll,
}

impl Screen {
    pub fn new(layouts: Vec<Layout>) -> Screen {
        assert!(!layouts.is_empty(), "a console needs at least one layout");
        let mut screen = Screen {
            layouts,
            layout: 0,
            focus: 0,
            help_open: false,
            zoomed: false,
            sized: false,
            scrolls: BTreeMap::new(),
            help_scroll: Scroll::default(),
        };
        screen.focus = screen.first_focus();
        screen
    }

    /// Choose the layout by the terminal's size from now on: `compact` below
    /// `COMPACT_BELOW`, `default` from there.
    pub fn size_layout_to_terminal(&mut self) {
        self.sized = true;
    }

    /// The terminal is `width` × `height`: pick the layout for it when it follows the size.
    pub fn fit(&mut self, width: u16, height: u16) {
        if !self.sized {
            return;
        }
        let name = if width < COMPACT_BELOW.0 || height < COMPACT_BELOW.1 { "compact" } else { "default" };
        if let Some(i) = self.layouts.iter().position(|l| l.name == name) {
            if i != self.layout {
                self.layout = i;
                self.focus = self.first_focus();
            }
        }
    }

    pub fn zoomed(&self) -> bool {
        self.zoomed
    }

    pub fn toggle_zoom(&mut self) {
        self.zoomed = !self.zoomed;
    }

    /// The scroll of a pane without one of its own.
    pub fn scroll(&self, pane: PaneKind) -> Scroll {
        self.scrolls.get(&pane).copied().unwrap_or_default()
    }

    pub fn scroll_mut(&mut self, pane: PaneKind) -> &mut Scroll {
        self.scrolls.entry(pane).or_default()
    }

    pub fn help_scroll(&self) -> Scroll {
        self.help_scroll
    }

    pub fn help_scroll_mut(&mut self) -> &mut Scroll {
        &mut self.help_scroll
    }

    /// Focus the first slot that can show `pane`; false when the layout has none.
    pub fn focus_pane(&mut self, pane: PaneKind) -> bool {
        match self.layout().slot_panes().iter().position(|panes| panes.contains(&pane)) {
            Some(i) => {
                self.focus = i;
                true
            }
            None => false,
        }
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
        self.help_scroll = Scroll::default();
    }

    /// Go to the next layout, focused on its first slot that takes keys. The layout is the
    /// user's choice from then on, whatever the terminal's size.
    pub fn cycle_layout(&mut self) {
        self.sized = false;
        self.zoomed = false;
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
