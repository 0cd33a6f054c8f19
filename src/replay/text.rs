//! Replay of an engine's text log (SGLang, vLLM, TRT-LLM, llama.cpp): each line is cleaned,
//! split where a paste ran records together, its header read, matched against the rule
//! tables, and turned into the events a live launch would emit.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use memchr::memmem::Finder;
use regex::Captures;

use crate::event::{Event, GenerationStats, LogLevel, ProgressUnit, TimedEvent};
use crate::finding::{Finding, Severity};
use crate::phase::PhaseId::{self, *};
use crate::spec::{Algorithm, LaunchSpec};

use super::args;
use super::clock::{Clock, ClockSource};
use super::detect::{line_format, Confidence, Format, VersionVotes};
use super::diagnose::{self, log_evidence};
use super::header::{tp_rank, Header};
use super::lines::{for_each_segment, next_record, strip_prefixes, Unprefixed};
use super::rules::{Action, Ctx, Edge, Engine, Failure, Fault, FramePhase, Rule, RuleSet};
use super::timeline::{Out, Timeline};
use super::traceback::{classify, Continuation, TbLine, Traceback};
use super::{llamacpp, memory, sglang, trtllm, vllm};

/// Idle time after which a traceback is taken as complete (follow mode).
const TRACEBACK_SETTLE: Duration = Duration::from_millis(30);
/// Idle time after which a crash line with no explanation becomes `unrecognized-failure`:
/// a crash line can come before the traceback that explains it.
const CRASH_SETTLE: Duration = Duration::from_millis(500);
/// Accept-length stats are sent at most once per this many seconds of log time.
const STATS_EVERY_S: f64 = 1.0;
/// Decode batches averaged before a low accept length is reported.
const LOW_ACCEPT_BATCHES: u64 = 16;

/// Tracebacks open at once (one per rank or process, and a vLLM log interleaves them); past
/// this the oldest is concluded, so a log of a million made-up ranks stays small and fast.
pub const MAX_OPEN_TRACEBACKS: usize = 256;
/// Ranks whose weight loads are counted apart; later ones share one count.
const MAX_LOAD_RANKS: usize = 1024;

const FRAME_TABLES: [&[(&str, &str, FramePhase)]; 3] = [sglang::FRAMES, vllm::FRAMES, trtllm::FRAMES];

/// Every engine's rules, compiled once per process, in match order: the engines' own, then
/// the text every engine prints.
pub fn rule_set() -> &'static RuleSet {
    static SET: OnceLock<RuleSet> = OnceLock::new();
    SET.get_or_init(|| {
        let tables: [&'static [Rule]; 4] = [sglang::RULES, vllm::RULES, llamacpp::RULES, diagnose::RULES];
        RuleSet::build(tables.iter().flat_map(|t| t.iter()).collect())
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BarKind {
    Shards,
    Capture,
}

/// The tqdm bar last seen of a kind: a new bar starts when the count goes back.
#[derive(Debug, Default)]
struct Bar {
    phase: Option<PhaseId>,
    done: u64,
    total: u64,
    /// The bar started its phase (a `--log-level warning` log has no markers), so its end
    /// ends the phase; otherwise the engine's end marker, which has a time, does.
    owns_phase: bool,
}

impl Bar {
    fn is_new(&self, done: u64, total: u64) -> bool {
        self.phase.is_none() || done < self.done || total != self.total
    }
}

#[derive(Debug, Default)]
struct AcceptStats {
    sum: f64,
    count: u64,
    tokens_per_s: f64,
    last_sent: Option<f64>,
    unsent: bool,
}

/// The state of one server run; a new argument dump or a truncated file starts another.
#[derive(Default)]
struct Run {
    timeline: Timeline,
    spec: LaunchSpec,
    /// `Load weight begin` lines per rank: the first is the target, the second the draft.
    loads: HashMap<String, u8>,
    shard_bar: Bar,
    capture_bar: Bar,
    tracebacks: Vec<Traceback>,
    ready: bool,
    /// The first crash line and what it said.
    crash: Option<(u64, String, &'static str)>,
    has_error: bool,
    /// The findings sent, with the ranks each was sent for.
    reported: HashMap<(String, PhaseId, Severity), HashSet<Option<u32>>>,
    stats: AcceptStats,
    /// Prefill batches before ready: the warm-up sends one.
    prefills: u32,
    /// The batch sizes of a graph capture, as the log lists them, and the capture's phase.
    capture_bs: Option<(PhaseId, String)>,
    /// The message of a draft-context warning, kept to explain a later device fault.
    context_warning: Option<(u64, String, String)>,
    algorithm_checked: bool,
    low_accept_reported: bool,
    /// The free and total memory last sent per GPU.
    gpu_memory: HashMap<u32, (Option<u64>, Option<u64>)>,
}

pub struct TextReplayer {
    file: String,
    logs: bool,
    format: Format,
    confidence: Confidence,
    votes: VersionVotes,
    clock: Clock,
    run: Run,
    launches: u32,
    last_line: u64,
    /// The latest state of a tqdm bar on the line being read, logged once the line is done.
    bar_line: Option<String>,
}

/// Exceptions that end a process on purpose, not a failure of the launch.
fn is_benign_exception(message: &str) -> bool {
    ["KeyboardInterrupt", "SystemExit"].iter().any(|name| message.starts_with(name))
}

fn is_draft_class(cls: &str) -> bool {
    ["Eagle", "NextN", "MTP", "Speculator"].iter().any(|k| cls.contains(k))
}

/// The number after `label` in `text` (`accept len: 2.31,`; llama.cpp pads with spaces).
fn number_after(text: &str, label: &Finder) -> Option<f64> {
    let rest = text[label.find(text.as_bytes())? + label.needle().len()..].trim_start_matches(' ');
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The finding with the TP rank its lines came from (`key`: a traceback's or a line's rank).
fn ranked(mut finding: Finding, key: Option<&str>) -> Finding {
    finding.rank = key.and_then(tp_rank);
    finding
}

fn cap_u64(caps: &Captures, name: &str) -> Option<u64> {
    caps.name(name)?.as_str().parse().ok()
}

impl TextReplayer {
    pub fn new(file: &str, logs: bool) -> TextReplayer {
        TextReplayer {
            file: file.to_string(),
            logs,
            format: Format::Unknown,
            confidence: Confidence::None,
            votes: VersionVotes::default(),
            clock: Clock::default(),
            run: Run::default(),
            launches: 0,
            last_line: 0,
            bar_line: None,
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn version_guess(&self) -> Option<String> {
        self.votes.guess(self.format)
    }

    /// True while something waits on the log going quiet (a traceback, a crash line).
    pub fn has_pending(&self) -> bool {
        !self.run.tracebacks.is_empty() || (self.run.crash.is_some() && !self.run.has_error) || self.run.stats.unsent
    }

    pub fn line(&mut self, line_no: u64, raw: &[u8], emit: &mut dyn FnMut(u64, TimedEvent)) {
        self.last_line = line_no;
        for_each_segment(raw, &mut |segment| self.segment(line_no, segment, emit));
        let t = self.clock.now();
        self.log_bar_line(&mut Out { emit, line: line_no, t });
    }

    /// One displayed state of a line, split into its records where a paste ran several
    /// together (newlines collapsed): each record is read as a line of its own.
    fn segment(&mut self, line_no: u64, text: &str, emit: &mut dyn FnMut(u64, TimedEvent)) {
        let mut text = text;
        loop {
            let unprefixed = strip_prefixes(text);
            let header = Header::parse(unprefixed.rest, unprefixed.process);
            let Some(at) = next_record(header.message) else { return self.record(line_no, text, &unprefixed, &header, emit) };
            let cut = header.message.as_ptr() as usize - text.as_ptr() as usize + at;
            let head = text[..cut].trim_end();
            let unprefixed = strip_prefixes(head);
            self.record(line_no, head, &unprefixed, &Header::parse(unprefixed.rest, unprefixed.process), emit);
            text = &text[cut..];
        }
    }

    fn record(&mut self, line_no: u64, text: &str, unprefixed: &Unprefixed, header: &Header, emit: &mut dyn FnMut(u64, TimedEvent)) {
        if let Some(t) = unprefixed.shipper_time {
            self.clock.observe(ClockSource::Shipper, t);
        }
        if let Some((source, raw)) = header.time {
            self.clock.observe(source, raw);
        }
        if self.confidence < Confidence::Firm {
            if let Some((format, confidence)) = line_format(header, unprefixed.process, unprefixed.rest) {
                if confidence > self.confidence {
                    self.format = format;
                    self.confidence = confidence;
                }
            }
        }
        let mut out = Out { emit, line: line_no, t: self.clock.now() };
        let tb = self.follow_traceback(line_no, text, header, &mut out);
        let tb_rank = tb.and_then(|i| self.run.tracebacks[i].key.as_deref().and_then(tp_rank));
        let engine = self.format.engine();
        let accept = |r: &Rule| r.engine == Engine::Any || r.engine == engine;
        match rule_set().first_match(header.message, accept) {
            Some(matched) => {
                let action = matched.rule.action;
                self.votes.add(matched.rule.dialects);
                match action {
                    // One state of a tqdm bar: the log shows the line's last state, once.
                    Action::ShardBar | Action::CaptureBar if self.logs => self.bar_line = Some(text.to_string()),
                    Action::ShardBar | Action::CaptureBar => {}
                    // Routine lines are shown dimmed: every line is there, the rest stands out.
                    Action::Traffic | Action::DecodeStats => self.log(text, header, Some(LogLevel::Debug), tb.is_some(), &mut out),
                    _ => self.log(text, header, None, tb.is_some(), &mut out),
                }
                match action {
                    // Routine lines: no captures needed.
                    Action::Phase(..)
                    | Action::Mark
                    | Action::Traffic
                    | Action::DecodeStats
                    | Action::ServerReady
                    | Action::ServingLine => self.act_plain(action, header.message, &mut out),
                    _ => {
                        if let Some(caps) = matched.captures() {
                            self.act(action, &caps, text, header, tb, &mut out);
                        }
                    }
                }
            }
            None => self.log(text, header, None, tb.is_some(), &mut out),
        }
        self.gpu_memory(header, tb_rank, &mut out);
    }

    /// The GPU memory the line states, for the recording's GPU pane: sent when it changes.
    /// The GPU is the line's TP rank (a bare traceback line's is its traceback's), else the
    /// device the text names.
    fn gpu_memory(&mut self, header: &Header, traceback_rank: Option<u32>, out: &mut Out) {
        let Some(figures) = memory::figures(header.message) else { return };
        let gpu = header.tp_rank().or(traceback_rank).or(figures.gpu).unwrap_or(0);
        let known = self.run.gpu_memory.entry(gpu).or_default();
        let now = (figures.free_bytes.or(known.0), figures.total_bytes.or(known.1));
        if now != *known {
            *known = now;
            out.event(Event::GpuMemory { gpu, free_bytes: figures.free_bytes, total_bytes: figures.total_bytes });
        }
    }

    /// A `Log` event for the line (the console's log pane), at `level` when given, else the
    /// level its header or its place says.
    fn log(&mut self, text: &str, header: &Header, level: Option<LogLevel>, in_traceback: bool, out: &mut Out) {
        if !self.logs || text.trim().is_empty() {
            return;
        }
        self.log_bar_line(out);
        let level = level.or(header.level).unwrap_or(if in_traceback {
            LogLevel::Error
        } else if header.message.starts_with("Warning") || header.message.contains("WARNING") {
            LogLevel::Warning
        } else {
            LogLevel::Info
        });
        let source = match header.rank {
            Some(rank) => format!("{} {rank}", self.format.name()),
            None => self.format.name().to_string(),
        };
        out.event(Event::Log { level, source, line: text.to_string() });
    }

    /// The last state of the tqdm bar the line held, dimmed, before whatever comes next.
    fn log_bar_line(&mut self, out: &mut Out) {
        if let Some(line) = self.bar_line.take() {
            out.event(Event::Log { level: LogLevel::Debug, source: self.format.name().to_string(), line });
        }
    }

    /// Files the line under the traceback it belongs to (starting one if it opens one) and
    /// ends the tracebacks it shows are over. Returns the index of its traceback.
    fn follow_traceback(&mut self, line_no: u64, text: &str, header: &Header, out: &mut Out) -> Option<usize> {
        let headed = header.engine.is_some() || header.level.is_some();
        let kind = classify(header.message);
        let key = header.rank;
        let tbs = &self.run.tracebacks;
        let continues = |t: &Traceback, needed: Continuation| t.continuation == Continuation::Unknown || t.continuation == needed;
        let target = if !headed {
            tbs.iter().rposition(|t| continues(t, Continuation::Bare))
        } else if !matches!(kind, TbLine::Other) {
            tbs.iter().rposition(|t| continues(t, Continuation::Headed) && t.key.as_deref() == key)
        } else {
            None
        };
        let after_chain = target.is_some_and(|i| tbs[i].after_chain);
        if kind == TbLine::Start && !after_chain {
            let ended = |t: &Traceback| t.key.as_deref() == key || (headed && t.continuation == Continuation::Bare);
            self.end_tracebacks(ended, out);
            return Some(self.open_traceback(Traceback::new(key, line_no, text), out));
        }
        match target {
            Some(i) => {
                let tb = &mut self.run.tracebacks[i];
                if tb.continuation == Continuation::Unknown {
                    tb.continuation = if headed { Continuation::Headed } else { Continuation::Bare };
                }
                tb.push(line_no, text, &kind);
                Some(i)
            }
            None => {
                if headed {
                    let ended = |t: &Traceback| {
                        t.continuation == Continuation::Bare || (t.key.as_deref() == key && t.continuation != Continuation::Bare)
                    };
                    self.end_tracebacks(ended, out);
                }
                match kind {
                    // A traceback pasted from its middle: its first frame opens it.
                    TbLine::Frame { .. } => {
                        let mut tb = Traceback::new(key, line_no, text);
                        tb.push(line_no, text, &kind);
                        Some(self.open_traceback(tb, out))
                    }
                    // An error line without its traceback still ends the server.
                    TbLine::Exception if !is_benign_exception(header.message) => {
                        self.crash("an exception was raised (its traceback is not in the log)", text, None, out);
                        None
                    }
                    _ => None,
                }
            }
        }
    }

    /// Adds an open traceback, concluding the oldest past `MAX_OPEN_TRACEBACKS`; its index.
    fn open_traceback(&mut self, tb: Traceback, out: &mut Out) -> usize {
        if self.run.tracebacks.len() == MAX_OPEN_TRACEBACKS {
            let oldest = self.run.tracebacks.remove(0);
            self.conclude(oldest, out);
        }
        self.run.tracebacks.push(tb);
        self.run.tracebacks.len() - 1
    }

    fn end_tracebacks(&mut self, which: impl Fn(&Traceback) -> bool, out: &mut Out) {
        if self.run.tracebacks.is_empty() {
            return;
        }
        let (ended, kept): (Vec<Traceback>, Vec<Traceback>) = std::mem::take(&mut self.run.tracebacks).into_iter().partition(|t| which(t));
        self.run.tracebacks = kept;
        for tb in ended {
            self.conclude(tb, out);
        }
    }

    /// A traceback is over: if none of its lines explained it, its hint does; else a stack
    /// inside graph capture is `cuda-graph-capture-failed`, and anything else
    /// `unrecognized-failure`.
    fn conclude(&mut self, tb: Traceback, out: &mut Out) {
        if tb.diagnosed {
            return;
        }
        if let Some((failure, line, text, message)) = &tb.hint {
            let set = rule_set();
            let hinted = set.first_match(message, |r| matches!(r.action, Action::Hint(f) if std::ptr::eq(f, *failure)));
            let Some(caps) = hinted.and_then(|m| m.captures()) else { return };
            let place = self.place(failure.phase, Some(&tb));
            let mut evidence = Vec::new();
            if let Some((l, t)) = &tb.exception {
                evidence.push(log_evidence(&self.file, *l, t));
            }
            evidence.push(log_evidence(&self.file, *line, text));
            let finding = diagnose::from_failure(failure, &self.ctx(&caps, place), evidence);
            self.report(ranked(finding, tb.key.as_deref()), None, true, out);
        } else {
            let place = self.place(None, Some(&tb));
            let framed = tb.phase(&FRAME_TABLES, self.warming());
            let finding = if matches!(framed, Some(TargetGraphCapture | DraftGraphCapture)) {
                let shown = self.run.capture_bs.as_ref().filter(|(p, _)| Some(*p) == framed).map(|(_, bs)| bs.as_str());
                diagnose::graph_capture_failed(&self.file, place.0, &tb, shown, &self.run.spec, self.format)
            } else {
                diagnose::unrecognized(&self.file, place, Some(&tb), None)
            };
            let finding = ranked(finding, tb.key.as_deref());
            // Once an error explains the failure, a traceback nothing explained only adds
            // its rank to the same finding of another rank.
            if !self.run.has_error || self.is_rank_copy(&finding) {
                self.report(finding, None, true, out);
            }
        }
    }

    /// Whether `finding` was reported already, from another rank only.
    fn is_rank_copy(&self, finding: &Finding) -> bool {
        let key = (finding.id.clone(), finding.phase, finding.severity);
        self.run.reported.get(&key).is_some_and(|ranks| !ranks.contains(&finding.rank))
    }

    /// True while the log is past start-up but not ready: a request now is the warm-up's.
    fn warming(&self) -> bool {
        !self.run.ready && self.run.timeline.last().is_some()
    }

    /// The phase of a failure, and whether the log said it: the rule's own, else the
    /// traceback's deepest mapped frame, else the phase the log was in (serving once ready).
    /// A log that says nothing gets `serving`, marked unknown: pasted excerpts without any
    /// start-up line are mostly of running servers, and `preflight` would claim a config error.
    fn place(&self, fixed: Option<PhaseId>, tb: Option<&Traceback>) -> (PhaseId, bool) {
        let tl = &self.run.timeline;
        let known = fixed.or_else(|| tb.and_then(|t| t.phase(&FRAME_TABLES, self.warming()))).or(if self.run.ready {
            Some(Serving)
        } else {
            tl.open().or(tl.last())
        });
        match known {
            Some(p) => (p, true),
            None => (Serving, false),
        }
    }

    fn ctx<'a>(&'a self, caps: &'a Captures<'a>, (phase, phase_known): (PhaseId, bool)) -> Ctx<'a> {
        let engine = self.format.engine();
        Ctx { caps, spec: &self.run.spec, dialect: self.votes.best(engine), phase, phase_known, engine }
    }

    /// Sends a finding once per (id, phase, severity) and rank: every TP rank prints the
    /// same error, and the console shows the copies as one finding with its ranks. Only the
    /// first copy moves the timeline. `stops` says the server stopped there (a failure line
    /// or traceback, not a mismatch seen in passing).
    fn report(&mut self, finding: Finding, tb: Option<usize>, stops: bool, out: &mut Out) {
        let error = finding.is_error();
        if let (true, Some(i)) = (error, tb) {
            self.run.tracebacks[i].diagnosed = true;
        }
        let ranks = self.run.reported.entry((finding.id.clone(), finding.phase, finding.severity)).or_default();
        let first = ranks.is_empty();
        if !ranks.insert(finding.rank) {
            return;
        }
        if !first {
            out.event(Event::Finding(finding));
            return;
        }
        let phase = finding.phase;
        let stops = error && stops;
        if stops {
            self.run.timeline.enter_failure(phase, out);
        }
        out.event(Event::Finding(finding));
        if error {
            self.run.has_error = true;
        }
        if stops {
            self.run.timeline.fail(phase, None, out);
        }
    }

    /// The actions of routine lines, which need no captures.
    fn act_plain(&mut self, action: Action, message: &str, out: &mut Out) {
        match action {
            Action::Phase(p, Edge::Begin) => self.run.timeline.begin(p, out),
            Action::Phase(p, Edge::End) => self.run.timeline.end(p, out),
            Action::DecodeStats => {
                self.serving(out);
                self.decode_stats(message, out);
            }
            Action::Traffic => self.traffic(message, out),
            Action::ServerReady => self.ready(out),
            Action::ServingLine => self.serving(out),
            _ => {}
        }
    }

    /// Request traffic: the warm-up's single request, or requests served. A batch that
    /// shows other requests running or queued, a second prefill, or an OpenAI-API request
    /// is serving; the warm-up sends one request to `/generate` (SGLang) before ready.
    fn traffic(&mut self, message: &str, out: &mut Out) {
        static LABELS: LazyLock<[Finder<'static>; 2]> = LazyLock::new(|| ["#running-req: ", "#queue-req: "].map(Finder::new));
        if self.run.ready {
            return self.serving(out);
        }
        let others = LABELS.iter().any(|label| number_after(message, label).is_some_and(|n| n > 0.0));
        let prefill = message.starts_with("Prefill batch");
        if prefill {
            self.run.prefills += 1;
        }
        if others || self.run.prefills > 1 || message.contains(" /v1/") {
            self.serving(out);
        } else {
            self.run.timeline.begin(Warmup, out);
        }
    }

    /// A line only a serving server prints: it was ready, whether or not the log showed it.
    fn serving(&mut self, out: &mut Out) {
        if !self.run.ready {
            self.ready(out);
        }
        self.run.timeline.begin(Serving, out);
    }

    fn act(&mut self, action: Action, caps: &Captures, text: &str, header: &Header, tb: Option<usize>, out: &mut Out) {
        match action {
            Action::WeightLoad(edge) => self.weight_load(edge, caps, text, header, out),
            Action::LoadDone => {
                let phase = if self.run.timeline.is_open(DrafterLoad) { DrafterLoad } else { TargetLoad };
                self.run.timeline.end(phase, out);
            }
            Action::ShardBar => self.bar(BarKind::Shards, caps, header, out),
            Action::CaptureBar => self.bar(BarKind::Capture, caps, header, out),
            Action::ArgsDump => self.args_dump(header.message, out),
            Action::Version => {
                self.votes.stated = caps.name("version").map(|v| v.as_str().to_string());
                self.run.timeline.begin(Preflight, out);
            }
            Action::Crash(note) => self.crash(note, text, tb, out),
            Action::Fail(failure) => self.fail(failure, caps, text, header, tb, out),
            Action::Hint(failure) => {
                if let Some(i) = tb {
                    self.run.tracebacks[i].hint = Some((failure, out.line, text.to_string(), header.message.to_string()));
                }
            }
            Action::DeviceFault(fault) => self.device_fault(fault, caps, text, header, tb, out),
            Action::CaptureBatchList => {
                self.run.capture_bs = caps.name("list").map(|l| (TargetGraphCapture, l.as_str().to_string()));
                self.act_plain(action, header.message, out)
            }
            Action::Phase(..) | Action::Mark | Action::Traffic | Action::DecodeStats | Action::ServerReady | Action::ServingLine => {
                self.act_plain(action, header.message, out)
            }
        }
    }

    fn weight_load(&mut self, edge: Edge, caps: &Captures, text: &str, header: &Header, out: &mut Out) {
        let rank = header.rank.unwrap_or("");
        let rank = if self.run.loads.len() >= MAX_LOAD_RANKS && !self.run.loads.contains_key(rank) { "" } else { rank };
        let count = self.run.loads.entry(rank.to_string()).or_insert(0);
        if edge == Edge::Begin {
            *count = count.saturating_add(1);
        }
        let cls = caps.name("cls").map(|c| c.as_str());
        let draft = cls.map_or(*count >= 2, is_draft_class);
        let phase = if draft { DrafterLoad } else { TargetLoad };
        match edge {
            Edge::Begin => self.run.timeline.begin(phase, out),
            Edge::End => {
                self.run.timeline.end(phase, out);
                if let (true, Some(_)) = (draft, cls) {
                    self.check_algorithm(caps, text, out);
                }
            }
        }
    }

    /// A draft class against the algorithm of the argument dump (SGLang's silent mismatch).
    fn check_algorithm(&mut self, caps: &Captures, text: &str, out: &mut Out) {
        let cls = &caps["cls"];
        let failure: &Failure = match (self.run.spec.speculative_algorithm, cls.contains("Eagle3")) {
            (Some(Algorithm::Eagle), true) => &diagnose::EAGLE3_DRAFT_UNDER_EAGLE,
            (Some(Algorithm::Eagle3), false) if cls.contains("Eagle") => &diagnose::EAGLE_DRAFT_UNDER_EAGLE3,
            _ => return,
        };
        self.run.algorithm_checked = true;
        let evidence = vec![log_evidence(&self.file, out.line, text)];
        let finding = diagnose::from_failure(failure, &self.ctx(caps, (Preflight, true)), evidence);
        self.report(finding, None, false, out);
    }

    fn bar(&mut self, kind: BarKind, caps: &Captures, header: &Header, out: &mut Out) {
        let (Some(done), Some(total)) = (cap_u64(caps, "done"), cap_u64(caps, "total")) else { return };
        let (first, second) = match kind {
            BarKind::Shards => (TargetLoad, DrafterLoad),
            BarKind::Capture => (TargetGraphCapture, DraftGraphCapture),
        };
        let tl = &self.run.timeline;
        let bar = match kind {
            BarKind::Shards => &mut self.run.shard_bar,
            BarKind::Capture => &mut self.run.capture_bar,
        };
        // vLLM captures target and draft in one set of graphs: every bar is the target's.
        let phase = if caps.name("desc").is_some() {
            first
        } else if tl.is_open(second) {
            second
        } else if tl.is_open(first) {
            first
        } else if bar.is_new(done, total) {
            if tl.started(first) {
                second
            } else {
                first
            }
        } else {
            bar.phase.unwrap_or(first)
        };
        let owns_phase = if bar.is_new(done, total) { !tl.started(phase) } else { bar.owns_phase };
        if let (BarKind::Capture, Some(bs)) = (kind, caps.name("bs")) {
            self.run.capture_bs = Some((phase, bs.as_str().to_string()));
        }
        *bar = Bar { phase: Some(phase), done, total, owns_phase };
        self.run.timeline.begin(phase, out);
        let (unit, label) = match (caps.name("bs"), caps.name("desc")) {
            (Some(bs), _) => (ProgressUnit::BatchSize, bs.as_str()),
            (None, Some(desc)) => (ProgressUnit::Items, desc.as_str()),
            (None, None) => (ProgressUnit::Items, "checkpoint shards"),
        };
        out.event(Event::Progress { phase, unit, gpu: header.tp_rank(), label: label.to_string(), done, total });
        if done == total && total > 0 && owns_phase && self.run.timeline.is_open(phase) {
            self.run.timeline.end(phase, out);
        }
    }

    fn args_dump(&mut self, message: &str, out: &mut Out) {
        if self.launches > 0 || self.run.timeline.last().is_some() {
            self.end_run(out);
            self.run = Run::default();
        }
        self.launches += 1;
        let spec = args::parse(self.format.engine(), message);
        self.run.spec = spec.clone();
        out.event(Event::Launch { attempt: self.launches, spec });
        self.run.timeline.begin(Preflight, out);
    }

    fn decode_stats(&mut self, message: &str, out: &mut Out) {
        // SGLang's `Decode batch.` line, then vLLM's metrics lines.
        static LABELS: LazyLock<[Finder<'static>; 5]> = LazyLock::new(|| {
            [
                "gen throughput (token/s): ",
                "Avg generation throughput: ",
                "accept len: ",
                "Mean acceptance length: ",
                "mean acceptance length = ",
            ]
            .map(Finder::new)
        });
        let [sglang_tps, vllm_tps, sglang_accept, vllm_accept, llamacpp_accept] = &*LABELS;
        let stats = &mut self.run.stats;
        if let Some(tps) = number_after(message, sglang_tps).or_else(|| number_after(message, vllm_tps)) {
            stats.tokens_per_s = tps;
        }
        let accept = [sglang_accept, vllm_accept, llamacpp_accept].into_iter().find_map(|label| number_after(message, label));
        let Some(accept) = accept else {
            return;
        };
        stats.sum += accept;
        stats.count += 1;
        stats.unsent = true;
        if stats.last_sent.is_none_or(|t| out.t - t >= STATS_EVERY_S) {
            self.send_stats(out);
        }
        self.check_low_acceptance(out);
    }

    fn send_stats(&mut self, out: &mut Out) {
        let stats = &mut self.run.stats;
        if !stats.unsent || stats.count == 0 {
            return;
        }
        stats.unsent = false;
        stats.last_sent = Some(out.t);
        out.event(Event::Stats(GenerationStats {
            tokens: 0,
            tokens_per_s: stats.tokens_per_s,
            mean_accept_length: stats.sum / stats.count as f64,
            accept_histogram: Vec::new(),
        }));
    }

    /// Sustained accept length ≈ 1: the drafter's tokens are (almost) never accepted.
    fn check_low_acceptance(&mut self, out: &mut Out) {
        let stats = &self.run.stats;
        if self.run.low_accept_reported || self.run.algorithm_checked || stats.count < LOW_ACCEPT_BATCHES {
            return;
        }
        let mean = stats.sum / stats.count as f64;
        if mean > 1.05 {
            return;
        }
        self.run.low_accept_reported = true;
        let mut f = Finding::new(
            "low-acceptance",
            Severity::Warning,
            Serving,
            format!(
                "The accept length has stayed at {mean:.2} over {} decode batches: the drafter's tokens are almost never \
                 accepted. Known silent causes: an EAGLE-3 draft under --speculative-algorithm EAGLE; draft_vocab_size \
                 below the target's vocab without a d2t map; a draft trained for another target or tokenizer.",
                stats.count
            ),
        );
        f.evidence.push(log_evidence(&self.file, out.line, &format!("accept len mean {mean:.2}")));
        self.report(f, None, false, out);
    }

    fn ready(&mut self, out: &mut Out) {
        self.run.timeline.begin(Ready, out);
        self.run.timeline.end(Ready, out);
        let elapsed_s = out.t - self.run.timeline.first_t().unwrap_or(out.t);
        out.event(Event::Ready { elapsed_s, reused_target: false });
        self.run.ready = true;
    }

    fn crash(&mut self, note: &'static str, text: &str, tb: Option<usize>, out: &mut Out) {
        if let Some(i) = tb {
            self.run.tracebacks[i].note = Some(note);
        }
        if self.run.crash.is_none() {
            self.run.crash = Some((out.line, text.to_string(), note));
            if self.run.ready {
                self.run.timeline.fail(Serving, Some(format!("the server died while serving: {note}")), out);
            }
        }
    }

    fn fail(&mut self, failure: &Failure, caps: &Captures, text: &str, header: &Header, tb: Option<usize>, out: &mut Out) {
        let tb_ref = tb.map(|i| &self.run.tracebacks[i]);
        let phase = self.place(failure.phase, tb_ref);
        let mut evidence = vec![log_evidence(&self.file, out.line, text)];
        if let Some(frame) = tb_ref.and_then(Traceback::deepest_engine_frame) {
            evidence.push(log_evidence(&self.file, frame.line, &frame.text));
        }
        let key = tb_ref.and_then(|t| t.key.as_deref()).or(header.rank);
        let finding = ranked(diagnose::from_failure(failure, &self.ctx(caps, phase), evidence), key);
        if finding.id == sglang::CONTEXT_DRAFT_ID && finding.severity == Severity::Warning {
            self.run.context_warning = Some((out.line, text.to_string(), header.message.to_string()));
        }
        // A running server logs some errors and goes on; inside a traceback it stopped.
        let stops = !self.run.ready || tb.is_some();
        // A warning of a fixed phase shows the start-up has reached it.
        if !finding.is_error() && failure.phase.is_some() && !self.run.ready {
            self.run.timeline.begin(finding.phase, out);
        }
        self.report(finding, tb, stops, out);
    }

    /// A CUDA device fault: explained by an earlier line when the log has one (the draft
    /// context warning, a token map under TP), else named for what it is.
    fn device_fault(&mut self, fault: Fault, caps: &Captures, text: &str, header: &Header, tb: Option<usize>, out: &mut Out) {
        let place = self.place(None, tb.map(|i| &self.run.tracebacks[i]));
        let explained = self.run.context_warning.as_ref().and_then(|(line, warning, message)| {
            let warning_caps = diagnose::recapture(rule_set(), message, sglang::CONTEXT_DRAFT_ID)?;
            let evidence = vec![log_evidence(&self.file, out.line, text), log_evidence(&self.file, *line, warning)];
            Some(diagnose::from_failure(&diagnose::CONTEXT_FAULT, &self.ctx(&warning_caps, place), evidence))
        });
        let finding = match (explained, diagnose::token_map_fault(&self.run.spec)) {
            (Some(f), _) => f,
            (None, Some(failure)) => {
                diagnose::from_failure(failure, &self.ctx(caps, place), vec![log_evidence(&self.file, out.line, text)])
            }
            (None, None) if fault == Fault::IllegalAccess => {
                let speculative = self.run.spec.speculative_algorithm.is_some() || self.run.timeline.started(DrafterLoad);
                diagnose::illegal_memory_access(&self.file, place, out.line, text, speculative, self.format)
            }
            (None, None) => diagnose::unexplained_device_fault(&self.file, place.0, out.line, text),
        };
        let key = tb.and_then(|i| self.run.tracebacks[i].key.as_deref()).or(header.rank);
        let finding = ranked(finding, key);
        self.report(finding, tb, true, out);
    }

    /// Ends what only the end of the log (or a quiet spell in follow mode) can end.
    pub fn idle(&mut self, quiet: Duration, emit: &mut dyn FnMut(u64, TimedEvent)) {
        let mut out = Out { emit, line: self.last_line, t: self.clock.now() };
        if quiet >= TRACEBACK_SETTLE {
            self.end_tracebacks(|_| true, &mut out);
            self.send_stats(&mut out);
        }
        if quiet >= CRASH_SETTLE {
            self.explain_crash(&mut out);
        }
    }

    fn explain_crash(&mut self, out: &mut Out) {
        if let (Some((line, text, note)), false) = (self.run.crash.clone(), self.run.has_error) {
            let phase = self.place(None, None);
            let finding = diagnose::unrecognized(&self.file, phase, None, Some((line, &text, note)));
            self.report(finding, None, true, out);
        }
    }

    fn end_run(&mut self, out: &mut Out) {
        self.end_tracebacks(|_| true, out);
        self.send_stats(out);
        self.explain_crash(out);
    }

    pub fn finish(&mut self, emit: &mut dyn FnMut(u64, TimedEvent)) {
        let mut out = Out { emit, line: self.last_line, t: self.clock.now() };
        self.end_run(&mut out);
    }

    /// The file was truncated or replaced: what follows is a new run from line 1.
    pub fn restart(&mut self, emit: &mut dyn FnMut(u64, TimedEvent)) {
        self.finish(emit);
        self.run = Run::default();
        self.last_line = 0;
    }
}
