//! The scroll position of a pane that has none of its own (the log and the diagnosis keep
//! theirs): moves from where the pane would start by itself (the running phase, the newest
//! text), or from the top after `g`. The state never knows a pane's height, so the moves are
//! kept and the drawing clamps them.

use super::action::{Action, PAGE};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scroll {
    /// Counted from the top (after `g`) rather than from the pane's own choice.
    from_top: bool,
    /// Rows moved down (negative: up).
    moved: isize,
}

impl Scroll {
    /// Move by a scroll key; `G` gives the pane its own choice back.
    pub fn apply(&mut self, action: &Action) {
        match action {
            Action::ScrollUp => self.moved -= 1,
            Action::ScrollDown => self.moved += 1,
            Action::PageUp => self.moved -= PAGE as isize,
            Action::PageDown => self.moved += PAGE as isize,
            Action::ScrollTop => *self = Scroll { from_top: true, moved: 0 },
            _ => *self = Scroll::default(),
        }
    }

    /// The first of `rows` rows to show in `height`, where the pane by itself would start at
    /// `own` (clamped, so that the last screenful is as far down as it goes).
    pub fn top(&self, rows: usize, height: usize, own: usize) -> usize {
        let last = rows.saturating_sub(height);
        let base = if self.from_top { 0 } else { own.min(last) };
        (base as isize + self.moved).clamp(0, last as isize) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_count_from_the_panes_own_start_and_are_clamped() {
        let mut s = Scroll::default();
        assert_eq!(s.top(30, 10, 20), 20);
        s.apply(&Action::ScrollUp);
        s.apply(&Action::PageUp);
        assert_eq!(s.top(30, 10, 20), 9);
        s.apply(&Action::ScrollTop);
        s.apply(&Action::ScrollDown);
        assert_eq!(s.top(30, 10, 20), 1);
        s.apply(&Action::PageUp);
        assert_eq!(s.top(30, 10, 20), 0);
        s.apply(&Action::ScrollBottom);
        assert_eq!((s, s.top(5, 10, 3)), (Scroll::default(), 0));
    }
}
