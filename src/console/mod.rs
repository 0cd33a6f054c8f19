//! The console: one event stream in, keys mapped to `Action`s, a pure state update
//! (`app::State::apply`) and pure drawing (`panes::draw`). Every pane is fed by events
//! only, so a live launch and a replayed recording look the same.

pub mod action;
pub mod app;
pub mod clipboard;
pub(crate) mod engine;
pub(crate) mod excerpt;
pub mod headless;
pub mod keymap;
pub mod layout;
pub(crate) mod log;
pub mod panes;
pub mod run;
pub(crate) mod screen;
pub(crate) mod scroll;
pub(crate) mod session;
pub mod terminal;
pub(crate) mod text;
pub mod theme;

pub use engine::{EngineControl, GenerateParams};
