//! The console's state and its one update function.
//!
//! `State::apply` takes an `Input` (a key's `Action`, a `TimedEvent`, a clock tick, or a
//! file the diagnosis asked for) and returns `Effect`s for the loop to carry out (engine
//! commands, events to emit, files to read, exit). It does no I/O, so every behaviour of the
//! console is testable by feeding inputs and looking at the state.
//!
//! `State` composes one state per pane (each in its pane's file under `panes/`, the log's in
//! `log.rs`) with what the screen shows (`screen.rs`) and what belongs to the session: the
//! launch, the notice, the way out. The update of a pane's own data is the pane's; what
//! reaches across panes, and every effect, is decided here.

use super::action::Action;
use super::clipboard::Copied;
use super::engine::GenerateParams;
use super::keymap::{InputMode, Keymap};
use super::layout::{Layout, PaneKind};
use super::log::LogView;
use super::panes::diagnosis::Diagnosis;
use super::panes::generate::Generate;
use super::panes::gpus::Gpus;
use super::panes::phases::{Counter, Phases, ReadyInfo};
use super::panes::serving::{Finished, Serving};
use super::screen::Screen;
use crate::event::{Event, LogLevel, PhaseState, TimedEvent};
use crate::finding::{exit_code, Finding, Severity};
use crate::finding_text::{self, Paint};
use crate::phase::PhaseId;
use crate::preflight::apply;
use crate::spec::{LaunchSpec, SpecChange};

// Inputs are moved through the loop one at a time, never stored in bulk: boxing the large
// event variant would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    Action(Action),
    Event(TimedEvent),
    /// The clock, in seconds on the event stream's epoch.
    Tick(f64),
    /// A file a finding cites, read by the loop (or why it could not be).
    FileLoaded {
        path: String,
        text: Result<String, String>,
    },
    /// The terminal's size, at the start and after each resize.
    Resize {
        width: u16,
        height: u16,
    },
    /// What became of a copy: whether the OSC 52 sequence went out, and the file it was saved
    /// to (as shown to the user) or why it could not be.
    Copied {
        what: Copied,
        osc52: bool,
        saved: Result<String, String>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    Launch(LaunchSpec),
    Generate(GenerateParams),
    Shutdown,
    /// Put an event on the stream (so it is shown, recorded and replayable).
    Emit(Event),
    ReadFile(String),
    /// Put text on the clipboard (OSC 52) and in its file under the state dir.
    Copy {
        what: Copied,
        text: String,
    },
    Exit(i32),
}

/// How a session behaves: interactive console or headless run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// False when the events come from a recording: nothing can be launched.
    pub engine_attached: bool,
    /// Headless: quit once the launch fails for good, or once ready and the prompt is done.
    pub exit_when_done: bool,
    /// Remedy ids to apply as soon as a launch reports them (`--apply`).
    pub apply: Vec<String>,
    /// A prompt to send once, at the first ready.
    pub prompt: Option<String>,
    pub max_new_tokens: usize,
    /// Set when the events come from a recording: the title names it.
    pub replay: Option<ReplaySource>,
    /// Prompts go through the tokenizer's chat template (`launch --chat`; `c` toggles it).
    pub chat: bool,
    /// No layout was asked for: compact or default by the terminal's size.
    pub size_layout: bool,
    /// The wall-clock time (Unix seconds) of the stream's epoch, when known: the log can
    /// show its lines' times of day.
    pub wall_epoch: Option<f64>,
    /// The launch serves HTTP (`--port`): headless, it runs on after ready until a signal.
    pub serving: bool,
}

/// The recording a replay reads, as its title names it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplaySource {
    /// The file as given on the command line (`<stdin>` for `-`).
    pub file: String,
    /// Whether the replay keeps reading as the file grows (`--follow`).
    pub following: bool,
}

impl ReplaySource {
    /// The title's words: `REPLAY FILE · following` or `REPLAY FILE · not following`.
    pub fn title(&self) -> String {
        self.title_naming(&self.file)
    }

    /// The title with the file's name alone (no folders), for a narrow status bar.
    pub fn short_title(&self) -> String {
        let name = std::path::Path::new(&self.file).file_name().map_or(self.file.clone(), |n| n.to_string_lossy().into_owned());
        self.title_naming(&name)
    }

    fn title_naming(&self, file: &str) -> String {
        let follow = if self.following { "following" } else { "not following" };
        format!("REPLAY {file} · {follow}")
    }
}

#[derive(Clone, Debug)]
pub struct State {
    options: Options,
    keymap: Keymap,
    screen: Screen,
    /// One line for the status bar, until the next key.
    notice: Option<String>,
    /// The clock: the latest tick or event time.
    now: f64,
    /// The spec the next launch uses (remedies change it).
    spec: LaunchSpec,
    attempt: u32,
    ready: Option<ReadyInfo>,
    phases: Phases,
    diagnosis: Diagnosis,
    gpus: Gpus,
    log: LogView,
    generate: Generate,
    /// The keyboard is in the prompt (INSERT): set only by the user (`i`, or Tab onto the
    /// Generate pane), left by Esc or Tab.
    insert: bool,
    serving: Serving,
    quitting: bool,
    engine_exited: bool,
    exit_code: i32,
}

impl State {
    pub fn new(spec: LaunchSpec, options: Options, keymap: Keymap, layouts: Vec<Layout>) -> State {
        let keymap = if options.engine_attached { keymap } else { keymap.without_engine_keys() };
        let mut screen = Screen::new(layouts);
        if options.size_layout {
            screen.size_layout_to_terminal();
        }
        State {
            generate: Generate::new(options.prompt.clone(), options.chat),
            options,
            keymap,
            screen,
            notice: None,
            now: 0.0,
            spec,
            attempt: 0,
            ready: None,
            phases: Phases::default(),
            diagnosis: Diagnosis::default(),
            gpus: Gpus::default(),
            log: LogView::default(),
            insert: false,
            serving: Serving::default(),
            quitting: false,
            engine_exited: false,
            exit_code: 0,
        }
    }

    /// The effects that start a session: the first launch.
    pub fn start(&self) -> Vec<Effect> {
        if self.options.engine_attached {
            vec![Effect::Launch(self.spec.clone())]
        } else {
            Vec::new()
        }
    }

    /// False when the events come from a recording.
    pub fn engine_attached(&self) -> bool {
        self.options.engine_attached
    }

    /// The recording the events come from, when they do.
    pub fn replay(&self) -> Option<&ReplaySource> {
        self.options.replay.as_ref()
    }

    pub fn keymap(&self) -> &Keymap {
        &self.keymap
    }

    pub fn screen(&self) -> &Screen {
        &self.screen
    }

    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    pub fn now(&self) -> f64 {
        self.now
    }

    /// The launch attempt the panes show (0 before the first launch).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// How the current launch became ready, once it has.
    pub fn ready(&self) -> Option<ReadyInfo> {
        self.ready
    }

    pub fn phases(&self) -> &Phases {
        &self.phases
    }

    pub fn diagnosis(&self) -> &Diagnosis {
        &self.diagnosis
    }

    pub fn gpus(&self) -> &Gpus {
        &self.gpus
    }

    pub fn log(&self) -> &LogView {
        &self.log
    }

    pub fn generate(&self) -> &Generate {
        &self.generate
    }

    /// The spec the next launch uses: the user's line with the remedies applied so far.
    pub fn spec(&self) -> &LaunchSpec {
        &self.spec
    }

    /// The wall-clock time of the stream's epoch, when known.
    pub fn wall_epoch(&self) -> Option<f64> {
        self.options.wall_epoch
    }

    /// Whether the keyboard is in the prompt.
    pub fn inserting(&self) -> bool {
        self.insert && self.options.engine_attached
    }

    pub fn serving(&self) -> &Serving {
        &self.serving
    }

    pub fn engine_exited(&self) -> bool {
        self.engine_exited
    }

    /// The code the session exits with if it ends now.
    pub fn exit_code(&self) -> i32 {
        self.exit_code
    }

    /// The pane a slot shows now: the prompt while it has the keyboard, else the first of its
    /// panes with something to say.
    pub fn shown_pane(&self, panes: &[PaneKind]) -> PaneKind {
        if self.inserting() && panes.contains(&PaneKind::Generate) {
            return PaneKind::Generate;
        }
        panes.iter().copied().find(|&p| self.has_content(p)).unwrap_or(panes[0])
    }

    fn has_content(&self, pane: PaneKind) -> bool {
        match pane {
            PaneKind::Diagnosis => !self.diagnosis.findings().is_empty() && self.ready.is_none(),
            // While the launch serves, the serving pane takes the generation's place.
            PaneKind::Generate => (self.ready.is_some() || !self.generate.generation().pieces.is_empty()) && !self.serving.is_serving(),
            PaneKind::Gpus => self.gpus.has_content(),
            PaneKind::Serving => self.serving.is_serving(),
            PaneKind::Phases | PaneKind::Log | PaneKind::Status => true,
        }
    }

    pub fn focused_pane(&self) -> Option<PaneKind> {
        let slots = self.screen.layout().slot_panes();
        slots.get(self.screen.focus()).map(|panes| self.shown_pane(panes))
    }

    pub fn input_mode(&self) -> InputMode {
        if self.screen.help_open() {
            InputMode::Normal
        } else if self.log.search_input().is_some() || self.inserting() {
            InputMode::Text
        } else {
            InputMode::Normal
        }
    }

    /// Whether the screen changes with the clock alone (a phase or a generation running).
    pub fn animating(&self) -> bool {
        self.generate.generation().active || self.phases.any_running()
    }

    pub fn apply(&mut self, input: Input) -> Vec<Effect> {
        match input {
            Input::Action(action) => {
                self.notice = None;
                self.on_action(action)
            }
            Input::Event(ev) => {
                self.now = self.now.max(ev.t);
                self.on_event(ev)
            }
            Input::Tick(now) => {
                self.now = self.now.max(now);
                Vec::new()
            }
            Input::FileLoaded { path, text } => {
                self.diagnosis.on_file_loaded(path, text);
                Vec::new()
            }
            Input::Resize { width, height } => {
                self.screen.fit(width, height);
                Vec::new()
            }
            Input::Copied { what, osc52, saved } => {
                let what = what.describe();
                self.notice = Some(match (osc52, saved) {
                    (true, Ok(file)) => format!("copied {what} (OSC 52); also in {file}"),
                    (false, Ok(file)) => format!("{what} is in {file}"),
                    (true, Err(e)) => format!("copied {what} (OSC 52); no file: {e}"),
                    (false, Err(e)) => format!("could not copy {what}: {e}"),
                });
                Vec::new()
            }
        }
    }

    // ----- events -------------------------------------------------------------------------

    fn on_event(&mut self, ev: TimedEvent) -> Vec<Effect> {
        let t = ev.t;
        match ev.event {
            Event::Launch { attempt, spec } => {
                self.attempt = attempt;
                self.spec = spec;
                self.phases.clear_launch();
                self.diagnosis.clear_launch();
                *self.screen.scroll_mut(PaneKind::Phases) = Default::default();
                self.ready = None;
                self.generate.clear_launch();
                let what = if attempt > 1 { "relaunch" } else { "launch" };
                self.log.push(t, LogLevel::Info, "console", format!("{what} (attempt {attempt}): {}", self.spec));
                Vec::new()
            }
            Event::Phase { phase, state, detail } => {
                self.phases.on_phase(t, phase, state, detail);
                if state == PhaseState::Failed {
                    self.on_launch_failed(t, phase)
                } else {
                    Vec::new()
                }
            }
            Event::Progress { phase, unit, gpu, label, done, total } => {
                self.phases.on_progress(Counter::first(t, phase, unit, gpu, label, done, total));
                Vec::new()
            }
            Event::Log { level, source, line } => {
                // The engine reports a failed request as an error line and sends no Stats:
                // that ends the generation (a headless run must not wait for ever).
                let failed_generation = level == LogLevel::Error && self.generate.generation().active;
                if failed_generation {
                    self.generate.stop();
                    self.notice = Some(format!("generation failed: {line}"));
                }
                self.log.push(t, level, &source, line);
                if failed_generation && self.options.exit_when_done {
                    self.finish(1)
                } else {
                    Vec::new()
                }
            }
            Event::Finding(finding) => self.on_finding(t, finding),
            Event::RemedyApplied { id, changes } => {
                let what: Vec<String> = changes.iter().map(SpecChange::describe).collect();
                self.log.push(t, LogLevel::Info, "console", format!("remedy applied: {id} ({})", what.join("; ")));
                Vec::new()
            }
            Event::Telemetry { gpus, note } => {
                self.gpus.on_telemetry(gpus, note);
                Vec::new()
            }
            Event::GpuMemory { gpu, free_bytes, total_bytes } => {
                self.gpus.on_gpu_memory(gpu, free_bytes, total_bytes);
                Vec::new()
            }
            Event::Prompt { text, .. } => {
                self.generate.on_prompt(t, text);
                Vec::new()
            }
            Event::Token { ids, text, drafted } => {
                self.generate.on_token(t, ids.len(), &text, drafted);
                Vec::new()
            }
            Event::Stats(stats) => {
                // The engine sends Stats when a generation ends.
                let was_active = self.generate.on_stats(stats);
                if was_active && self.options.exit_when_done && !self.options.serving {
                    self.finish(0)
                } else {
                    Vec::new()
                }
            }
            Event::Ready { elapsed_s, reused_target } => self.on_ready(t, elapsed_s, reused_target),
            event
            @ (Event::Serving { .. } | Event::RequestQueued { .. } | Event::RequestStarted { .. } | Event::RequestFinished { .. }) => {
                self.on_request(t, event);
                Vec::new()
            }
            Event::Exit { code, reason } => {
                self.engine_exited = true;
                self.generate.stop();
                self.log.push(t, LogLevel::Info, "engine", format!("engine exited ({code}): {reason}"));
                if self.quitting {
                    vec![Effect::Exit(self.exit_code)]
                } else if self.options.exit_when_done {
                    self.exit_code = if code == 0 { 1 } else { code };
                    vec![Effect::Exit(self.exit_code)]
                } else {
                    self.notice = Some(format!("the engine exited ({reason}); press q to quit"));
                    Vec::new()
                }
            }
        }
    }

    /// A server event: a line in the log, the figures in the serving pane.
    fn on_request(&mut self, t: f64, event: Event) {
        let line = event.request_line().unwrap_or_default();
        let level = match &event {
            Event::RequestQueued { .. } | Event::RequestStarted { .. } => LogLevel::Debug,
            Event::RequestFinished { error: Some(_), .. } => LogLevel::Warning,
            _ => LogLevel::Info,
        };
        self.log.push(t, level, "server", line);
        match event {
            Event::Serving { address, model } => self.serving.on_serving(address, model),
            Event::RequestQueued { id, .. } => self.serving.on_queued(t, id),
            Event::RequestStarted { id, prompt_tokens, .. } => self.serving.on_started(t, id, prompt_tokens),
            Event::RequestFinished { id, completion_tokens, finish_reason, ttft_s, itl_s, mean_accept_length, .. } => {
                let f = Finished { id, completion_tokens, finish_reason: &finish_reason, ttft_s, itl_s, mean_accept_length };
                self.serving.on_finished(t, f);
            }
            _ => {}
        }
    }

    fn on_finding(&mut self, t: f64, finding: Finding) -> Vec<Effect> {
        let level = match finding.severity {
            Severity::Error => LogLevel::Error,
            Severity::Warning => LogLevel::Warning,
            Severity::Info => LogLevel::Info,
        };
        self.log.push(t, level, "finding", format!("{} ({}): {}", finding.id, finding.phase, finding.message));
        self.diagnosis.on_finding(finding).into_iter().map(Effect::ReadFile).collect()
    }

    fn on_launch_failed(&mut self, t: f64, phase: PhaseId) -> Vec<Effect> {
        // `--apply` ids are looked up as every command looks them up, once a launch reports them.
        let mut pending = self.options.apply.iter().filter(|id| !self.spec.applied.contains(id));
        let remedy = pending.find_map(|id| apply::offered(self.diagnosis.findings(), id).ok()).cloned();
        if let Some(remedy) = remedy {
            let line = format!("applying {} (--apply)", remedy.id);
            let mut effects = vec![Effect::Emit(Event::Log { level: LogLevel::Info, source: "console".into(), line })];
            effects.extend(self.apply_changes(&remedy.id, &remedy.changes));
            return effects;
        }
        if self.options.exit_when_done {
            self.exit_code = exit_code(self.diagnosis.findings()).max(1);
            self.log.push(t, LogLevel::Error, "console", format!("launch failed at {phase}"));
            return self.finish(self.exit_code);
        }
        Vec::new()
    }

    fn on_ready(&mut self, t: f64, elapsed_s: f64, reused_target: bool) -> Vec<Effect> {
        let info = ReadyInfo { attempt: self.attempt, elapsed_s, reused_target };
        self.ready = Some(info);
        // "applied …; relaunching…" is over once the relaunch is ready.
        self.notice = None;
        self.phases.on_ready(info);
        let how = if reused_target { ", target kept resident" } else { "" };
        self.log.push(t, LogLevel::Info, "console", format!("ready in {elapsed_s:.2} s{how}"));
        if self.generate.take_auto_send() {
            return self.send_prompt();
        }
        if self.options.exit_when_done && !self.options.serving {
            return self.finish(0);
        }
        Vec::new()
    }

    /// Headless end: shut the engine down; exit when it says it has.
    fn finish(&mut self, code: i32) -> Vec<Effect> {
        self.exit_code = code;
        self.quitting = true;
        if self.options.engine_attached && !self.engine_exited {
            vec![Effect::Shutdown]
        } else {
            vec![Effect::Exit(code)]
        }
    }

    // ----- actions ------------------------------------------------------------------------

    fn on_action(&mut self, action: Action) -> Vec<Effect> {
        if self.screen.help_open() && is_scroll(&action) {
            self.screen.help_scroll_mut().apply(&action);
            return Vec::new();
        }
        if self.screen.help_open() && !matches!(action, Action::Quit) {
            // Help is modal: any key closes it, and only `?`/Esc are consumed by that.
            self.screen.set_help(false);
            if matches!(action, Action::ToggleHelp | Action::Cancel) {
                return Vec::new();
            }
        }
        match action {
            Action::Quit => self.quit(),
            Action::Relaunch => self.relaunch(),
            Action::ApplyRemedy(n) => self.apply_remedy(n),
            Action::ToggleHelp => {
                self.screen.set_help(true);
                Vec::new()
            }
            Action::FocusNext | Action::FocusPrev => {
                self.insert = false;
                self.screen.move_focus(action == Action::FocusNext);
                // Tabbing onto the prompt is asking for it; a slot that turns into the prompt
                // under the focus (at ready) is not.
                self.insert = self.focused_pane() == Some(PaneKind::Generate);
                Vec::new()
            }
            Action::EditPrompt => {
                if self.screen.focus_pane(PaneKind::Generate) {
                    self.insert = true;
                } else {
                    self.notice = Some(format!("the {} layout has no prompt", self.screen.layout().name));
                }
                Vec::new()
            }
            Action::ToggleChat => {
                let on = self.generate.toggle_chat();
                self.notice = Some(format!("chat template {}", if on { "on" } else { "off" }));
                Vec::new()
            }
            Action::Copy => {
                let (what, text) = match (self.focused_pane(), self.diagnosis.shown()) {
                    (Some(PaneKind::Diagnosis), Some(f)) => (Copied::Diagnosis, finding_text::text(f, Paint { color: false }, None)),
                    _ => (Copied::FixedCommand, self.spec.fixed_command()),
                };
                vec![Effect::Copy { what, text }]
            }
            Action::Zoom => {
                self.screen.toggle_zoom();
                Vec::new()
            }
            Action::ToggleClock if self.options.wall_epoch.is_none() => {
                self.notice = Some("this stream has no wall clock".into());
                Vec::new()
            }
            Action::Cancel if self.log.search_input().is_none() && self.insert => {
                self.insert = false;
                Vec::new()
            }
            Action::CycleLayout => {
                self.screen.cycle_layout();
                self.notice = Some(format!("layout: {}", self.screen.layout().name));
                Vec::new()
            }
            Action::Search
            | Action::SearchNext
            | Action::SearchPrev
            | Action::ToggleFollow
            | Action::CycleLevel
            | Action::Cancel
            | Action::ToggleWrap
            | Action::FilterIn
            | Action::FilterOut
            | Action::ToggleClock => {
                if let Some(notice) = self.log.on_action(&action) {
                    self.notice = Some(notice);
                }
                Vec::new()
            }
            Action::ScrollUp | Action::ScrollDown | Action::PageUp | Action::PageDown | Action::ScrollTop | Action::ScrollBottom => {
                match self.focused_pane() {
                    Some(PaneKind::Diagnosis) => self.diagnosis.scroll(&action),
                    // The status bar never has the focus; the log is the one long pane.
                    Some(PaneKind::Log | PaneKind::Status) | None => self.log.scroll(&action),
                    Some(pane) => self.screen.scroll_mut(pane).apply(&action),
                }
                Vec::new()
            }
            Action::NextFinding | Action::PrevFinding => {
                self.diagnosis.select_next(action == Action::NextFinding);
                Vec::new()
            }
            Action::Submit => {
                if self.log.search_input().is_some() {
                    self.notice = self.log.confirm_search();
                    Vec::new()
                } else if self.options.engine_attached {
                    self.send_prompt()
                } else {
                    Vec::new()
                }
            }
            Action::Edit(request) => {
                if !self.log.edit_search(request) && self.inserting() {
                    self.generate.edit(request);
                }
                Vec::new()
            }
        }
    }

    fn quit(&mut self) -> Vec<Effect> {
        if self.quitting || !self.options.engine_attached || self.engine_exited {
            return vec![Effect::Exit(self.exit_code)];
        }
        self.quitting = true;
        self.notice = Some("shutting the engine down…".into());
        vec![Effect::Shutdown]
    }

    fn can_launch(&mut self) -> bool {
        if !self.options.engine_attached {
            self.notice = Some("a recording: there is no engine to launch".into());
        } else if self.quitting || self.engine_exited {
            self.notice = Some("the engine has shut down".into());
        } else {
            return true;
        }
        false
    }

    fn relaunch(&mut self) -> Vec<Effect> {
        if !self.can_launch() {
            return Vec::new();
        }
        self.notice = Some("relaunching…".into());
        vec![Effect::Launch(self.spec.clone())]
    }

    fn apply_remedy(&mut self, n: u8) -> Vec<Effect> {
        let Some(finding) = self.diagnosis.shown() else {
            self.notice = Some(format!("no diagnosis: nothing for {n} to apply"));
            return Vec::new();
        };
        let Some(remedy) = finding.remedies.get(usize::from(n).saturating_sub(1)).cloned() else {
            self.notice = Some(format!("{} has no remedy {n}", finding.id));
            return Vec::new();
        };
        if !self.can_launch() {
            return Vec::new();
        }
        self.apply_changes(&remedy.id, &remedy.changes)
    }

    /// Change the spec by a remedy, record it on the stream, and relaunch.
    fn apply_changes(&mut self, id: &str, changes: &[SpecChange]) -> Vec<Effect> {
        let mut spec = self.spec.clone();
        if let Err(e) = spec.apply_remedy(id, changes) {
            self.notice = Some(format!("{id}: {e}"));
            return Vec::new();
        }
        self.spec = spec;
        self.notice = Some(format!("applied {id}; relaunching…"));
        vec![Effect::Emit(Event::RemedyApplied { id: id.to_string(), changes: changes.to_vec() }), Effect::Launch(self.spec.clone())]
    }

    fn send_prompt(&mut self) -> Vec<Effect> {
        // Sent exactly as typed: trailing newlines are part of a completion prompt.
        let text = self.generate.prompt().to_string();
        if text.trim().is_empty() {
            let key = self.keymap.hint(&Action::EditPrompt).unwrap_or_else(|| "tab".into());
            self.notice = Some(format!("type a prompt first ({key} to type into the prompt)"));
            return Vec::new();
        }
        if self.ready.is_none() || !self.can_launch() {
            if self.ready.is_none() {
                self.notice = Some("the engine is not ready yet".into());
            }
            return Vec::new();
        }
        let max_new_tokens = self.options.max_new_tokens;
        vec![
            Effect::Emit(Event::Prompt { text: text.clone(), max_new_tokens }),
            Effect::Generate(GenerateParams { chat: self.generate.chat(), ..GenerateParams::greedy(text, max_new_tokens) }),
        ]
    }
}

fn is_scroll(action: &Action) -> bool {
    matches!(action, Action::ScrollUp | Action::ScrollDown | Action::PageUp | Action::PageDown | Action::ScrollTop | Action::ScrollBottom)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::GenerationStats;
    use crate::finding::{Evidence, Remedy, Side};

    fn state(options: Options) -> State {
        State::new(LaunchSpec::default(), options, Keymap::default(), Layout::cycle_starting_with(Layout::builtin("default").unwrap()))
    }

    fn live() -> Options {
        Options { engine_attached: true, max_new_tokens: 16, ..Options::default() }
    }

    fn ev(t: f64, event: Event) -> Input {
        Input::Event(TimedEvent { t, event })
    }

    fn phase(t: f64, phase: PhaseId, state: PhaseState) -> Input {
        ev(t, Event::Phase { phase, state, detail: None })
    }

    fn finding() -> Finding {
        Finding::new("context-length-exceeds-draft", Severity::Error, PhaseId::DrafterInit, "too long")
            .with_evidence(Evidence::new(Side::Target, "t/config.json", "/max_position_embeddings", 262144))
            .with_evidence(Evidence::new(Side::Draft, "d/config.json", "/max_position_embeddings", 131072))
            .with_remedy(Remedy::new(
                "clamp-context-length",
                "--context-length",
                "clamp",
                vec![SpecChange::SetFlag { flag: "--context-length".into(), value: "131072".into() }],
            ))
    }

    fn failed_launch(s: &mut State) -> Vec<Effect> {
        s.apply(ev(0.0, Event::Launch { attempt: 1, spec: LaunchSpec::default() }));
        s.apply(phase(0.0, PhaseId::Preflight, PhaseState::Started));
        let reads = s.apply(ev(0.01, Event::Finding(finding())));
        assert_eq!(reads, vec![Effect::ReadFile("t/config.json".into()), Effect::ReadFile("d/config.json".into())]);
        s.apply(phase(0.02, PhaseId::Preflight, PhaseState::Failed))
    }

    #[test]
    fn the_session_starts_with_a_launch_of_the_spec() {
        let s = state(live());
        assert_eq!(s.start(), vec![Effect::Launch(LaunchSpec::default())]);
        assert_eq!(state(Options::default()).start(), vec![]);
    }

    #[test]
    fn remedy_key_changes_the_spec_emits_and_relaunches() {
        let mut s = state(live());
        assert_eq!(failed_launch(&mut s), vec![]);
        assert_eq!(s.phases.state_of(PhaseId::Preflight), Some(PhaseState::Failed));
        let effects = s.apply(Input::Action(Action::ApplyRemedy(1)));
        let mut want = LaunchSpec { context_length: Some(131072), ..LaunchSpec::default() };
        want.applied.push("clamp-context-length".into());
        assert_eq!(
            effects,
            vec![
                Effect::Emit(Event::RemedyApplied {
                    id: "clamp-context-length".into(),
                    changes: vec![SpecChange::SetFlag { flag: "--context-length".into(), value: "131072".into() }],
                }),
                Effect::Launch(want.clone()),
            ]
        );
        assert_eq!(s.spec, want);
        assert_eq!(s.apply(Input::Action(Action::ApplyRemedy(2))), vec![]);
        assert_eq!(s.notice.as_deref(), Some("context-length-exceeds-draft has no remedy 2"));
    }

    #[test]
    fn a_relaunch_resets_the_attempt_and_ready_records_cold_and_relaunch_times() {
        let mut s = state(live());
        failed_launch(&mut s);
        s.apply(ev(1.0, Event::Launch { attempt: 2, spec: LaunchSpec::default() }));
        assert!(s.diagnosis.findings().is_empty() && s.phases.is_empty());
        s.apply(ev(5.0, Event::Ready { elapsed_s: 4.0, reused_target: false }));
        s.apply(ev(6.0, Event::Launch { attempt: 3, spec: LaunchSpec::default() }));
        s.apply(ev(6.5, Event::Ready { elapsed_s: 0.5, reused_target: true }));
        assert_eq!(s.phases.cold_start(), Some(ReadyInfo { attempt: 2, elapsed_s: 4.0, reused_target: false }));
        assert_eq!(s.phases.relaunch(), Some(ReadyInfo { attempt: 3, elapsed_s: 0.5, reused_target: true }));
    }

    /// What sending a prompt does: the prompt goes on the stream, the request to the engine.
    fn prompt_sent(text: &str, max_new_tokens: usize) -> Vec<Effect> {
        vec![
            Effect::Emit(Event::Prompt { text: text.into(), max_new_tokens }),
            Effect::Generate(GenerateParams::greedy(text, max_new_tokens)),
        ]
    }

    #[test]
    fn headless_apply_fixes_then_generates_then_exits() {
        let mut s =
            state(Options { exit_when_done: true, apply: vec!["clamp-context-length".into()], prompt: Some("Once upon".into()), ..live() });
        let effects = failed_launch(&mut s);
        assert!(
            matches!(&effects[..], [Effect::Emit(Event::Log { line, .. }), Effect::Emit(Event::RemedyApplied { .. }), Effect::Launch(spec)]
            if line == "applying clamp-context-length (--apply)" && spec.context_length == Some(131072))
        );
        assert_eq!(s.notice.as_deref(), Some("applied clamp-context-length; relaunching…"));
        s.apply(ev(1.0, Event::Launch { attempt: 2, spec: s.spec.clone() }));
        let effects = s.apply(ev(2.0, Event::Ready { elapsed_s: 1.0, reused_target: false }));
        assert_eq!(effects, prompt_sent("Once upon", 16));
        assert_eq!(s.notice, None, "ready ends the relaunch notice");
        s.apply(ev(2.0, Event::Prompt { text: "Once upon".into(), max_new_tokens: 16 }));
        s.apply(ev(2.1, Event::Token { ids: vec![5, 6], text: " a time".into(), drafted: true }));
        s.apply(ev(2.2, Event::Token { ids: vec![7], text: ",".into(), drafted: false }));
        let generation = s.generate.generation();
        assert_eq!(generation.histogram, vec![0, 0, 0, 1]);
        assert_eq!(generation.pieces, vec![(" a time".to_string(), true), (",".to_string(), false)]);
        assert_eq!(generation.mean_accept_length(), Some(3.0));
        let effects = s.apply(ev(2.3, Event::Stats(GenerationStats { tokens: 3, ..GenerationStats::default() })));
        assert_eq!(effects, vec![Effect::Shutdown]);
        let effects = s.apply(ev(2.4, Event::Exit { code: 0, reason: "shutdown".into() }));
        assert_eq!(effects, vec![Effect::Exit(0)]);
    }

    #[test]
    fn an_engine_error_during_generation_ends_a_headless_run_with_1() {
        let mut s = state(Options { exit_when_done: true, prompt: Some("x".into()), ..live() });
        s.apply(ev(0.0, Event::Launch { attempt: 1, spec: LaunchSpec::default() }));
        assert_eq!(s.apply(ev(1.0, Event::Ready { elapsed_s: 1.0, reused_target: false })), prompt_sent("x", 16));
        s.apply(ev(1.0, Event::Prompt { text: "x".into(), max_new_tokens: 16 }));
        assert!(s.generate.generation().active);
        let line = "generate: the tokenizer cannot encode the prompt".to_string();
        let effects = s.apply(ev(1.1, Event::Log { level: LogLevel::Error, source: "engine".into(), line }));
        assert_eq!(effects, vec![Effect::Shutdown]);
        assert_eq!(s.exit_code, 1);
        assert!(!s.animating());
    }

    #[test]
    fn headless_without_apply_exits_1_after_the_failure() {
        let mut s = state(Options { exit_when_done: true, ..live() });
        assert_eq!(failed_launch(&mut s), vec![Effect::Shutdown]);
        assert_eq!(s.exit_code, 1);
        assert_eq!(s.apply(ev(1.0, Event::Exit { code: 0, reason: "shutdown".into() })), vec![Effect::Exit(1)]);
    }

    #[test]
    fn quit_shuts_the_engine_down_before_exiting() {
        let mut s = state(live());
        assert_eq!(s.apply(Input::Action(Action::Quit)), vec![Effect::Shutdown]);
        assert!(s.quitting);
        assert_eq!(s.apply(ev(1.0, Event::Exit { code: 0, reason: "shutdown".into() })), vec![Effect::Exit(0)]);
        // A second q while waiting does not wait any longer.
        let mut s = state(live());
        s.apply(Input::Action(Action::Quit));
        assert_eq!(s.apply(Input::Action(Action::Quit)), vec![Effect::Exit(0)]);
    }

    #[test]
    fn a_recording_cannot_launch() {
        let mut s = state(Options::default());
        failed_launch(&mut s);
        assert_eq!(s.apply(Input::Action(Action::ApplyRemedy(1))), vec![]);
        assert_eq!(s.notice.as_deref(), Some("a recording: there is no engine to launch"));
        assert_eq!(s.apply(Input::Action(Action::Quit)), vec![Effect::Exit(0)]);
    }

    #[test]
    fn focus_cycles_and_the_generate_pane_takes_text() {
        let mut s = state(live());
        assert_eq!(s.focused_pane(), Some(PaneKind::Phases));
        assert_eq!(s.input_mode(), InputMode::Normal);
        let mut seen = vec![s.focused_pane().unwrap()];
        for _ in 0..4 {
            s.apply(Input::Action(Action::FocusNext));
            seen.push(s.focused_pane().unwrap());
        }
        assert_eq!(seen, [PaneKind::Phases, PaneKind::Gpus, PaneKind::Diagnosis, PaneKind::Generate, PaneKind::Log]);
        s.apply(Input::Action(Action::FocusPrev));
        assert_eq!(s.input_mode(), InputMode::Text);
        s.apply(Input::Action(Action::Edit(tui_input::InputRequest::InsertChar('h'))));
        s.apply(Input::Action(Action::Edit(tui_input::InputRequest::InsertChar('i'))));
        assert_eq!(s.generate.prompt(), "hi");
        assert_eq!(s.apply(Input::Action(Action::Submit)), vec![]);
        assert_eq!(s.notice.as_deref(), Some("the engine is not ready yet"));
        s.apply(ev(1.0, Event::Ready { elapsed_s: 1.0, reused_target: false }));
        assert_eq!(s.apply(Input::Action(Action::Submit)), prompt_sent("hi", 16));
        assert!(!s.animating(), "the generation starts when the prompt comes back on the stream");
        s.apply(ev(1.5, Event::Prompt { text: "hi".into(), max_new_tokens: 16 }));
        assert!(s.animating());
        assert_eq!(s.generate.generation().sent_t, 1.5);
    }

    #[test]
    fn layouts_cycle_and_alternatives_follow_the_state() {
        let mut s = state(live());
        let names: Vec<String> = (0..3)
            .map(|_| {
                s.apply(Input::Action(Action::CycleLayout));
                s.screen.layout().name.clone()
            })
            .collect();
        assert_eq!(names, ["compact", "wide", "default"]);
        let both = [PaneKind::Diagnosis, PaneKind::Generate];
        assert_eq!(s.shown_pane(&both), PaneKind::Diagnosis);
        failed_launch(&mut s);
        assert_eq!(s.shown_pane(&both), PaneKind::Diagnosis);
        s.apply(ev(1.0, Event::Launch { attempt: 2, spec: LaunchSpec::default() }));
        s.apply(ev(2.0, Event::Ready { elapsed_s: 1.0, reused_target: false }));
        assert_eq!(s.shown_pane(&both), PaneKind::Generate);
    }

    fn type_keys(s: &mut State, text: &str) -> Vec<Effect> {
        let keys = Keymap::default();
        let mut effects = Vec::new();
        for c in text.chars() {
            let key = crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Char(c), crossterm::event::KeyModifiers::NONE);
            if let Some(action) = keys.map_key(s.input_mode(), &key) {
                effects.extend(s.apply(Input::Action(action)));
            }
        }
        effects
    }

    #[test]
    fn keys_typed_into_the_prompt_never_act_and_esc_leaves_it() {
        let mut s = state(live());
        failed_launch(&mut s);
        assert_eq!(type_keys(&mut s, "i"), vec![]);
        assert_eq!((s.input_mode(), s.focused_pane()), (InputMode::Text, Some(PaneKind::Generate)));
        assert_eq!(type_keys(&mut s, "q r 12 ?/"), vec![], "no quit, relaunch, fix, help or search");
        assert_eq!(s.generate.prompt(), "q r 12 ?/");
        assert_eq!((s.attempt, s.quitting, s.screen.help_open()), (1, false, false));
        s.apply(Input::Action(Action::Cancel));
        assert_eq!((s.input_mode(), s.focused_pane()), (InputMode::Normal, Some(PaneKind::Generate)));
        assert_eq!(type_keys(&mut s, "q"), vec![Effect::Shutdown]);
    }

    #[test]
    fn focus_never_moves_into_the_prompt_by_itself() {
        let mut s = State::new(LaunchSpec::default(), live(), Keymap::default(), vec![Layout::builtin("compact").unwrap()]);
        failed_launch(&mut s);
        s.apply(Input::Action(Action::FocusNext));
        s.apply(Input::Action(Action::FocusNext));
        assert_eq!(s.focused_pane(), Some(PaneKind::Diagnosis));
        s.apply(ev(1.0, Event::Launch { attempt: 2, spec: LaunchSpec::default() }));
        s.apply(ev(2.0, Event::Ready { elapsed_s: 1.0, reused_target: false }));
        assert_eq!(s.focused_pane(), Some(PaneKind::Generate), "the slot shows the generation once ready");
        assert_eq!(s.input_mode(), InputMode::Normal, "but the keys still act");
    }

    #[test]
    fn y_copies_the_fixed_command_or_on_the_diagnosis_the_diagnosis() {
        let mut s = state(live());
        failed_launch(&mut s);
        let [Effect::Emit(_), Effect::Launch(_)] = &s.apply(Input::Action(Action::ApplyRemedy(1)))[..] else { panic!("a relaunch") };
        let fixed = s.spec.fixed_command();
        assert!(fixed.contains("--context-length 131072"), "{fixed}");
        assert_eq!(s.apply(Input::Action(Action::Copy)), vec![Effect::Copy { what: Copied::FixedCommand, text: fixed }]);
        let saved = Ok("~/.local/state/specdeck/fixed-command.sh".to_string());
        s.apply(Input::Copied { what: Copied::FixedCommand, osc52: true, saved });
        assert_eq!(s.notice(), Some("copied the fixed command (OSC 52); also in ~/.local/state/specdeck/fixed-command.sh"));
        let mut s = state(live());
        failed_launch(&mut s);
        s.apply(Input::Action(Action::FocusNext));
        s.apply(Input::Action(Action::FocusNext));
        assert_eq!(s.focused_pane(), Some(PaneKind::Diagnosis));
        let [Effect::Copy { what: Copied::Diagnosis, text }] = &s.apply(Input::Action(Action::Copy))[..] else { panic!("a copy") };
        assert!(text.starts_with("error[context-length-exceeds-draft] at drafter-init\n"), "{text}");
        assert!(text.contains("clamp-context-length"), "{text}");
    }

    #[test]
    fn the_layout_follows_the_terminal_until_one_is_chosen() {
        let mut s = state(Options { size_layout: true, ..live() });
        s.apply(Input::Resize { width: 80, height: 24 });
        assert_eq!(s.screen.layout().name, "compact");
        s.apply(Input::Resize { width: 120, height: 40 });
        assert_eq!(s.screen.layout().name, "default");
        s.apply(Input::Action(Action::CycleLayout));
        s.apply(Input::Resize { width: 80, height: 24 });
        assert_eq!(s.screen.layout().name, "compact", "L chose the next layout, kept at any size");
        s.apply(Input::Resize { width: 200, height: 60 });
        assert_eq!(s.screen.layout().name, "compact");
    }

    #[test]
    fn help_is_modal() {
        let mut s = state(live());
        s.apply(Input::Action(Action::ToggleHelp));
        assert!(s.screen.help_open());
        assert_eq!(s.apply(Input::Action(Action::Cancel)), vec![]);
        assert!(!s.screen.help_open());
        s.apply(Input::Action(Action::ToggleHelp));
        assert_eq!(s.apply(Input::Action(Action::Quit)), vec![Effect::Shutdown]);
    }
}
