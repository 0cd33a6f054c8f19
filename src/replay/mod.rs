//! Replay: rebuild a launch's phase timeline and diagnosis from a log — our JSONL event log,
//! an SGLang log (three wordings), a vLLM log, or the generic parts of a TRT-LLM or llama.cpp
//! log — as the same `TimedEvent`s a live launch emits (same phase names, same finding ids as
//! `check`).
//!
//! - `produce` streams a source (a file, `-`, or a file followed as it grows) into an
//!   `EventSink` with the log's own times: the console's replay producer.
//! - `run` does the same into a callback and returns the summary (`ReplayReport`).
//! - `replay_bytes` is the pure form for tests.
//!
//! Memory stays bounded whatever the input size: lines are split from fixed-size reads, one
//! partial line is kept (at most `lines::MAX_LINE_BYTES`), and no line outlives its events.

mod args;
pub(crate) mod clock;
mod command;
pub(crate) mod detect;
mod diagnose;
mod follow;
mod header;
mod jsonl;
pub mod lines;
mod llamacpp;
mod memory;
pub mod print;
mod remedies;
pub(crate) mod report;
mod rules;
mod sglang;
pub(crate) mod text;
mod timeline;
mod traceback;
mod trtllm;
mod vllm;

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::event::{EventSink, TimedEvent};

pub use command::{check_speed, command, HeadlessOptions};
pub use detect::Format;
pub use diagnose::UNRECOGNIZED;
pub use report::{Outcome, PhaseSpan, ReplayReport, ReportBuilder, MAX_FINDINGS};

use lines::LineSplitter;
use text::TextReplayer;

/// Bytes read at a time.
const CHUNK: usize = 256 * 1024;
/// Quiet time after which a line still without its newline is read as it stands (follow
/// mode): a tqdm bar draws for minutes before its newline, and a log's last line may never get one.
const PARTIAL_SETTLE: Duration = Duration::from_millis(250);

enum Kind {
    /// No non-blank line yet.
    Undecided,
    Jsonl {
        last_t: f64,
    },
    Text(Box<TextReplayer>),
}

/// The streaming core: bytes in, events (with their line numbers) out.
pub struct Replayer {
    file: String,
    logs: bool,
    splitter: LineSplitter,
    kind: Kind,
}

impl Replayer {
    /// `file` names the source in evidence. `logs`: also emit a `Log` event per line (the
    /// console shows them; the summary does not need them).
    pub fn new(file: &str, logs: bool) -> Replayer {
        Replayer { file: file.to_string(), logs, splitter: LineSplitter::default(), kind: Kind::Undecided }
    }

    pub fn feed(&mut self, bytes: &[u8], emit: &mut dyn FnMut(u64, TimedEvent)) {
        let Replayer { file, logs, splitter, kind } = self;
        splitter.feed(bytes, &mut |n, raw| Self::line(kind, file, *logs, n, raw, emit));
    }

    fn line(kind: &mut Kind, file: &str, logs: bool, n: u64, raw: &[u8], emit: &mut dyn FnMut(u64, TimedEvent)) {
        if let Kind::Undecided = kind {
            let text = String::from_utf8_lossy(raw);
            if text.trim().is_empty() {
                return;
            }
            *kind =
                if jsonl::is_event_line(&text) { Kind::Jsonl { last_t: 0.0 } } else { Kind::Text(Box::new(TextReplayer::new(file, logs))) };
        }
        match kind {
            Kind::Jsonl { last_t } => {
                if let Some(ev) = jsonl::event(file, n, &String::from_utf8_lossy(raw), *last_t) {
                    *last_t = ev.t;
                    emit(n, ev);
                }
            }
            Kind::Text(text) => text.line(n, raw, emit),
            Kind::Undecided => {}
        }
    }

    /// The input has been quiet for `quiet` (follow mode): settle what waits on that.
    pub fn idle(&mut self, quiet: Duration, emit: &mut dyn FnMut(u64, TimedEvent)) {
        if quiet >= PARTIAL_SETTLE {
            let Replayer { file, logs, splitter, kind } = self;
            splitter.flush_partial(&mut |n, raw| Self::line(kind, file, *logs, n, raw, emit));
        }
        if let Kind::Text(text) = &mut self.kind {
            text.idle(quiet, emit);
        }
    }

    pub fn has_pending(&self) -> bool {
        self.splitter.has_partial() || matches!(&self.kind, Kind::Text(text) if text.has_pending())
    }

    pub fn finish(&mut self, emit: &mut dyn FnMut(u64, TimedEvent)) {
        let Replayer { file, logs, splitter, kind } = self;
        splitter.finish(&mut |n, raw| Self::line(kind, file, *logs, n, raw, emit));
        if let Kind::Text(text) = kind {
            text.finish(emit);
        }
    }

    /// The file was truncated or replaced: read it again from its first line.
    pub fn restart(&mut self, emit: &mut dyn FnMut(u64, TimedEvent)) {
        self.splitter = LineSplitter::default();
        if let Kind::Text(text) = &mut self.kind {
            text.restart(emit);
        }
    }

    pub fn format(&self) -> Format {
        match &self.kind {
            Kind::Undecided => Format::Unknown,
            Kind::Jsonl { .. } => Format::Jsonl,
            Kind::Text(text) => text.format(),
        }
    }

    pub fn version_guess(&self) -> Option<String> {
        match &self.kind {
            Kind::Text(text) => text.version_guess(),
            _ => None,
        }
    }

    pub fn lines(&self) -> u64 {
        self.splitter.lines_done()
    }
}

/// Where a replay reads from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Stdin,
    Path(PathBuf),
}

impl Source {
    /// `-` is standard input.
    pub fn parse(arg: &str) -> Source {
        if arg == "-" {
            Source::Stdin
        } else {
            Source::Path(PathBuf::from(arg))
        }
    }

    pub fn label(&self) -> String {
        match self {
            Source::Stdin => "<stdin>".to_string(),
            Source::Path(p) => p.display().to_string(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// Keep reading as the file grows (survives truncation and rotation).
    pub follow: bool,
    /// Pace events by their recorded times, `speed` times faster (0 = no pacing). Ignored
    /// when following: a live log paces itself.
    pub speed: f64,
    /// Emit a `Log` event per log line.
    pub logs: bool,
}

/// Sleeps so that events come out at their recorded pace.
struct Pacer {
    speed: f64,
    start: Instant,
    first_t: Option<f64>,
}

impl Pacer {
    fn wait(&mut self, t: f64) {
        if self.speed <= 0.0 {
            return;
        }
        let first = *self.first_t.get_or_insert(t);
        // A recorded time too far out for a Duration (1e20 s) is a broken clock, not a
        // wait: such an event comes out at once.
        let due = Duration::try_from_secs_f64(((t - first) / self.speed).max(0.0)).unwrap_or_default();
        if let Some(left) = due.checked_sub(self.start.elapsed()) {
            std::thread::sleep(left);
        }
    }
}

/// Passes each event to the summary, the pacer and the caller, in that order.
pub(crate) struct Delivery<'a> {
    report: ReportBuilder,
    pacer: Pacer,
    on_event: &'a mut dyn FnMut(u64, TimedEvent),
}

impl Delivery<'_> {
    fn deliver(&mut self, line: u64, ev: TimedEvent) {
        self.report.observe(line, &ev);
        self.pacer.wait(ev.t);
        (self.on_event)(line, ev);
    }
}

/// What decides that a follow ends (checked between reads): the summary so far.
pub type StopWhen<'a> = &'a mut dyn FnMut(&ReportBuilder) -> bool;

/// Replays `source`, calling `on_event` with each event and its line, and returns the
/// summary. Without `follow` it reads to the end; with it, until `stop` says so.
pub fn run(
    source: &Source,
    opts: &ReplayOptions,
    on_event: &mut dyn FnMut(u64, TimedEvent),
    stop: StopWhen,
) -> anyhow::Result<ReplayReport> {
    let label = source.label();
    let mut replayer = Replayer::new(&label, opts.logs);
    let speed = if opts.follow { 0.0 } else { opts.speed };
    let mut d = Delivery { report: ReportBuilder::default(), pacer: Pacer { speed, start: Instant::now(), first_t: None }, on_event };
    match source {
        Source::Stdin => read_to_end(io::stdin().lock(), &mut replayer, &mut d, stop).context("reading standard input")?,
        Source::Path(path) if opts.follow => {
            // A device is refused now, not waited on as a file that is not there yet.
            if crate::model::open::exists_in_any_form(path) {
                open(path)?;
            }
            follow::follow(path, &mut replayer, &mut d, stop)?
        }
        Source::Path(path) => {
            let file = open(path)?;
            read_to_end(file, &mut replayer, &mut d, stop).with_context(|| format!("{}: read failed", path.display()))?;
        }
    }
    replayer.finish(&mut |l, e| d.deliver(l, e));
    let (format, guess, lines) = (replayer.format(), replayer.version_guess(), replayer.lines());
    Ok(d.report.build(label, format, guess, lines))
}

fn open(path: &Path) -> anyhow::Result<File> {
    crate::model::open::open_stream(path).with_context(|| format!("{}: cannot open the log", path.display()))
}

fn read_to_end(mut input: impl Read, replayer: &mut Replayer, d: &mut Delivery, stop: StopWhen) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        replayer.feed(&buf[..n], &mut |l, e| d.deliver(l, e));
        if stop(&d.report) {
            return Ok(());
        }
    }
}

/// The console's producer: streams `source` into `sink` with the log's own times (seconds
/// since its first timestamp). Following stops when the sink's receiver is dropped.
pub fn produce(source: &Source, opts: &ReplayOptions, sink: &EventSink) -> anyhow::Result<ReplayReport> {
    run(source, opts, &mut |_, ev| sink.emit_at(ev.t, ev.event), &mut |_| sink.is_closed())
}

/// The pure form: every event with its line number, and the summary.
pub fn replay_bytes(file: &str, bytes: &[u8]) -> (Vec<(u64, TimedEvent)>, ReplayReport) {
    let mut events = Vec::new();
    let mut replayer = Replayer::new(file, true);
    let mut report = ReportBuilder::default();
    let mut collect = |l: u64, e: TimedEvent| {
        report.observe(l, &e);
        events.push((l, e));
    };
    replayer.feed(bytes, &mut collect);
    replayer.finish(&mut collect);
    let summary = report.build(file.to_string(), replayer.format(), replayer.version_guess(), replayer.lines());
    (events, summary)
}
