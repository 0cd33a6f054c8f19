//! The real terminal: raw mode and the alternate screen on entry, restored on exit, on a
//! panic (ratatui's hook, chained before the previous one) and on every early return (the
//! guard's `Drop`). Keys, resizes and signals are forwarded as `UserInput`.

use std::io;

use crossterm::event::{DisableBracketedPaste, EnableBracketedPaste, Event as TermEvent, EventStream, KeyEventKind};
use futures::StreamExt;
use ratatui::backend::Backend;
use ratatui::{DefaultTerminal, Terminal};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc::UnboundedSender;

use super::app::State;
use super::clipboard::ClipboardBackend;
use super::panes;
use super::run::{Frontend, UserInput};
use super::theme::Theme;

/// Owns the terminal while the console runs; restores it when dropped.
pub struct TerminalGuard {
    pub terminal: DefaultTerminal,
}

impl TerminalGuard {
    /// Enter raw mode and the alternate screen. Fails cleanly (no panic) without a TTY.
    ///
    /// A panic on any thread (the engine's included) restores the terminal, reports, and
    /// ends the process: a console whose terminal was restored under it cannot go on.
    pub fn enter() -> io::Result<TerminalGuard> {
        let terminal = ratatui::try_init()?;
        // Pasted text arrives as one event instead of keystrokes (a pasted `q` must not quit).
        crossterm::execute!(io::stdout(), EnableBracketedPaste)?;
        let restore_and_report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // ratatui's hook leaves raw mode and the alternate screen; the cursor, hidden
            // while drawing, is shown by the terminal's Drop, which never runs on this path.
            let _ = crossterm::execute!(io::stdout(), DisableBracketedPaste, crossterm::cursor::Show);
            restore_and_report(info);
            std::process::exit(101);
        }));
        Ok(TerminalGuard { terminal })
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        // Errors here mean the terminal is already gone; nothing is left to restore.
        let _ = crossterm::execute!(io::stdout(), DisableBracketedPaste);
        let _ = ratatui::try_restore();
    }
}

/// Draws the state on a ratatui terminal (the real one, or a `TestBackend`).
pub struct TerminalFrontend<'a, B: Backend> {
    pub terminal: &'a mut Terminal<B>,
    pub theme: Theme,
    lost: bool,
}

impl<'a, B: Backend> TerminalFrontend<'a, B> {
    pub fn new(terminal: &'a mut Terminal<B>, theme: Theme) -> Self {
        TerminalFrontend { terminal, theme, lost: false }
    }
}

impl<B: Backend + ClipboardBackend> Frontend for TerminalFrontend<'_, B> {
    fn draw(&mut self, state: &State) -> io::Result<()> {
        if self.lost {
            return Ok(());
        }
        self.terminal.draw(|f| panes::draw(state, &self.theme, f)).map(|_| ()).map_err(|e| io::Error::other(e.to_string()))
    }

    fn draws(&self) -> bool {
        true
    }

    fn lost(&mut self) {
        self.lost = true;
    }

    fn size(&self) -> Option<(u16, u16)> {
        self.terminal.size().ok().map(|s| (s.width, s.height))
    }

    /// Through the backend, so the sequence reaches the terminal between frames.
    fn copy(&mut self, text: &str) -> io::Result<()> {
        self.terminal.backend_mut().set_clipboard(text)
    }
}

/// Forward key presses, pastes and resizes; a failing or ending input stream means the terminal
/// is gone.
pub fn spawn_terminal_input(tx: UnboundedSender<UserInput>) {
    tokio::spawn(async move {
        let mut stream = EventStream::new();
        while let Some(event) = stream.next().await {
            let input = match event {
                Ok(TermEvent::Key(key)) if key.kind != KeyEventKind::Release => UserInput::Key(key),
                Ok(TermEvent::Resize(..)) => UserInput::Resize,
                Ok(TermEvent::Paste(text)) => UserInput::Paste(text),
                Ok(_) => continue,
                Err(_) => break,
            };
            if tx.send(input).is_err() {
                return;
            }
        }
        let _ = tx.send(UserInput::Hangup);
    });
}

/// SIGHUP (terminal lost) tears down without drawing; SIGTERM and SIGINT quit cleanly (a
/// second one quits without waiting for the engine). The session then exits 128 + the
/// signal's number, as a shell reports a process the signal ended.
pub fn spawn_signal_watch(tx: UnboundedSender<UserInput>) -> io::Result<()> {
    let mut hangup = signal(SignalKind::hangup())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        loop {
            let input = tokio::select! {
                _ = hangup.recv() => UserInput::Signal(libc::SIGHUP),
                _ = terminate.recv() => UserInput::Signal(libc::SIGTERM),
                _ = interrupt.recv() => UserInput::Signal(libc::SIGINT),
            };
            if tx.send(input).is_err() {
                return;
            }
        }
    });
    Ok(())
}
