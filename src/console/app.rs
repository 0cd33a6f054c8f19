//! The console's state and its one update function.
//!
//! `State::apply` takes an `Input` (a key's `Action`, a `TimedEvent`, a clock tick, or a
//! file the diagnosis asked for) and returns `Effect`s for the loop to carry out (engine
//! commands, events to emit, files to read, exit). It does no I/O, so every behaviour of the
//! console is testable by feeding inputs and looking at the state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tui_input::Input as TextInput;

use super::action::Action;
use super::engine::GenerateParams;
use super::excerpt;
use super::keymap::{InputMode, Keymap};
use super::layout::{Layout, PaneKind};
use super::log::LogView;
use crate::event::{Event, GenerationStats, GpuSample, LogLevel, PhaseId, PhaseState, ProgressUnit, TimedEvent};
use crate::finding::{exit_code, Finding, Severity, Side, SpecChange};
use crate::preflight::apply;
use crate::spec::LaunchSpec;

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
}

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    Launch(LaunchSpec),
    Generate(GenerateParams),
    Shutdown,
    /// Put an event on the stream (so it is shown, recorded and replayable).
    Emit(Event),
    ReadFile(String),
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
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct PhaseRecord {
    pub state: Option<PhaseState>,
    pub started: Option<f64>,
    pub ended: Option<f64>,
    pub detail: Option<String>,
}

impl PhaseRecord {
    /// Seconds spent so far (running phases count up to `now`).
    pub fn elapsed(&self, now: f64) -> Option<f64> {
        let start = self.started?;
        Some((self.ended.unwrap_or(now) - start).max(0.0))
    }
}

/// One progress counter: a file of a load on one GPU, or one graph-capture batch size.
#[derive(Clone, Debug, PartialEq)]
pub struct Counter {
    pub phase: PhaseId,
    pub unit: ProgressUnit,
    pub gpu: Option<u32>,
    pub label: String,
    pub done: u64,
    pub total: u64,
    pub first_t: f64,
    pub first_done: u64,
    pub last_t: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadyInfo {
    pub attempt: u32,
    pub elapsed_s: f64,
    pub reused_target: bool,
}

/// A file quoted by the diagnosis.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceFile {
    Loading,
    Loaded { lines: Arc<Vec<String>>, marks: BTreeMap<String, Option<usize>> },
    Failed(String),
}

/// The generation in progress or last finished.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Generation {
    pub prompt: String,
    /// Committed text runs; `true` marks accepted draft tokens.
    pub pieces: Vec<(String, bool)>,
    pub sent_t: f64,
    pub last_t: Option<f64>,
    pub tokens: usize,
    pub steps: usize,
    /// `histogram[n]`: verify steps that emitted n tokens (live count from Token events).
    pub histogram: Vec<u64>,
    pending_drafted: usize,
    /// The engine's own figures, once it sends them.
    pub stats: Option<GenerationStats>,
    pub active: bool,
}

impl Generation {
    pub fn tokens_per_s(&self) -> Option<f64> {
        if let Some(s) = &self.stats {
            return Some(s.tokens_per_s);
        }
        let span = self.last_t? - self.sent_t;
        (span > 0.0).then(|| self.tokens as f64 / span)
    }

    pub fn mean_accept_length(&self) -> Option<f64> {
        if let Some(s) = &self.stats {
            return Some(s.mean_accept_length);
        }
        (self.steps > 0).then(|| self.tokens as f64 / self.steps as f64)
    }

    pub fn accept_histogram(&self) -> &[u64] {
        match &self.stats {
            Some(s) if !s.accept_histogram.is_empty() => &s.accept_histogram,
            _ => &self.histogram,
        }
    }

    fn push(&mut self, t: f64, ids: usize, text: &str, drafted: bool) {
        match self.pieces.last_mut() {
            Some((s, d)) if *d == drafted => s.push_str(text),
            _ => self.pieces.push((text.to_string(), drafted)),
        }
        self.tokens += ids;
        self.last_t = Some(t);
        if drafted {
            self.pending_drafted += ids;
        } else {
            // The target's own token closes a verify step.
            let len = self.pending_drafted + ids;
            if self.histogram.len() <= len {
                self.histogram.resize(len + 1, 0);
            }
            self.histogram[len] += 1;
            self.steps += 1;
            self.pending_drafted = 0;
        }
    }
}

#[derive(Clone, Debug)]
pub struct State {
    pub options: Options,
    pub keymap: Keymap,
    pub layouts: Vec<Layout>,
    pub layout: usize,
    /// Index of the focused slot of the current layout.
    pub focus: usize,
    pub help_open: bool,
    /// The clock: the latest tick or event time.
    pub now: f64,
    /// The spec the next launch uses (remedies change it).
    pub spec: LaunchSpec,
    pub attempt: u32,
    pub launch_t: f64,
    pub phases: BTreeMap<PhaseId, PhaseRecord>,
    pub counters: Vec<Counter>,
    pub findings: Vec<Finding>,
    pub selected_finding: usize,
    pub files: BTreeMap<String, SourceFile>,
    pub ready: Option<ReadyInfo>,
    pub cold_start: Option<ReadyInfo>,
    pub relaunch: Option<ReadyInfo>,
    pub gpus: Vec<GpuSample>,
    pub gpu_note: Option<String>,
    pub log: LogView,
    pub prompt: TextInput,
    pub generation: Generation,
    pub diagnosis_scroll: usize,
    pub notice: Option<String>,
    pub quitting: bool,
    pub engine_exited: bool,
    pub exit_code: i32,
    auto_prompt_pending: bool,
}

impl State {
    pub fn new(spec: LaunchSpec, options: Options, keymap: Keymap, layouts: Vec<Layout>) -> State {
        assert!(!layouts.is_empty(), "a console needs at least one layout");
        let prompt = TextInput::new(options.prompt.clone().unwrap_or_default());
        let auto_prompt_pending = options.prompt.is_some();
        let mut state = State {
            options,
            keymap,
            layouts,
            layout: 0,
            focus: 0,
            help_open: false,
            now: 0.0,
            spec,
            attempt: 0,
            launch_t: 0.0,
            phases: BTreeMap::new(),
            counters: Vec::new(),
            findings: Vec::new(),
            selected_finding: 0,
            files: BTreeMap::new(),
            ready: None,
            cold_start: None,
            relaunch: None,
            gpus: Vec::new(),
            gpu_note: None,
            log: LogView::default(),
            prompt,
            generation: Generation::default(),
            diagnosis_scroll: 0,
            notice: None,
            quitting: false,
            engine_exited: false,
            exit_code: 0,
            auto_prompt_pending,
        };
        state.focus = state.first_focus();
        state
    }

    /// The effects that start a session: the first launch.
    pub fn start(&self) -> Vec<Effect> {
        if self.options.engine_attached {
            vec![Effect::Launch(self.spec.clone())]
        } else {
            Vec::new()
        }
    }

    pub fn current_layout(&self) -> &Layout {
        &self.layouts[self.layout]
    }

    /// The pane a slot shows now: the first of its panes with something to say.
    pub fn shown_pane(&self, panes: &[PaneKind]) -> PaneKind {
        panes.iter().copied().find(|&p| self.has_content(p)).unwrap_or(panes[0])
    }

    fn has_content(&self, pane: PaneKind) -> bool {
        match pane {
            PaneKind::Diagnosis => !self.findings.is_empty() && self.ready.is_none(),
            PaneKind::Generate => self.ready.is_some() || !self.generation.pieces.is_empty(),
            PaneKind::Gpus => !self.gpus.is_empty() || self.gpu_note.is_some(),
            PaneKind::Phases | PaneKind::Log | PaneKind::Status => true,
        }
    }

    fn focusable_slots(&self) -> Vec<usize> {
        let slots = self.current_layout().slot_panes();
        (0..slots.len()).filter(|&i| slots[i] != [PaneKind::Status]).collect()
    }

    /// Start on the first pane that is not a text field, so keys act rather than type.
    fn first_focus(&self) -> usize {
        let slots = self.current_layout().slot_panes();
        let focusable = self.focusable_slots();
        focusable.iter().copied().find(|&i| !slots[i].contains(&PaneKind::Generate)).or(focusable.first().copied()).unwrap_or(0)
    }

    pub fn focused_pane(&self) -> Option<PaneKind> {
        let slots = self.current_layout().slot_panes();
        slots.get(self.focus).map(|panes| self.shown_pane(panes))
    }

    pub fn input_mode(&self) -> InputMode {
        if self.help_open {
            InputMode::Normal
        } else if self.log.search_input.is_some() || self.focused_pane() == Some(PaneKind::Generate) {
            InputMode::Text
        } else {
            InputMode::Normal
        }
    }

    /// Whether the screen changes with the clock alone (a phase or a generation running).
    pub fn animating(&self) -> bool {
        self.generation.active || self.phases.values().any(|p| p.state == Some(PhaseState::Started))
    }

    pub fn shown_finding(&self) -> Option<&Finding> {
        self.findings.get(self.selected_finding)
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
                let file = match text {
                    Ok(text) => SourceFile::Loaded { lines: Arc::new(text.lines().map(str::to_string).collect()), marks: BTreeMap::new() },
                    Err(e) => SourceFile::Failed(e),
                };
                self.files.insert(path.clone(), file);
                self.mark_evidence(&path);
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
                self.launch_t = t;
                self.phases.clear();
                self.counters.clear();
                self.findings.clear();
                self.selected_finding = 0;
                self.diagnosis_scroll = 0;
                self.ready = None;
                self.generation = Generation::default();
                let what = if attempt > 1 { "relaunch" } else { "launch" };
                self.log.push(t, LogLevel::Info, "console", format!("{what} (attempt {attempt}): {}", self.spec));
                Vec::new()
            }
            Event::Phase { phase, state, detail } => {
                let record = self.phases.entry(phase).or_default();
                match state {
                    PhaseState::Started => {
                        record.started = Some(t);
                        record.ended = None;
                    }
                    // A phase may end without having been reported started (ready, or
                    // skipped ones); it then has no elapsed time.
                    _ => record.ended = Some(t),
                }
                record.state = Some(state);
                record.detail = detail;
                if state == PhaseState::Failed {
                    self.on_launch_failed(t, phase)
                } else {
                    Vec::new()
                }
            }
            Event::Progress { phase, unit, gpu, label, done, total } => {
                match self.counters.iter_mut().find(|c| c.phase == phase && c.gpu == gpu && c.label == label) {
                    Some(c) => {
                        c.done = done;
                        c.total = total;
                        c.last_t = t;
                    }
                    None => self.counters.push(Counter { phase, unit, gpu, label, done, total, first_t: t, first_done: done, last_t: t }),
                }
                Vec::new()
            }
            Event::Log { level, source, line } => {
                // The engine reports a failed request as an error line and sends no Stats:
                // that ends the generation (a headless run must not wait for ever).
                let failed_generation = level == LogLevel::Error && self.generation.active;
                if failed_generation {
                    self.generation.active = false;
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
                self.gpus = gpus;
                self.gpu_note = note;
                Vec::new()
            }
            Event::Prompt { text, .. } => {
                if self.prompt.value() != text {
                    self.prompt = TextInput::new(text.clone());
                }
                self.generation = Generation { prompt: text, sent_t: t, active: true, ..Generation::default() };
                Vec::new()
            }
            Event::Token { ids, text, drafted } => {
                self.generation.push(t, ids.len(), &text, drafted);
                Vec::new()
            }
            Event::Stats(stats) => {
                self.generation.stats = Some(stats);
                // The engine sends Stats when a generation ends (see CONTRACTS.md 1).
                let was_active = std::mem::replace(&mut self.generation.active, false);
                if was_active && self.options.exit_when_done {
                    self.finish(0)
                } else {
                    Vec::new()
                }
            }
            Event::Ready { elapsed_s, reused_target } => self.on_ready(t, elapsed_s, reused_target),
            Event::Exit { code, reason } => {
                self.engine_exited = true;
                self.generation.active = false;
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

    fn on_finding(&mut self, t: f64, finding: Finding) -> Vec<Effect> {
        let level = match finding.severity {
            Severity::Error => LogLevel::Error,
            Severity::Warning => LogLevel::Warning,
            Severity::Info => LogLevel::Info,
        };
        self.log.push(t, level, "finding", format!("{} ({}): {}", finding.id, finding.phase, finding.message));
        let mut effects = Vec::new();
        for ev in &finding.evidence {
            let quotable =
                matches!(ev.side, Side::Target | Side::Draft | Side::Log) && (ev.key.starts_with('/') || ev.key.starts_with("line "));
            if quotable && !self.files.contains_key(&ev.file) {
                self.files.insert(ev.file.clone(), SourceFile::Loading);
                effects.push(Effect::ReadFile(ev.file.clone()));
            }
        }
        let files: BTreeSet<String> = finding.evidence.iter().map(|e| e.file.clone()).collect();
        // Errors first: the diagnosis opens on what stops the launch.
        let at = self.findings.iter().position(|f| f.severity < finding.severity).unwrap_or(self.findings.len());
        self.findings.insert(at, finding);
        for file in files {
            self.mark_evidence(&file);
        }
        effects
    }

    /// Work out the lines of every evidence key cited in `path`, once it is loaded.
    fn mark_evidence(&mut self, path: &str) {
        let keys: Vec<String> = self.findings.iter().flat_map(|f| &f.evidence).filter(|e| e.file == path).map(|e| e.key.clone()).collect();
        if let Some(SourceFile::Loaded { lines, marks }) = self.files.get_mut(path) {
            let missing: Vec<String> = keys.into_iter().filter(|k| !marks.contains_key(k)).collect();
            if missing.is_empty() {
                return;
            }
            let text = lines.join("\n");
            for key in missing {
                let line = excerpt::evidence_line(&text, &key);
                marks.insert(key, line);
            }
        }
    }

    fn on_launch_failed(&mut self, t: f64, phase: PhaseId) -> Vec<Effect> {
        // `--apply` ids are looked up as every command looks them up, once a launch reports them.
        let mut pending = self.options.apply.iter().filter(|id| !self.spec.applied.contains(id));
        let remedy = pending.find_map(|id| apply::offered(&self.findings, id).ok()).cloned();
        if let Some(remedy) = remedy {
            let line = format!("applying {} (--apply)", remedy.id);
            let mut effects = vec![Effect::Emit(Event::Log { level: LogLevel::Info, source: "console".into(), line })];
            effects.extend(self.apply_changes(&remedy.id, &remedy.changes));
            return effects;
        }
        if self.options.exit_when_done {
            self.exit_code = exit_code(&self.findings).max(1);
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
        if self.cold_start.is_none() && !reused_target {
            self.cold_start = Some(info);
        } else {
            self.relaunch = Some(info);
        }
        let how = if reused_target { ", target kept resident" } else { "" };
        self.log.push(t, LogLevel::Info, "console", format!("ready in {elapsed_s:.2} s{how}"));
        if std::mem::take(&mut self.auto_prompt_pending) {
            return self.send_prompt();
        }
        if self.options.exit_when_done {
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
        if self.help_open && !matches!(action, Action::Quit) {
            // Help is modal: any key closes it, and only `?`/Esc are consumed by that.
            self.help_open = false;
            if matches!(action, Action::ToggleHelp | Action::Cancel) {
                return Vec::new();
            }
        }
        match action {
            Action::Quit => self.quit(),
            Action::Relaunch => self.relaunch(),
            Action::ApplyRemedy(n) => self.apply_remedy(n),
            Action::ToggleHelp => {
                self.help_open = true;
                Vec::new()
            }
            Action::FocusNext | Action::FocusPrev => {
                self.move_focus(action == Action::FocusNext);
                Vec::new()
            }
            Action::CycleLayout => {
                self.layout = (self.layout + 1) % self.layouts.len();
                self.focus = self.first_focus();
                self.notice = Some(format!("layout: {}", self.current_layout().name));
                Vec::new()
            }
            Action::Search => {
                self.log.open_search();
                Vec::new()
            }
            Action::SearchNext | Action::SearchPrev => {
                if !self.log.jump(action == Action::SearchNext) {
                    self.notice = Some(match &self.log.search {
                        Some(q) => format!("no more matches for {q:?}"),
                        None => "press / to search the log".to_string(),
                    });
                }
                Vec::new()
            }
            Action::ToggleFollow => {
                self.log.toggle_follow();
                Vec::new()
            }
            Action::CycleLevel => {
                self.log.cycle_level();
                Vec::new()
            }
            Action::ScrollUp | Action::ScrollDown | Action::PageUp | Action::PageDown | Action::ScrollTop | Action::ScrollBottom => {
                self.scroll(&action);
                Vec::new()
            }
            Action::NextFinding | Action::PrevFinding => {
                let n = self.findings.len();
                if n > 0 {
                    let step = if action == Action::NextFinding { 1 } else { n - 1 };
                    self.selected_finding = (self.selected_finding + step) % n;
                    self.diagnosis_scroll = 0;
                }
                Vec::new()
            }
            Action::Submit => {
                if self.log.search_input.is_some() {
                    self.log.confirm_search();
                    Vec::new()
                } else {
                    self.send_prompt()
                }
            }
            Action::Cancel => {
                self.log.cancel_search();
                Vec::new()
            }
            Action::Edit(request) => {
                let prompt_focused = self.focused_pane() == Some(PaneKind::Generate);
                match &mut self.log.search_input {
                    Some(input) => {
                        input.handle(request);
                    }
                    None if prompt_focused => {
                        self.prompt.handle(request);
                    }
                    None => {}
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
        let Some(finding) = self.shown_finding() else {
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
        let text = self.prompt.value().to_string();
        if text.trim().is_empty() {
            self.notice = Some("type a prompt first (Tab to the Generate pane)".into());
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
            Effect::Generate(GenerateParams::greedy(text, max_new_tokens)),
        ]
    }

    fn move_focus(&mut self, forward: bool) {
        let order = self.focusable_slots();
        if order.is_empty() {
            return;
        }
        let at = order.iter().position(|&i| i == self.focus).unwrap_or(0);
        let next = if forward { (at + 1) % order.len() } else { (at + order.len() - 1) % order.len() };
        self.focus = order[next];
    }

    fn scroll(&mut self, action: &Action) {
        const PAGE: usize = 10;
        match self.focused_pane() {
            Some(PaneKind::Diagnosis) => {
                let s = &mut self.diagnosis_scroll;
                *s = match action {
                    Action::ScrollUp => s.saturating_sub(1),
                    Action::ScrollDown => *s + 1,
                    Action::PageUp => s.saturating_sub(PAGE),
                    Action::PageDown => *s + PAGE,
                    Action::ScrollTop => 0,
                    // The pane clamps this to its last screenful.
                    _ => usize::MAX / 2,
                };
            }
            // The log scrolls from anywhere else: it is the one long pane.
            _ => match action {
                Action::ScrollUp => self.log.scroll_up(1),
                Action::ScrollDown => self.log.scroll_down(1),
                Action::PageUp => self.log.scroll_up(PAGE),
                Action::PageDown => self.log.scroll_down(PAGE),
                Action::ScrollTop => self.log.scroll_top(),
                _ => self.log.follow_bottom(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::{Evidence, Remedy};

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
        assert_eq!(s.phases[&PhaseId::Preflight].state, Some(PhaseState::Failed));
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
        assert!(s.findings.is_empty() && s.phases.is_empty());
        s.apply(ev(5.0, Event::Ready { elapsed_s: 4.0, reused_target: false }));
        s.apply(ev(6.0, Event::Launch { attempt: 3, spec: LaunchSpec::default() }));
        s.apply(ev(6.5, Event::Ready { elapsed_s: 0.5, reused_target: true }));
        assert_eq!(s.cold_start, Some(ReadyInfo { attempt: 2, elapsed_s: 4.0, reused_target: false }));
        assert_eq!(s.relaunch, Some(ReadyInfo { attempt: 3, elapsed_s: 0.5, reused_target: true }));
    }

    #[test]
    fn loaded_files_mark_the_evidence_lines() {
        let mut s = state(live());
        failed_launch(&mut s);
        let text = "{\n  \"hidden_size\": 8,\n  \"max_position_embeddings\": 262144\n}";
        s.apply(Input::FileLoaded { path: "t/config.json".into(), text: Ok(text.into()) });
        s.apply(Input::FileLoaded { path: "d/config.json".into(), text: Err("gone".into()) });
        match &s.files["t/config.json"] {
            SourceFile::Loaded { lines, marks } => {
                assert_eq!(lines.len(), 4);
                assert_eq!(marks.get("/max_position_embeddings"), Some(&Some(3)));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.files["d/config.json"], SourceFile::Failed("gone".into()));
    }

    /// What sending a prompt does: the prompt goes on the stream, the request to the engine.
    fn prompt_sent(text: &str, max_new_tokens: usize) -> Vec<Effect> {
        vec![
            Effect::Emit(Event::Prompt { text: text.into(), max_new_tokens }),
            Effect::Generate(GenerateParams::greedy(text, max_new_tokens)),
        ]
    }

    #[test]
    fn a_replayed_prompt_fills_the_input_and_starts_the_generation() {
        let mut s = state(Options { engine_attached: false, ..Options::default() });
        s.apply(ev(3.0, Event::Prompt { text: "To be".into(), max_new_tokens: 8 }));
        assert_eq!((s.prompt.value(), s.generation.prompt.as_str(), s.generation.sent_t), ("To be", "To be", 3.0));
        assert!(s.generation.active);
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
        assert_eq!(s.generation.histogram, vec![0, 0, 0, 1]);
        assert_eq!(s.generation.pieces, vec![(" a time".to_string(), true), (",".to_string(), false)]);
        assert_eq!(s.generation.mean_accept_length(), Some(3.0));
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
        assert!(s.generation.active);
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
        assert_eq!(s.prompt.value(), "hi");
        assert_eq!(s.apply(Input::Action(Action::Submit)), vec![]);
        assert_eq!(s.notice.as_deref(), Some("the engine is not ready yet"));
        s.apply(ev(1.0, Event::Ready { elapsed_s: 1.0, reused_target: false }));
        assert_eq!(s.apply(Input::Action(Action::Submit)), prompt_sent("hi", 16));
        assert!(!s.animating(), "the generation starts when the prompt comes back on the stream");
        s.apply(ev(1.5, Event::Prompt { text: "hi".into(), max_new_tokens: 16 }));
        assert!(s.animating());
        assert_eq!(s.generation.sent_t, 1.5);
    }

    #[test]
    fn layouts_cycle_and_alternatives_follow_the_state() {
        let mut s = state(live());
        let names: Vec<String> = (0..3)
            .map(|_| {
                s.apply(Input::Action(Action::CycleLayout));
                s.current_layout().name.clone()
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

    #[test]
    fn help_is_modal() {
        let mut s = state(live());
        s.apply(Input::Action(Action::ToggleHelp));
        assert!(s.help_open);
        assert_eq!(s.apply(Input::Action(Action::Cancel)), vec![]);
        assert!(!s.help_open);
        s.apply(Input::Action(Action::ToggleHelp));
        assert_eq!(s.apply(Input::Action(Action::Quit)), vec![Effect::Shutdown]);
    }

    #[test]
    fn progress_counters_accumulate_per_gpu_and_label() {
        let mut s = state(live());
        let progress = |t, gpu, done| {
            ev(
                t,
                Event::Progress {
                    phase: PhaseId::TargetLoad,
                    unit: ProgressUnit::Bytes,
                    gpu: Some(gpu),
                    label: "model.safetensors".into(),
                    done,
                    total: 100,
                },
            )
        };
        s.apply(progress(1.0, 0, 10));
        s.apply(progress(1.0, 1, 20));
        s.apply(progress(2.0, 0, 60));
        assert_eq!(s.counters.len(), 2);
        assert_eq!((s.counters[0].done, s.counters[0].first_done, s.counters[0].last_t), (60, 10, 2.0));
    }
}
