//! The console, driven by the event sequences of tests/common's stories: rendered screens of
//! every pane and layout (insta, TestBackend), style markers for what plain text loses, and
//! whole sessions run through the app loop's action channel with no terminal.

mod common;

use std::io;

use common::{demo_story, sharded_capture_story, spec, ChannelEngine, Command, Stage, Story};
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Modifier;
use ratatui::Terminal;
use specdeck::console::action::Action;
use specdeck::console::app::{Effect, Input, Options, ReplaySource, State};
use specdeck::console::headless::Printer;
use specdeck::console::keymap::{KeyChord, Keymap};
use specdeck::console::layout::Layout;
use specdeck::console::panes;
use specdeck::console::run::{read_source, run, Frontend, Outcome, Session, UserInput};
use specdeck::console::terminal::TerminalFrontend;
use specdeck::console::theme::Theme;
use specdeck::event::{Event, EventSink, LogLevel, TimedEvent};
use specdeck::recorder::Recorder;
use specdeck::replay::replay_bytes;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

const PROMPT: &str = "HAMLET.\nTo be, or not to be, that is the question:\n";

fn options() -> Options {
    Options { engine_attached: true, max_new_tokens: 64, prompt: Some("To be".into()), ..Options::default() }
}

fn state_with(layouts: Vec<Layout>) -> State {
    State::new(spec(), options(), Keymap::default(), layouts)
}

/// Apply events as the loop does, reading the files the diagnosis asks for.
fn feed(state: &mut State, events: &[TimedEvent]) {
    for ev in events {
        let mut queue = vec![Input::Event(ev.clone())];
        while let Some(input) = queue.pop() {
            for effect in state.apply(input) {
                if let Effect::ReadFile(path) = effect {
                    let text = read_source(&path);
                    queue.push(Input::FileLoaded { path, text });
                }
            }
        }
    }
}

fn story_state(layout: &str, story: &Story) -> State {
    let mut s = state_with(Layout::cycle_starting_with(Layout::resolve(layout).unwrap()));
    feed(&mut s, &story.events);
    s
}

fn draw(state: &State, theme: Theme, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| panes::draw(state, &theme, f)).unwrap();
    terminal
}

/// The screen with styles made visible: «reversed» (evidence lines, search hits, the
/// cursor) and ‹underlined› (accepted draft tokens).
fn styled(buf: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        let mut open: Option<(char, char)> = None;
        for x in 0..buf.area.width {
            let cell = &buf[(x, y)];
            let mark = if cell.modifier.contains(Modifier::REVERSED) {
                Some(('«', '»'))
            } else if cell.modifier.contains(Modifier::UNDERLINED) {
                Some(('‹', '›'))
            } else {
                None
            };
            if mark != open {
                if let Some((_, close)) = open {
                    line.push(close);
                }
                if let Some((start, _)) = mark {
                    line.push(start);
                }
                open = mark;
            }
            line.push_str(cell.symbol());
        }
        if let Some((_, close)) = open {
            line.push(close);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn only(pane: &str) -> Vec<Layout> {
    vec![Layout::parse(pane, "test", &format!("[[row]]\n[[row.child]]\npane = \"{pane}\"\n")).unwrap()]
}

fn pane_state(pane: &str, story: &Story) -> State {
    let mut s = state_with(only(pane));
    feed(&mut s, &story.events);
    s
}

const SIZES: [(u16, u16); 2] = [(80, 24), (200, 60)];

#[test]
fn every_layout_at_both_sizes_in_the_diagnosis_and_after_the_relaunch() {
    for (stage, name) in [(Stage::Diagnosis, "diagnosis"), (Stage::Relaunched, "relaunched")] {
        let story = demo_story(stage);
        for layout in ["default", "compact", "wide"] {
            let state = story_state(layout, &story);
            for (w, h) in SIZES {
                let term = draw(&state, Theme::colored(), w, h);
                insta::assert_snapshot!(format!("layout_{layout}_{w}x{h}_{name}"), term.backend());
            }
        }
    }
}

#[test]
fn each_pane_at_both_sizes() {
    let diagnosis = demo_story(Stage::Diagnosis);
    let relaunched = demo_story(Stage::Relaunched);
    let capture = sharded_capture_story();
    let cases: [(&str, &str, &Story); 7] = [
        ("phases", "relaunched", &relaunched),
        ("phases", "sharded_capture", &capture),
        ("gpus", "no_gpu", &diagnosis),
        ("gpus", "eight_gpus", &capture),
        ("log", "relaunched", &relaunched),
        ("diagnosis", "diagnosis", &diagnosis),
        ("generate", "relaunched", &relaunched),
    ];
    for (pane, name, story) in cases {
        let state = pane_state(pane, story);
        for (w, h) in SIZES {
            let term = draw(&state, Theme::colored(), w, h);
            insta::assert_snapshot!(format!("pane_{pane}_{w}x{h}_{name}"), term.backend());
        }
    }
    let status = story_state("default", &diagnosis);
    let term = draw(&status, Theme::colored(), 80, 24);
    let bottom: String = (0..80).map(|x| term.backend().buffer()[(x, 23)].symbol().to_string()).collect();
    assert_eq!(bottom.trim_end(), " attempt 1 · failed at preflight · press 1 to fix      1-9 fix  ? help  q quit");
}

/// The console as `specdeck replay FILE` opens it: no engine, the recording named.
fn replay_state(story: &Story, following: bool) -> State {
    let replay = ReplaySource { file: "logs/sglang-oom.log".into(), following };
    let options = Options { engine_attached: false, replay: Some(replay), ..Options::default() };
    let mut s = State::new(spec(), options, Keymap::default(), Layout::cycle_starting_with(Layout::resolve("default").unwrap()));
    feed(&mut s, &story.events);
    s
}

fn bottom_line(term: &Terminal<TestBackend>) -> String {
    let buf = term.backend().buffer();
    let y = buf.area.height - 1;
    (0..buf.area.width).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>().trim_end().to_string()
}

#[test]
fn a_replay_is_titled_replay_with_its_file_and_whether_it_follows() {
    let story = demo_story(Stage::Diagnosis);
    let following = replay_state(&story, true);
    for (w, h) in SIZES {
        insta::assert_snapshot!(format!("replay_following_{w}x{h}_diagnosis"), draw(&following, Theme::monochrome(), w, h).backend());
    }
    // At 80 columns the title names the file alone, and the help and quit keys stay.
    assert_eq!(
        bottom_line(&draw(&following, Theme::monochrome(), 80, 24)),
        " REPLAY sglang-oom.log · following · attempt 1 · failed at pref ? help  q quit"
    );
    let once = draw(&replay_state(&story, false), Theme::monochrome(), 200, 60);
    assert!(
        bottom_line(&once).starts_with(" REPLAY logs/sglang-oom.log · not following · attempt 1 · failed at preflight"),
        "{}",
        bottom_line(&once)
    );
    let live = draw(&story_state("default", &story), Theme::monochrome(), 200, 60);
    assert!(!bottom_line(&live).contains("REPLAY"), "a live launch is not titled a replay");
}

#[test]
fn a_replay_offers_no_fix_relaunch_or_prompt_keys() {
    let story = demo_story(Stage::Diagnosis);
    let replay = replay_state(&story, false);
    for key in ['1', '9', 'r'] {
        assert_eq!(replay.keymap().action_for(KeyChord::plain(key)), None, "{key} does nothing in a replay");
    }
    assert_eq!(story_state("default", &story).keymap().action_for(KeyChord::plain('1')), Some(Action::ApplyRemedy(1)));
    let screen = draw(&replay, Theme::monochrome(), 200, 60).backend().to_string();
    assert!(screen.contains("Remedies (for the next launch):"), "{screen}");
    assert!(!screen.contains("press the key") && !screen.contains("relaunch") && !screen.contains(" fix"), "{screen}");
    assert!(bottom_line(&draw(&replay, Theme::monochrome(), 200, 60)).ends_with("tab focus  L layout  / search  ? help  q quit"));
    let mut help = replay_state(&story, false);
    help.apply(Input::Action(Action::ToggleHelp));
    let term = draw(&help, Theme::monochrome(), 80, 24);
    insta::assert_snapshot!("help_replay_80x24", term.backend());
    let text = term.backend().to_string();
    assert!(!text.contains("relaunch") && !text.contains("remedy") && !text.contains("prompt"), "{text}");
    let mut ready = replay_state(&demo_story(Stage::Relaunched), false);
    ready.apply(Input::Action(Action::Submit));
    assert_eq!(ready.apply(Input::Action(Action::Submit)), Vec::<Effect>::new(), "Enter sends nothing to a recording");
}

/// The console replaying a log file as `specdeck replay FILE` does: the replay producer's
/// events (replay::replay_bytes gives the same), no engine, `layouts` as given.
fn replayed(file: &str, layouts: Vec<Layout>) -> State {
    let (events, _) = replay_bytes(file, &std::fs::read(file).unwrap());
    let options =
        Options { engine_attached: false, replay: Some(ReplaySource { file: file.into(), following: false }), ..Options::default() };
    let mut s = State::new(spec(), options, Keymap::default(), layouts);
    feed(&mut s, &events.into_iter().map(|(_, e)| e).collect::<Vec<_>>());
    s
}

const TP4_OOM: &str = "testdata/logs/sglang-classic/graph-capture-oom.tp4.log";

#[test]
fn a_replay_shows_the_recordings_gpus_from_its_memory_lines() {
    // SGLang's `avail mem=` per TP rank; each rank's torch OOM text adds the device's total.
    let state = replayed(TP4_OOM, only("gpus"));
    let gib = |x: f64| Some((x * (1u64 << 30) as f64).round() as u64);
    let logged: Vec<(u32, Option<u64>, Option<u64>)> =
        state.gpus().logged().iter().map(|(&gpu, m)| (gpu, m.free_bytes, m.total_bytes)).collect();
    assert_eq!(logged, (0..4).map(|gpu| (gpu, gib(1.06), gib(79.10))).collect::<Vec<_>>());
    let term = draw(&state, Theme::monochrome(), 80, 24);
    insta::assert_snapshot!("replay_gpus_from_the_log_80x24", term.backend());
    // Before the crash the log gives free memory alone: no total is made up.
    let text = std::fs::read_to_string(TP4_OOM).unwrap();
    let head: String = text.lines().take(20).map(|l| format!("{l}\n")).collect();
    let (events, _) = replay_bytes("head.log", head.as_bytes());
    let mut early = State::new(spec(), Options::default(), Keymap::default(), only("gpus"));
    feed(&mut early, &events.into_iter().map(|(_, e)| e).collect::<Vec<_>>());
    let screen = draw(&early, Theme::monochrome(), 80, 24).backend().to_string();
    assert!(screen.contains(" 3 TP3          63.5 GiB free (no total in the log)"), "{screen}");
    // A specdeck recording brings its own telemetry: shown as the live session showed it.
    let story = sharded_capture_story();
    let jsonl: String = story.events.iter().map(|e| e.to_json_line() + "\n").collect();
    let (events, _) = replay_bytes("run.jsonl", jsonl.as_bytes());
    let mut recorded = State::new(spec(), Options::default(), Keymap::default(), only("gpus"));
    feed(&mut recorded, &events.into_iter().map(|(_, e)| e).collect::<Vec<_>>());
    let live = pane_state("gpus", &story);
    assert_eq!(
        draw(&recorded, Theme::monochrome(), 80, 24).backend().buffer(),
        draw(&live, Theme::monochrome(), 80, 24).backend().buffer()
    );
}

#[test]
fn sglangs_capture_bar_is_one_gauge_per_capture() {
    let state = replayed("testdata/logs/sglang-classic/success.log", only("phases"));
    let term = draw(&state, Theme::monochrome(), 80, 24);
    insta::assert_snapshot!("replay_capture_bars_80x24", term.backend());
    let screen = term.backend().to_string();
    let gauges: Vec<&str> = screen.lines().filter(|l| l.contains("    bs ")).collect();
    // The target's one bar, then the draft's two (decode, then extend), each at its end.
    assert_eq!(gauges.len(), 3, "{screen}");
    assert!(gauges.iter().all(|g| g.contains("bs    1") && g.contains(" 4/4")), "{screen}");
}

#[test]
fn a_replay_highlights_the_error_line_and_shows_a_finding_of_every_rank_once() {
    let state = replayed(TP4_OOM, only("diagnosis"));
    assert_eq!(state.diagnosis().findings().len(), 1);
    let term = draw(&state, Theme::monochrome(), 200, 60);
    let text = styled(term.backend().buffer());
    insta::assert_snapshot!("replay_diagnosis_error_line_200x60", text);
    assert!(text.contains("ERROR out-of-memory · fails at draft-graph-capture · seen 4× on TP0, TP1, TP2, TP3"), "{text}");
    // The error line, with its figures, is the one highlighted; the frame is cited, not lit.
    let lit: Vec<&str> = text.lines().filter(|l| l.contains('▶')).collect();
    assert_eq!(lit.len(), 1, "{text}");
    assert!(
        lit[0].contains("«69▶torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity"),
        "{text}"
    );
    assert!(
        text.contains(
            "67›  File \"/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py\", line 520, in capture"
        ),
        "{text}"
    );
}

#[test]
fn a_replays_log_pane_shows_every_line_with_routine_ones_dimmed() {
    let file = "testdata/logs/sglang-classic/success.log";
    let state = replayed(file, only("log"));
    let text = std::fs::read_to_string(file).unwrap();
    let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
    let from_log: Vec<_> = state.log().window(state.log().len()).filter(|e| e.source != "console").collect();
    assert_eq!(from_log.len(), lines, "one entry per line of the log, a tqdm bar's line as its last state");
    let decode = from_log.iter().filter(|e| e.line.contains("Decode batch.")).collect::<Vec<_>>();
    assert_eq!(decode.len(), text.matches("Decode batch.").count());
    assert!(decode.iter().all(|e| e.level == LogLevel::Debug));
    let bar = from_log.iter().find(|e| e.line.starts_with("Capturing batches")).unwrap();
    assert!(bar.line.contains(" 4/4 "), "{}", bar.line);
    let term = draw(&state, Theme::colored(), 200, 60);
    let buf = term.backend().buffer();
    let row = (0..60).find(|&y| (0..200).map(|x| buf[(x, y)].symbol()).collect::<String>().contains("Decode batch.")).unwrap();
    assert_eq!(buf[(40, row)].fg, ratatui::style::Color::DarkGray, "a decode line is drawn dimmed");
}

#[test]
fn the_diagnosis_highlights_the_evidence_lines_of_both_configs() {
    let state = pane_state("diagnosis", &demo_story(Stage::Diagnosis));
    for (w, h) in SIZES {
        let term = draw(&state, Theme::colored(), w, h);
        insta::assert_snapshot!(format!("styled_diagnosis_{w}x{h}"), styled(term.backend().buffer()));
    }
    // Without colour the highlight survives as reversed video and the ▶ marker.
    let term = draw(&state, Theme::monochrome(), 200, 60);
    let text = styled(term.backend().buffer());
    assert!(text.contains("«14▶\"max_position_embeddings\": 262144,»"), "{text}");
    assert!(text.contains("«24▶\"max_position_embeddings\": 131072,»"), "{text}");
    let buf = term.backend().buffer();
    assert!(buf.content.iter().all(|c| c.fg == ratatui::style::Color::Reset && c.bg == ratatui::style::Color::Reset));
}

#[test]
fn accepted_draft_tokens_look_different_from_the_targets_own() {
    let state = pane_state("generate", &demo_story(Stage::Relaunched));
    let term = draw(&state, Theme::colored(), 80, 24);
    insta::assert_snapshot!("styled_generate_80x24", styled(term.backend().buffer()));
}

#[test]
fn help_lists_the_keymap_in_force() {
    let keymap = Keymap::default().patched("keymap.toml", "[bindings]\nrelaunch = \"ctrl-r\"\n").unwrap();
    let layouts = Layout::cycle_starting_with(Layout::builtin("default").unwrap());
    let mut state = State::new(spec(), options(), keymap, layouts);
    feed(&mut state, &demo_story(Stage::Diagnosis).events);
    state.apply(Input::Action(Action::ToggleHelp));
    for (w, h) in SIZES {
        let term = draw(&state, Theme::colored(), w, h);
        insta::assert_snapshot!(format!("help_{w}x{h}"), term.backend());
    }
}

#[test]
fn log_search_filter_and_scroll_show_in_the_pane() {
    let mut story = demo_story(Stage::Relaunched);
    for i in 0..40 {
        story.log(if i % 8 == 0 { LogLevel::Warning } else { LogLevel::Info }, "engine", &format!("decode step {i}"));
    }
    let mut state = pane_state("log", &story);
    let keys = Keymap::default();
    let press = |state: &mut State, c: char| {
        let key = crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Char(c), crossterm::event::KeyModifiers::NONE);
        let action = keys.map_key(state.input_mode(), &key).unwrap();
        state.apply(Input::Action(action));
    };
    press(&mut state, '/');
    for c in "step 1".chars() {
        press(&mut state, c);
    }
    let searching = draw(&state, Theme::colored(), 80, 24);
    insta::assert_snapshot!("log_search_prompt_80x24", styled(searching.backend().buffer()));
    state.apply(Input::Action(Action::Submit));
    press(&mut state, 'n');
    press(&mut state, 'v');
    press(&mut state, 'v');
    let filtered = draw(&state, Theme::colored(), 80, 24);
    insta::assert_snapshot!("log_warning_filter_80x24", filtered.backend());
}

#[test]
fn a_resize_redraws_the_same_state_at_the_new_size() {
    let state = story_state("default", &demo_story(Stage::Diagnosis));
    let mut terminal = Terminal::new(TestBackend::new(200, 60)).unwrap();
    terminal.draw(|f| panes::draw(&state, &Theme::colored(), f)).unwrap();
    terminal.backend_mut().resize(80, 24);
    terminal.draw(|f| panes::draw(&state, &Theme::colored(), f)).unwrap();
    let small = draw(&state, Theme::colored(), 80, 24);
    assert_eq!(terminal.backend().buffer(), small.backend().buffer());
    terminal.backend_mut().resize(30, 8);
    terminal.draw(|f| panes::draw(&state, &Theme::colored(), f)).unwrap();
    let line: String = (0..30).map(|x| terminal.backend().buffer()[(x, 0)].symbol().to_string()).collect();
    assert_eq!(line, "terminal too small: 30x8 (need");
}

// ----- whole sessions through the loop ---------------------------------------------------

/// Draws on a TestBackend like the real console, and tells the test which events the
/// loop has taken, so keys are sent only once the screen they answer is there.
struct WatchedScreen<'a> {
    inner: TerminalFrontend<'a, TestBackend>,
    seen: UnboundedSender<TimedEvent>,
}

impl Frontend for WatchedScreen<'_> {
    fn on_event(&mut self, ev: &TimedEvent, _: &State) -> io::Result<()> {
        let _ = self.seen.send(ev.clone());
        Ok(())
    }
    fn draw(&mut self, state: &State) -> io::Result<()> {
        self.inner.draw(state)
    }
    fn draws(&self) -> bool {
        true
    }
}

/// The engine's side of a session: receives commands, answers with events.
struct EngineSide {
    sink: EventSink,
    commands: UnboundedReceiver<Command>,
    seen: UnboundedReceiver<TimedEvent>,
}

impl EngineSide {
    async fn expect(&mut self) -> Command {
        tokio::time::timeout(std::time::Duration::from_secs(10), self.commands.recv()).await.expect("a command").expect("open")
    }

    /// Emit events (with their story times) and wait until the loop has taken the last.
    async fn play(&mut self, events: &[TimedEvent]) {
        for ev in events {
            self.sink.emit_at(ev.t, ev.event.clone());
        }
        let last = events.last().expect("events").clone();
        loop {
            let ev = tokio::time::timeout(std::time::Duration::from_secs(10), self.seen.recv()).await.unwrap().unwrap();
            if ev == last {
                return;
            }
        }
    }
}

fn slice(story: &Story, from: usize) -> Vec<TimedEvent> {
    story.events[from..].to_vec()
}

fn session(state: State, sink: &EventSink, recorder: Option<Recorder>) -> (Session, UnboundedReceiver<Command>) {
    let (tx, commands) = unbounded_channel();
    (Session { state, engine: Some(Box::new(ChannelEngine(tx))), sink: sink.clone(), recorder }, commands)
}

fn key(c: char) -> UserInput {
    UserInput::Key(crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Char(c), crossterm::event::KeyModifiers::NONE))
}

#[tokio::test]
async fn a_console_session_runs_through_its_action_channel() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("events.jsonl");
    let (sink, events) = EventSink::channel();
    let options = Options { prompt: Some(PROMPT.into()), ..options() };
    let state = State::new(spec(), options, Keymap::default(), Layout::cycle_starting_with(Layout::builtin("default").unwrap()));
    let (session, commands) = session(state, &sink, Some(Recorder::create(&log_path).unwrap()));
    let (seen_tx, seen) = unbounded_channel();
    let (inputs_tx, inputs) = unbounded_channel();
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    let mut screen = WatchedScreen { inner: TerminalFrontend::new(&mut terminal, Theme::colored()), seen: seen_tx };
    let mut engine = EngineSide { sink: sink.clone(), commands, seen };
    let full = demo_story(Stage::Relaunched);
    let diagnosis_len = demo_story(Stage::Diagnosis).events.len();

    let driver = async {
        assert_eq!(engine.expect().await, Command::Launch(spec()));
        engine.play(&full.events[..diagnosis_len]).await;
        inputs_tx.send(key('1')).unwrap();
        let Command::Launch(clamped) = engine.expect().await else { panic!("a relaunch") };
        assert_eq!(clamped.context_length, Some(131072));
        assert_eq!(clamped.applied, ["clamp-context-length"]);
        // Events from the clamped launch on: the recorded RemedyApplied came from the console.
        let relaunch_at = full.events.iter().position(|e| matches!(e.event, Event::Launch { attempt: 2, .. })).unwrap();
        let ready_at = full.events.iter().position(|e| matches!(e.event, Event::Ready { .. })).unwrap();
        engine.play(&full.events[relaunch_at..=ready_at]).await;
        let Command::Generate(params) = engine.expect().await else { panic!("the prompt is sent at ready") };
        assert_eq!(params.prompt, PROMPT);
        inputs_tx.send(key('r')).unwrap();
        assert_eq!(engine.expect().await, Command::Launch(clamped.clone()));
        engine.play(&slice(&full, ready_at + 1)).await;
        inputs_tx.send(key('q')).unwrap();
        assert_eq!(engine.expect().await, Command::Shutdown);
        engine.play(&[TimedEvent { t: 9.0, event: Event::Exit { code: 0, reason: "shutdown".into() } }]).await;
    };
    let (outcome, ()) = tokio::join!(run(session, events, inputs, &mut screen), driver);
    let Outcome { code, state, recorder_error } = outcome;
    assert_eq!(code, 0);
    assert!(recorder_error.is_none());
    assert_eq!(state.attempt(), 3);
    assert_eq!(state.phases().relaunch().map(|r| r.reused_target), Some(true));
    terminal.draw(|f| panes::draw(&state, &Theme::colored(), f)).unwrap();
    let screen_text = terminal.backend().to_string();
    assert!(screen_text.contains("│cold start 1.87 s "), "{screen_text}");
    assert!(screen_text.contains("│relaunch   261 ms ×0.14 of cold, target kept"), "{screen_text}");
    assert!(screen_text.contains("412.5 tok/s · accept 3.00 · 18 tokens · done"), "{screen_text}");
    // Every event, the console's own RemedyApplied included, is in the event log.
    let recorded: Vec<TimedEvent> =
        std::fs::read_to_string(&log_path).unwrap().lines().map(|l| TimedEvent::from_json_line(l).unwrap()).collect();
    // The story's events plus the two the console puts on the stream itself.
    assert_eq!(recorded.len(), full.events.len() + 2);
    assert!(recorded.iter().any(|e| matches!(&e.event, Event::Prompt { text, .. } if text == PROMPT)));
    assert!(recorded.iter().any(|e| matches!(&e.event, Event::RemedyApplied { id, .. } if id == "clamp-context-length")));
}

async fn headless(apply: &[&str], script: impl AsyncFnOnce(&mut EngineSide)) -> (i32, String, String) {
    let (sink, events) = EventSink::channel();
    let mut options = options();
    options.exit_when_done = true;
    options.prompt = Some(PROMPT.into());
    options.apply = apply.iter().map(|s| s.to_string()).collect();
    let state = State::new(spec(), options, Keymap::default(), vec![Layout::builtin("default").unwrap()]);
    let (session, commands) = session(state, &sink, None);
    let (_inputs_tx, inputs) = unbounded_channel();
    let (seen_tx, seen) = unbounded_channel();
    struct Watched(Printer<Vec<u8>, Vec<u8>>, UnboundedSender<TimedEvent>);
    impl Frontend for Watched {
        fn on_event(&mut self, ev: &TimedEvent, state: &State) -> io::Result<()> {
            let _ = self.1.send(ev.clone());
            self.0.on_event(ev, state)
        }
        fn finish(&mut self, state: &State, code: i32) -> io::Result<()> {
            self.0.finish(state, code)
        }
    }
    let mut printer = Watched(Printer::new(Vec::new(), Vec::new()), seen_tx);
    let mut engine = EngineSide { sink, commands, seen };
    let (outcome, ()) = tokio::join!(run(session, events, inputs, &mut printer), script(&mut engine));
    let (out, err) = printer.0.into_parts();
    (outcome.code, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
}

#[tokio::test]
async fn headless_prints_the_diagnosis_and_exits_1_with_a_hint() {
    let (code, out, err) = headless(&[], async |engine: &mut EngineSide| {
        assert_eq!(engine.expect().await, Command::Launch(spec()));
        engine.play(&demo_story(Stage::Diagnosis).events).await;
        assert_eq!(engine.expect().await, Command::Shutdown);
        engine.play(&[TimedEvent { t: 1.0, event: Event::Exit { code: 0, reason: "shutdown".into() } }]).await;
    })
    .await;
    assert_eq!(code, 1);
    insta::assert_snapshot!("headless_diagnosis_stdout", out);
    assert_eq!(
        err,
        "specdeck: the launch failed; to apply a remedy and continue, pass --apply clamp-context-length\n          (or --apply allow-longer-context)\n"
    );
}

#[tokio::test]
async fn headless_with_apply_continues_to_ready_and_prints_the_text() {
    let full = demo_story(Stage::Relaunched);
    let diagnosis_len = demo_story(Stage::Diagnosis).events.len();
    let (code, out, err) = headless(&["clamp-context-length"], async |engine: &mut EngineSide| {
        assert_eq!(engine.expect().await, Command::Launch(spec()));
        engine.play(&full.events[..diagnosis_len]).await;
        let Command::Launch(clamped) = engine.expect().await else { panic!("relaunch") };
        assert_eq!(clamped.context_length, Some(131072));
        let relaunch_at = full.events.iter().position(|e| matches!(e.event, Event::Launch { attempt: 2, .. })).unwrap();
        let ready_at = full.events.iter().position(|e| matches!(e.event, Event::Ready { .. })).unwrap();
        engine.play(&full.events[relaunch_at..=ready_at]).await;
        assert!(matches!(engine.expect().await, Command::Generate(_)));
        let tokens: Vec<TimedEvent> =
            full.events.iter().filter(|e| matches!(e.event, Event::Token { .. } | Event::Stats(_))).cloned().collect();
        engine.play(&tokens).await;
        assert_eq!(engine.expect().await, Command::Shutdown);
        engine.play(&[TimedEvent { t: 9.0, event: Event::Exit { code: 0, reason: "shutdown".into() } }]).await;
    })
    .await;
    assert_eq!((code, err.as_str()), (0, ""));
    insta::assert_snapshot!("headless_apply_stdout", out);
}

// ----- the binary's configuration errors ----------------------------------------------

fn specdeck(args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_specdeck")).args(args).output().unwrap();
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn bad_layout_keymap_and_event_log_paths_are_errors_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("mine.toml");
    std::fs::write(&layout, "[[row]]\n[[row.child]]\npane = \"gpu\"\n").unwrap();
    let keymap = dir.path().join("keys.toml");
    std::fs::write(&keymap, "[bindings]\nquitt = \"q\"\n").unwrap();
    let flags = ["launch", "--headless", "--model-path", common::TARGET, "--speculative-draft-model-path", common::DRAFT];
    let with = |extra: [&str; 2]| specdeck(&[&flags[..], &extra[..]].concat());
    let (code, err) = with(["--layout", layout.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert_eq!(
        err,
        format!(
            "specdeck: {}:3: unknown pane \"gpu\" (known: phases, gpus, log, diagnosis, generate, serving, status)\n",
            layout.display()
        )
    );
    let (code, err) = with(["--keymap", keymap.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert_eq!(err, format!("specdeck: {}:2: unknown action \"quitt\" (see `?` in the console for the list)\n", keymap.display()));
    let (code, err) = with(["--event-log", "/nonexistent-dir/events.jsonl"]);
    assert_eq!(code, Some(2));
    assert!(err.starts_with("specdeck: --event-log: /nonexistent-dir/events.jsonl: "), "{err}");
}

/// A bracketed paste is text, never keys: with no text input focused it does nothing (a `q`,
/// `1` or `r` in it neither quits, applies nor relaunches), and with the prompt focused it is
/// typed into the prompt on one line.
#[tokio::test]
async fn a_paste_types_into_the_prompt_and_is_never_read_as_keys() {
    let (sink, events) = EventSink::channel();
    let options = Options { prompt: None, ..options() };
    let state = State::new(spec(), options, Keymap::default(), vec![Layout::builtin("default").unwrap()]);
    let (session, commands) = session(state, &sink, None);
    let (seen_tx, seen) = unbounded_channel();
    let (inputs_tx, inputs) = unbounded_channel();
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    let mut screen = WatchedScreen { inner: TerminalFrontend::new(&mut terminal, Theme::colored()), seen: seen_tx };
    let mut engine = EngineSide { sink: sink.clone(), commands, seen };
    let story = demo_story(Stage::Diagnosis);
    let tab = UserInput::Key(crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Tab, crossterm::event::KeyModifiers::NONE));

    let driver = async {
        assert_eq!(engine.expect().await, Command::Launch(spec()));
        engine.play(&story.events).await;
        inputs_tx.send(UserInput::Paste("q 1 r".into())).unwrap();
        // Let the loop take the paste; any command it caused would be queued before this one.
        inputs_tx.send(UserInput::Action(Action::FocusNext)).unwrap();
        for _ in 0..2 {
            inputs_tx.send(tab.clone()).unwrap();
        }
        inputs_tx.send(UserInput::Paste("To be, q\r\n1 r".into())).unwrap();
        inputs_tx.send(UserInput::Action(Action::Quit)).unwrap();
        assert_eq!(engine.expect().await, Command::Shutdown, "the pastes caused no launch and no quit");
        engine.play(&[TimedEvent { t: 9.0, event: Event::Exit { code: 0, reason: "shutdown".into() } }]).await;
    };
    let (outcome, ()) = tokio::join!(run(session, events, inputs, &mut screen), driver);
    assert_eq!(outcome.state.attempt(), 1, "no relaunch");
    assert_eq!(outcome.state.generate().prompt(), "To be, q  1 r");
}

/// The console as `specdeck` opens it with no `--layout`: the layout follows the terminal's
/// size, and at every size the diagnosis shows the finding, the files, the key and both
/// values; after the remedy, the fixed command.
#[test]
fn at_80x24_100x30_and_120x40_the_diagnosis_and_the_fixed_command_are_on_screen() {
    for (stage, name) in [(Stage::Diagnosis, "diagnosis"), (Stage::Relaunched, "relaunched")] {
        let story = demo_story(stage);
        for (w, h) in [(80, 24), (100, 30), (120, 40)] {
            let options = Options { size_layout: true, ..options() };
            let mut state =
                State::new(spec(), options, Keymap::default(), Layout::cycle_starting_with(Layout::builtin("default").unwrap()));
            state.apply(Input::Resize { width: w, height: h });
            assert_eq!(state.screen().layout().name, if w < 100 { "compact" } else { "default" }, "{w}x{h}");
            feed(&mut state, &story.events);
            let term = draw(&state, Theme::monochrome(), w, h);
            insta::assert_snapshot!(format!("sized_{w}x{h}_{name}"), term.backend());
            let screen = term.backend().to_string();
            let wanted: &[&str] = match stage {
                Stage::Diagnosis => &[
                    "context-length-exceeds-draft",
                    "target …/target/config.json",
                    "draft …/draft/config.json",
                    "14▶\"max_position_embeddings\": 262144,",
                    "24▶\"max_position_embeddings\": 131072,",
                    "clamp-context-length",
                ],
                _ => &["fixed command (y copies it):", "--model-path", "testdata/console/pair/target", "--context-length 131072"],
            };
            for text in wanted {
                assert!(screen.contains(text), "{w}x{h} {name}: {text:?} missing from\n{screen}");
            }
        }
    }
}

/// Every pane scrolls, `z` shows the focused one over the whole screen, and `w` wraps the
/// log's long lines (the TP rank of the source column kept whole).
#[test]
fn panes_scroll_zoom_and_wrap_on_their_keys() {
    let mut phases = pane_state("phases", &demo_story(Stage::Relaunched));
    let bottom = draw(&phases, Theme::monochrome(), 80, 12).backend().to_string();
    assert!(bottom.contains("fixed command (y copies it):") && !bottom.contains("preflight"), "{bottom}");
    phases.apply(Input::Action(Action::ScrollTop));
    let top = draw(&phases, Theme::monochrome(), 80, 12).backend().to_string();
    assert!(top.contains("│✓ preflight") && !top.contains("fixed command"), "{top}");

    let mut story = demo_story(Stage::Relaunched);
    story.log(LogLevel::Info, "Worker_TP13", &format!("a long line {} END", "x".repeat(150)));
    let mut state = story_state("default", &story);
    while state.focused_pane() != Some(specdeck::console::layout::PaneKind::Log) {
        state.apply(Input::Action(Action::FocusNext));
    }
    state.apply(Input::Action(Action::Zoom));
    state.apply(Input::Action(Action::ToggleWrap));
    let term = draw(&state, Theme::monochrome(), 80, 24);
    let screen = term.backend().to_string();
    assert!(screen.starts_with("\"┌ Log · all levels · follow · wrap "), "zoomed: the log alone\n{screen}");
    assert!(screen.contains("I …er_TP13 a long line xxx") && screen.contains("xxx END"), "{screen}");
    assert!(bottom_line(&term).starts_with(" attempt 3 · ready in 261 ms"), "the status bar stays: {}", bottom_line(&term));
}
