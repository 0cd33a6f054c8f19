//! Drawing: a pure function of the state. Each pane draws into its area of the buffer,
//! from its own state where it has one (each pane's file holds its state beside its
//! drawing; `pane.rs` what they all draw with).

pub(crate) mod diagnosis;
pub(crate) mod generate;
pub(crate) mod gpus;
mod help;
mod log;
mod pane;
pub(crate) mod phases;
pub(crate) mod serving;
mod status;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::widgets::{Paragraph, Widget};
use ratatui::Frame;

pub use pane::fmt_secs;
use pane::Pane;

use super::app::State;
use super::layout::{PaneKind, Slot};
use super::theme::Theme;
use crate::phase::PhaseId;

/// Smallest terminal the panes are laid out for.
pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 10;

pub fn draw(state: &State, theme: &Theme, frame: &mut Frame) {
    let area = frame.area();
    draw_buffer(state, theme, area, frame.buffer_mut());
}

/// Draw the whole console into `buf` (the frame's buffer, or a bare buffer in tests).
pub fn draw_buffer(state: &State, theme: &Theme, area: Rect, buf: &mut Buffer) {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!("terminal too small: {}x{} (need {MIN_WIDTH}x{MIN_HEIGHT})", area.width, area.height);
        Paragraph::new(msg).render(area, buf);
        return;
    }
    let screen = state.screen();
    for (index, slot) in shown_slots(state, area) {
        let pane = Pane { theme, area: slot.area, focused: index == screen.focus() && !screen.help_open() };
        match state.shown_pane(&slot.panes) {
            PaneKind::Phases => {
                let fixed = (!state.spec().applied.is_empty()).then(|| state.spec().fixed_command());
                let view = phases::View { attempt: state.attempt(), now: state.now(), fixed, scroll: screen.scroll(PaneKind::Phases) };
                phases::draw(&pane, state.phases(), &view, buf)
            }
            PaneKind::Gpus => gpus::draw(&pane, state.gpus(), screen.scroll(PaneKind::Gpus), buf),
            PaneKind::Log => log::draw(&pane, state.log(), state.wall_epoch(), buf),
            PaneKind::Diagnosis => {
                let preflight = state.phases().state_of(PhaseId::Preflight);
                diagnosis::draw(&pane, state.diagnosis(), state.keymap(), state.attempt(), preflight, buf)
            }
            PaneKind::Generate => {
                let prompt = match (state.engine_attached(), state.ready().is_some()) {
                    (false, _) => generate::Prompting::Recorded,
                    (true, false) => generate::Prompting::NotReady,
                    (true, true) => generate::Prompting::Ready,
                };
                generate::draw(&pane, state.generate(), prompt, state.inserting(), screen.scroll(PaneKind::Generate), buf)
            }
            PaneKind::Serving => serving::draw(&pane, state.serving(), state.now(), buf),
            PaneKind::Status => status::draw(&pane, state, buf),
        }
    }
    if screen.help_open() {
        help::draw(state.keymap(), state.engine_attached(), screen.help_scroll(), theme, area, buf);
    }
}

/// The slots to draw, with their index in the layout: all of them, or the focused one over
/// the whole screen with the status bar kept at the bottom when zoomed.
fn shown_slots(state: &State, area: Rect) -> Vec<(usize, Slot)> {
    let screen = state.screen();
    let slots = screen.layout().slots(area);
    if !screen.zoomed() {
        return slots.into_iter().enumerate().collect();
    }
    let status = slots.iter().position(|s| s.panes == [PaneKind::Status]);
    let bar = u16::from(status.is_some());
    let mut shown = Vec::new();
    if let Some(focused) = slots.get(screen.focus()) {
        shown.push((screen.focus(), Slot { panes: focused.panes.clone(), area: Rect { height: area.height - bar, ..area } }));
    }
    if let Some(i) = status {
        shown.push((i, Slot { panes: vec![PaneKind::Status], area: Rect { y: area.bottom() - 1, height: 1, ..area } }));
    }
    shown
}
