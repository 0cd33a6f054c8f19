//! The demo, live and replayed. A headless console session runs the real engine on the
//! demo pair (preflight finds `context-length-exceeds-draft`, `--apply` clamps the context,
//! the relaunch reaches ready, the default prompt generates) and records its event log.
//! Replaying that JSONL through the replay producer into a fresh console draws the same
//! final panes, pixel for pixel, under a status bar that says REPLAY. A recording committed in testdata/demo/ pins that
//! screen as an insta snapshot.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use specdeck::console::app::{Options, ReplaySource, State};
use specdeck::console::keymap::Keymap;
use specdeck::console::layout::Layout;
use specdeck::console::panes;
use specdeck::console::run::{run, Frontend, Outcome, Session, UserInput};
use specdeck::console::theme::Theme;
use specdeck::demo::{DemoPair, DEFAULT_PROMPT};
use specdeck::engine::handle::EngineHandle;
use specdeck::engine::request::PreflightFn;
use specdeck::event::{Event, EventSink, TimedEvent};
use specdeck::recorder::Recorder;
use specdeck::replay::{produce, ReplayOptions, Source};
use specdeck::spec::LaunchSpec;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

/// Draws nothing: the final state is drawn by the test.
struct Quiet;
impl Frontend for Quiet {}

/// A replay viewer who presses `q` once the recording's last event (the engine's exit)
/// is on screen, as a user of `specdeck replay` on a TTY would.
struct QuitAtExit(UnboundedSender<UserInput>);
impl Frontend for QuitAtExit {
    fn on_event(&mut self, ev: &TimedEvent, _: &State) -> std::io::Result<()> {
        if matches!(ev.event, Event::Exit { .. }) {
            let q = KeyEvent::new(KeyCode::Char('q'), KeyModifiers::NONE);
            let _ = self.0.send(UserInput::Key(q));
        }
        Ok(())
    }
}

/// The demo pair in the repository, by relative path so that screens do not depend on
/// where the checkout lives (tests run from the crate root).
fn demo_spec() -> LaunchSpec {
    DemoPair { target: PathBuf::from("testdata/demo/target"), draft: PathBuf::from("testdata/demo/draft") }.spec()
}

fn options(replay: Option<ReplaySource>) -> Options {
    let engine_attached = replay.is_none();
    Options {
        engine_attached,
        // Headless for the live run; a replay on a TTY stays until the user quits.
        exit_when_done: engine_attached,
        apply: if engine_attached { vec!["clamp-context-length".into()] } else { Vec::new() },
        prompt: engine_attached.then(|| DEFAULT_PROMPT.to_string()),
        max_new_tokens: 64,
        replay,
        ..Options::default()
    }
}

fn new_state(spec: LaunchSpec, replay: Option<ReplaySource>) -> State {
    State::new(spec, options(replay), Keymap::default(), Layout::cycle_starting_with(Layout::builtin("default").unwrap()))
}

fn screen(state: &State, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| panes::draw(state, &Theme::monochrome(), f)).unwrap();
    terminal.backend().to_string()
}

/// The live run: the real engine behind the console loop, recorded to `log`.
async fn live_demo(log: &Path) -> State {
    let (sink, events) = EventSink::channel();
    let preflight: PreflightFn = Arc::new(specdeck::preflight::check_spec);
    let engine = EngineHandle::spawn(sink.clone(), preflight);
    let session = Session {
        state: new_state(demo_spec(), None),
        engine: Some(Box::new(engine)),
        sink,
        recorder: Some(Recorder::create(log).unwrap()),
    };
    let (_keys, inputs) = unbounded_channel();
    let Outcome { code, state, recorder_error } = run(session, events, inputs, &mut Quiet).await;
    assert_eq!(code, 0, "the clamped demo reaches ready and generates");
    assert!(recorder_error.is_none());
    state
}

/// The console as `specdeck replay LOG` shows it: no engine, events from the producer.
async fn replayed(log: &Path) -> State {
    let (sink, events) = EventSink::channel();
    let producer_sink = sink.clone();
    let source = Source::Path(log.to_path_buf());
    let replay = ReplaySource { file: source.label(), following: false };
    let producer =
        std::thread::spawn(move || produce(&source, &ReplayOptions { follow: false, speed: 0.0, logs: true }, &producer_sink).map(|_| ()));
    let session = Session { state: new_state(LaunchSpec::default(), Some(replay)), engine: None, sink, recorder: None };
    let (keys, inputs) = unbounded_channel();
    let outcome = run(session, events, inputs, &mut QuitAtExit(keys)).await;
    producer.join().unwrap().expect("the recording replays");
    outcome.state
}

/// A live console's diagnosis line as a replay draws it: a replay cannot relaunch, so it lists
/// a finding's remedies for the next launch, without the keys that apply them.
fn as_replay_lists_remedies(line: &str) -> String {
    let (live, replay) = ("Remedies (press the key to apply and relaunch):", "Remedies (for the next launch):");
    let line = line.replace(live, &format!("{replay:<width$}", width = live.len()));
    let keyed = regex::Regex::new(r"│  [1-9]  ").unwrap();
    keyed.replace_all(&line, "│  -  ").into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_live_demo_replays_to_the_same_final_screen() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("demo.jsonl");
    let live = live_demo(&log).await;
    assert_eq!((live.attempt(), live.generate().generation().tokens), (2, 64), "the clamped relaunch generated 64 tokens");
    let again = replayed(&log).await;
    for (w, h) in [(200, 60), (80, 24)] {
        // The status bar is the one line that differs: the replay's says REPLAY and names the file.
        let (replayed, live) = (screen(&again, w, h), screen(&live, w, h));
        let panes = |s: &str| s.lines().take(h as usize - 1).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            panes(&replayed),
            panes(&live).iter().map(|l| as_replay_lists_remedies(l)).collect::<Vec<_>>(),
            "final panes at {w}x{h}"
        );
        let bar = replayed.lines().last().unwrap();
        // At 80 columns the file is named without its folders, so the key hints keep their place.
        let named = if w == 80 { "demo.jsonl".to_string() } else { log.display().to_string() };
        assert!(bar.starts_with(&format!("\" REPLAY {named} · not following ·")), "{bar}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_committed_demo_recording_replays_to_its_screen() {
    let log = Path::new("testdata/demo/recorded-run.jsonl");
    let recorded = std::fs::read_to_string(log).unwrap();
    assert!(recorded.lines().any(|l| l.contains("\"type\":\"remedy-applied\"")), "the recording holds the fix");
    let state = replayed(log).await;
    assert_eq!(state.attempt(), 2, "the recording holds the failed launch and the clamped relaunch");
    assert!(state.generate().generation().tokens > 0 && state.engine_exited());
    insta::assert_snapshot!("demo_recording_final_200x60", screen(&state, 200, 60));
    insta::assert_snapshot!("demo_recording_final_80x24", screen(&state, 80, 24));
}
