//! A session end to end: pick the console (a TTY) or the headless printer, start the
//! engine, the telemetry sampler and the recorder, run the loop, tear everything down.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc::unbounded_channel;

use super::app::{Options, ReplaySource, State};
use super::engine::EngineControl;
use super::headless::Printer;
use super::keymap::Keymap;
use super::layout::Layout;
use super::run::{run, Outcome, Session};
use super::terminal::{spawn_signal_watch, spawn_terminal_input, TerminalFrontend, TerminalGuard};
use super::theme::Theme;
use crate::event::EventSink;
use crate::finding_text::ColorChoice;
use crate::recorder::Recorder;
use crate::spec::LaunchSpec;
use crate::telemetry;

#[derive(Clone, Debug, Default)]
pub struct SessionConfig {
    pub spec: LaunchSpec,
    /// Remedy ids to apply when a launch reports them.
    pub apply: Vec<String>,
    /// Sent once the engine is first ready.
    pub prompt: Option<String>,
    pub max_new_tokens: usize,
    /// A built-in layout name or a layout file.
    pub layout: Option<String>,
    pub keymap: Option<PathBuf>,
    pub event_log: Option<PathBuf>,
    /// Print instead of drawing, even on a TTY.
    pub headless: bool,
    /// The recording a replay reads (the console's title names it).
    pub replay: Option<ReplaySource>,
    /// `--color`: the console's theme.
    pub color: ColorChoice,
    /// Prompts go through the tokenizer's chat template (`launch --chat`).
    pub chat: bool,
    /// The engine serves HTTP: a headless run goes on after ready, until a signal.
    pub serving: bool,
}

/// Whether this process can run the console: a terminal on both stdin and stdout, of a kind
/// that can draw.
pub fn has_tty() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal() && term_can_draw(std::env::var("TERM").ok().as_deref())
}

/// `TERM=dumb` (or none) cannot move the cursor or draw an alternate screen: such a terminal
/// gets the headless output.
fn term_can_draw(term: Option<&str>) -> bool {
    !matches!(term.map(str::trim), None | Some("") | Some("dumb"))
}

/// The wall-clock time (Unix seconds) of the sink's epoch.
fn wall_epoch(sink: &EventSink) -> f64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    now - sink.now()
}

/// Run a session. `start` gets the event sink and returns the engine to drive, or `None`
/// when the events come from elsewhere (a replay producer it started on the sink).
pub fn run_session(
    config: SessionConfig,
    start: impl FnOnce(EventSink) -> anyhow::Result<Option<Box<dyn EngineControl>>>,
) -> anyhow::Result<i32> {
    let interactive = !config.headless && has_tty();
    // Configuration errors are reported before the terminal changes mode.
    let keymap = Keymap::load(config.keymap.as_deref())?;
    let layout = Layout::resolve(config.layout.as_deref().unwrap_or("default"))?;
    let layout_given = config.layout.is_some();
    let recorder = config.event_log.as_deref().map(Recorder::create).transpose().context("--event-log")?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let outcome = runtime.block_on(async move {
        let (sink, events) = EventSink::channel();
        let engine = start(sink.clone())?;
        // A recording brings its own GPUs (telemetry events, `avail mem` lines): this machine's are not its.
        let _sampler = engine.is_some().then(|| telemetry::spawn(sink.clone(), Duration::from_secs(1)));
        let (tx, inputs) = unbounded_channel();
        spawn_signal_watch(tx.clone())?;
        let options = Options {
            engine_attached: engine.is_some(),
            exit_when_done: !interactive,
            apply: config.apply,
            prompt: config.prompt,
            max_new_tokens: config.max_new_tokens,
            replay: config.replay,
            chat: config.chat,
            size_layout: !layout_given,
            wall_epoch: engine.is_some().then(|| wall_epoch(&sink)),
            serving: config.serving,
        };
        let state = State::new(config.spec, options, keymap, Layout::cycle_starting_with(layout));
        let session = Session { state, engine, sink, recorder };
        let outcome: Outcome = if interactive {
            let mut guard = TerminalGuard::enter().context("cannot set up the terminal")?;
            spawn_terminal_input(tx);
            let mut frontend = TerminalFrontend::new(&mut guard.terminal, Theme::for_choice(config.color));
            run(session, events, inputs, &mut frontend).await
        } else {
            let mut printer = Printer::new(std::io::stdout().lock(), std::io::stderr());
            run(session, events, inputs, &mut printer).await
        };
        anyhow::Ok(outcome)
    })?;
    // The terminal is back to normal here: the line the session fixed stays on screen to paste.
    let spec = outcome.state.spec();
    if interactive && !spec.applied.is_empty() {
        println!("specdeck: the fixed command ({}):\n{}", spec.applied.join(", "), spec.fixed_command());
    }
    match outcome.recorder_error {
        Some(e) => {
            eprintln!("specdeck: the event log stopped early: {e}");
            // A run whose recording was asked for and lost did not succeed.
            Ok(if outcome.code == 0 { 1 } else { outcome.code })
        }
        None => Ok(outcome.code),
    }
}

#[cfg(test)]
mod tests {
    use super::term_can_draw;

    #[test]
    fn a_dumb_or_unnamed_terminal_gets_the_headless_output() {
        for term in [None, Some(""), Some("dumb"), Some(" dumb ")] {
            assert!(!term_can_draw(term), "{term:?}");
        }
        for term in ["xterm-256color", "screen", "tmux-256color", "linux"] {
            assert!(term_can_draw(Some(term)), "{term}");
        }
    }
}
