//! The loop: user input, the event stream and a clock merged in one `select!`; each input
//! goes through `State::apply`, and its effects are carried out here (engine commands,
//! emitted events, file reads). Frames are drawn only when something changed, at most
//! every `FRAME`, so an idle console sleeps.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::{interval, sleep_until, Instant, MissedTickBehavior};
use tui_input::InputRequest;

use super::action::Action;
use super::app::{Effect, Input, State};
use super::clipboard;
use super::engine::EngineControl;
use super::keymap::InputMode;
use crate::event::{EventReceiver, EventSink, TimedEvent};
use crate::recorder::Recorder;

/// Shortest time between two frames (60 per second at most).
const FRAME: Duration = Duration::from_millis(16);
/// The clock that moves elapsed times and gauges while something runs.
const TICK: Duration = Duration::from_millis(250);
/// How long to wait for the engine's `Exit` after asking it to shut down.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Files larger than this are not quoted in the diagnosis.
const MAX_QUOTED_FILE: u64 = 8 << 20;

/// Input from the user's side: keys, terminal changes, signals.
#[derive(Clone, Debug, PartialEq)]
pub enum UserInput {
    Key(KeyEvent),
    /// Text the terminal delivered as one bracketed paste: typed into the prompt or the
    /// search when one has focus, and never read as keys (a `q` in it must not quit).
    Paste(String),
    Action(Action),
    Resize,
    /// The terminal is gone (the input stream ended): tear down without drawing.
    Hangup,
    /// SIGHUP (as `Hangup`), SIGTERM or SIGINT (as `Quit`); the session exits 128 + it.
    Signal(i32),
}

/// Where the session shows itself: a terminal (draws), the headless printer (prints each
/// event), or a test backend.
pub trait Frontend {
    /// An event arrived; called before the state applies it.
    fn on_event(&mut self, _event: &TimedEvent, _state: &State) -> io::Result<()> {
        Ok(())
    }
    /// Draw the state. Front ends that do not draw return false from `draws`.
    fn draw(&mut self, _state: &State) -> io::Result<()> {
        Ok(())
    }
    fn draws(&self) -> bool {
        false
    }
    /// The terminal went away: stop drawing.
    fn lost(&mut self) {}
    /// The screen's size, for front ends that draw.
    fn size(&self) -> Option<(u16, u16)> {
        None
    }
    /// Set the terminal's clipboard (OSC 52).
    fn copy(&mut self, _text: &str) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "no terminal to copy to"))
    }
    /// The session ends with `code`.
    fn finish(&mut self, _state: &State, _code: i32) -> io::Result<()> {
        Ok(())
    }
}

/// Everything a session runs with.
pub struct Session {
    pub state: State,
    pub engine: Option<Box<dyn EngineControl>>,
    pub sink: EventSink,
    pub recorder: Option<Recorder>,
}

/// The end of a session: its exit code, its final state, and a recording error if the
/// event log could not be written.
pub struct Outcome {
    pub code: i32,
    pub state: State,
    pub recorder_error: Option<io::Error>,
}

/// Read a file the diagnosis quotes (small text files only).
pub fn read_source(path: &str) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.len() > MAX_QUOTED_FILE {
        return Err(format!("{} bytes: too large to quote", meta.len()));
    }
    std::fs::read_to_string(path).map_err(|e| e.to_string())
}

/// `~/…` for a path under the home directory, as the status bar shows it.
fn home_relative(path: &std::path::Path) -> String {
    match dirs::home_dir().and_then(|home| path.strip_prefix(home).ok().map(|rest| rest.display().to_string())) {
        Some(rest) => format!("~/{rest}"),
        None => path.display().to_string(),
    }
}

struct Runner<'a, F: Frontend> {
    session: Session,
    frontend: &'a mut F,
    shutdown_by: Option<Instant>,
    recorder_error: Option<io::Error>,
    /// The first signal received: it decides the exit code.
    signal: Option<i32>,
}

impl<F: Frontend> Runner<'_, F> {
    /// Apply one input and everything it leads to; `Some(code)` when the session ends.
    fn step(&mut self, input: Input) -> Option<i32> {
        let mut pending = VecDeque::from([input]);
        while let Some(input) = pending.pop_front() {
            if let Input::Event(ev) = &input {
                self.record(ev);
                // A front end that cannot print (a closed pipe) must not stop the teardown.
                let _ = self.frontend.on_event(ev, &self.session.state);
            }
            for effect in self.session.state.apply(input) {
                match effect {
                    Effect::Launch(spec) => self.engine(|e| e.launch(spec)),
                    Effect::Generate(params) => self.engine(|e| e.generate(params)),
                    Effect::Shutdown => {
                        self.engine(|e| e.shutdown());
                        self.shutdown_by = Some(Instant::now() + SHUTDOWN_GRACE);
                    }
                    Effect::Emit(event) => self.session.sink.emit(event),
                    Effect::ReadFile(path) => {
                        let text = read_source(&path);
                        pending.push_back(Input::FileLoaded { path, text });
                    }
                    Effect::Copy { what, text } => {
                        let osc52 = self.frontend.copy(&text).is_ok();
                        let saved = clipboard::save(what, &text).map(|p| home_relative(&p)).map_err(|e| e.to_string());
                        pending.push_back(Input::Copied { what, osc52, saved });
                    }
                    Effect::Exit(code) => return Some(code),
                }
            }
        }
        None
    }

    fn resized(&mut self) -> Option<i32> {
        let (width, height) = self.frontend.size()?;
        self.step(Input::Resize { width, height })
    }

    fn engine(&mut self, command: impl FnOnce(&mut dyn EngineControl)) {
        if let Some(engine) = self.session.engine.as_deref_mut() {
            command(engine);
        }
    }

    fn record(&mut self, ev: &TimedEvent) {
        if let Some(rec) = &mut self.session.recorder {
            if let Err(e) = rec.record(ev) {
                self.recorder_error = Some(e);
                self.session.recorder = None;
            }
        }
    }

    fn user(&mut self, input: UserInput) -> Option<i32> {
        match input {
            UserInput::Key(key) => {
                let action = self.session.state.keymap().map_key(self.session.state.input_mode(), &key)?;
                // In raw mode Ctrl-C arrives as a key, not as SIGINT; quitting with it exits
                // 130 all the same, as the interrupted command a shell reports.
                if action == Action::Quit && is_ctrl_c(&key) {
                    self.signal.get_or_insert(libc::SIGINT);
                }
                self.step(Input::Action(action))
            }
            UserInput::Paste(text) => {
                if self.session.state.input_mode() != InputMode::Text {
                    return None;
                }
                // One line of input: the paste's line breaks become spaces.
                let chars = text.chars().map(|c| if c == '\n' || c == '\r' { ' ' } else { c }).filter(|c| !c.is_control());
                chars.fold(None, |exit, c| exit.or_else(|| self.step(Input::Action(Action::Edit(InputRequest::InsertChar(c))))))
            }
            UserInput::Action(action) => self.step(Input::Action(action)),
            UserInput::Resize => self.resized(),
            UserInput::Hangup => {
                self.frontend.lost();
                self.step(Input::Action(Action::Quit))
            }
            UserInput::Signal(signal) => {
                self.signal.get_or_insert(signal);
                self.user(if signal == libc::SIGHUP { UserInput::Hangup } else { UserInput::Action(Action::Quit) })
            }
        }
    }
}

fn is_ctrl_c(key: &KeyEvent) -> bool {
    key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL)
}

/// Run a session until it exits. `inputs` carries keys and signals; `events` is the stream.
pub async fn run<F: Frontend>(
    session: Session,
    mut events: EventReceiver,
    mut inputs: UnboundedReceiver<UserInput>,
    frontend: &mut F,
) -> Outcome {
    let draws = frontend.draws();
    let mut runner = Runner { session, frontend, shutdown_by: None, recorder_error: None, signal: None };
    let mut code = runner.resized();
    for effect in runner.session.state.start() {
        if let Effect::Launch(spec) = effect {
            runner.engine(|e| e.launch(spec));
        }
    }
    let mut clock = interval(TICK);
    clock.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut dirty = draws;
    let mut last_draw = Instant::now() - FRAME;
    let mut inputs_open = true;
    let mut batch = Vec::with_capacity(256);
    while code.is_none() {
        let deadline = runner.shutdown_by.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            input = inputs.recv(), if inputs_open => match input {
                Some(input) => {
                    code = runner.user(input);
                    dirty = draws;
                }
                None => inputs_open = false,
            },
            n = events.recv_many(&mut batch, 256) => {
                for ev in batch.drain(..n) {
                    code = code.or(runner.step(Input::Event(ev)));
                }
                dirty = draws;
            },
            _ = clock.tick() => {
                code = runner.step(Input::Tick(runner.session.sink.now()));
                dirty |= draws && runner.session.state.animating();
            },
            _ = sleep_until(last_draw + FRAME), if dirty => {
                if runner.frontend.draw(&runner.session.state).is_err() {
                    runner.frontend.lost();
                }
                last_draw = Instant::now();
                dirty = false;
            },
            _ = sleep_until(deadline), if runner.shutdown_by.is_some() => {
                // The engine did not confirm its shutdown in time; leave anyway.
                code = Some(runner.session.state.exit_code());
            },
        }
    }
    let code = runner.signal.map_or(code.unwrap_or(0), |signal| 128 + signal);
    let _ = runner.frontend.finish(&runner.session.state, code);
    Outcome { code, state: runner.session.state, recorder_error: runner.recorder_error }
}
