//! The engine as a server calls it: one serving thread owns the engine, launches it
//! (relaunches keep what stays valid, as the console's engine thread does: `handle::Placed`)
//! and, once a launch is ready, serves from it through the continuous-batching scheduler
//! (`engine::scheduler`), driven through a cloneable `ServeHandle`. Each request gets its
//! own stream of `ServeEvent`s, and its lifecycle goes on the session's event stream
//! (`RequestQueued`, `RequestStarted`, `RequestFinished`), written by this thread, so the
//! event log holds every request before the engine's `Exit`. Stop strings, text and the
//! live counters are kept here; the scheduler deals in token ids only.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::engine::findings::{error_finding, BACKEND_ERROR};
use crate::engine::handle::Placed;
use crate::engine::request::{Cancel, LaunchOutcome, PreflightFn};
pub use crate::engine::sampling::SamplingParams;
use crate::engine::scheduler::{Batch, Finish, SchedulerConfig, SeqRequest, SeqUpdate, StepTimes};
use crate::event::{Event, EventSink, LogLevel};
use crate::finding::{Finding, Severity, Side};
use crate::model::tokenizer::{TextStream, TextTokenizer};
use crate::phase::PhaseId;
use crate::spec::LaunchSpec;

pub type RequestId = u64;

#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    /// `chat`: apply the tokenizer's chat template to one user message.
    Text {
        text: String,
        chat: bool,
    },
    /// (role, content) pairs through the chat template.
    Messages(Vec<(String, String)>),
    Ids(Vec<u32>),
}

impl Prompt {
    /// The prompt as the event log keeps it (`--log-requests`).
    fn logged(&self) -> String {
        match self {
            Prompt::Text { text, .. } => text.clone(),
            Prompt::Messages(m) => m.iter().map(|(role, content)| format!("{role}: {content}")).collect::<Vec<_>>().join("\n"),
            Prompt::Ids(ids) => format!("{ids:?}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServeRequest {
    pub prompt: Prompt,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Text that ends the output (not included).
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// Where it came from, for the event log: `/v1/completions`, `console`, `bench`.
    pub endpoint: &'static str,
}

#[derive(Clone, Debug, PartialEq)]
pub enum FinishReason {
    Stop,
    Length,
    Cancelled,
    Error(String),
}

impl FinishReason {
    /// OpenAI's name (`stop`, `length`), `cancelled` or `error`.
    pub fn name(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Error(_) => "error",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub mean_accept_length: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ServeEvent {
    /// The scheduler took the request into the running batch.
    Started { prompt_tokens: usize },
    /// Tokens a step committed: its accepted draft tokens (`drafted`) in one event, then
    /// the target's own token in another, so a view can mark what speculation gave.
    Tokens { ids: Vec<u32>, text: String, drafted: bool },
    /// Always the last event of a request.
    Finished {
        reason: FinishReason,
        usage: Usage,
        /// The whole output, decoded at once (the pieces hold back an incomplete character).
        text: String,
    },
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SubmitError {
    #[error("the queue is full ({queued} requests wait)")]
    QueueFull { queued: usize },
    #[error("the prompt ({prompt_tokens} tokens) plus max_tokens ({max_tokens}) exceed the context ({context} tokens)")]
    TooLong { prompt_tokens: usize, max_tokens: usize, context: usize },
    #[error("{0}")]
    Invalid(String),
    /// No launch is being served: not launched or not ready yet, relaunching, or a launch
    /// this engine cannot serve batched (the reason).
    #[error("{0}")]
    NotServing(String),
    #[error("the server is shutting down")]
    Stopped,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServeStats {
    pub running: usize,
    pub queued: usize,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    /// Mean tokens per verify over the last `RECENT_STEPS` steps (1.0 target-only): the
    /// tokens their verifies committed over their number, whatever each step's batch.
    pub spec_accept_length: f64,
    /// Tokens committed by verifies and verifies (one a sequence a step) since the start.
    pub spec_accepted_total: u64,
    pub spec_verifies_total: u64,
    /// Output tokens per second over the last `RECENT_STEPS` steps.
    pub gen_throughput: f64,
    pub kv_blocks_total: usize,
    pub kv_blocks_free: usize,
    /// Where the scheduler's steps went, the serving thread's handling included.
    pub step_times: StepTimes,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatencySamples {
    pub ttft_seconds: Vec<f64>,
    pub itl_seconds: Vec<f64>,
}

/// How the serving thread queues and records requests.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServeConfig {
    /// Waiting requests before `submit` answers `QueueFull`; `None`: `QUEUE_PER_PLACE` per
    /// running place.
    pub max_queued: Option<usize>,
    /// Keep prompts and answers in the event log (`--log-requests`).
    pub log_requests: bool,
}

/// Waiting requests per running place before `submit` answers `QueueFull`.
const QUEUE_PER_PLACE: usize = 4;
const RECENT_STEPS: usize = 64;
const NOT_READY: &str = "the engine is not ready";

enum Command {
    /// Launch (or relaunch) and serve; `ready` hears whether serving began.
    Launch {
        spec: Box<LaunchSpec>,
        ready: Option<mpsc::Sender<Result<(), Finding>>>,
    },
    Submit {
        id: RequestId,
        req: SeqRequest,
        stop: Vec<String>,
        events: UnboundedSender<ServeEvent>,
    },
    Cancel(RequestId),
}

/// What `submit` needs of the launch being served.
#[derive(Clone)]
struct Served {
    tokenizer: Arc<TextTokenizer>,
    context: usize,
    max_queued: usize,
    model_name: String,
}

/// What the serving thread updates and the handle reads.
struct Live {
    /// `queued` counts the scheduler's waiting requests; `pending` those submitted and not
    /// yet taken by the thread.
    stats: Mutex<ServeStats>,
    pending: std::sync::atomic::AtomicUsize,
    latency: Mutex<LatencySamples>,
    /// The launch being served, or why none is.
    served: Mutex<Result<Served, String>>,
}

impl Default for Live {
    fn default() -> Live {
        Live { stats: Mutex::default(), pending: Default::default(), latency: Mutex::default(), served: Mutex::new(Err(NOT_READY.into())) }
    }
}

impl Live {
    fn set_served(&self, served: Result<Served, String>) {
        *self.served.lock().expect("served lock") = served;
    }

    fn stats(&self) -> ServeStats {
        let mut st = self.stats.lock().expect("stats lock").clone();
        st.queued += self.pending.load(Ordering::SeqCst);
        st
    }
}

struct Shared {
    commands: Mutex<Option<mpsc::Sender<Command>>>,
    /// For `RequestQueued`, and the end of a request refused at `submit`.
    events: EventSink,
    log_requests: bool,
    next_id: AtomicU64,
    stopped: AtomicBool,
    /// The engine's own cancel: a shutdown stops a launch in progress at once.
    cancel: Cancel,
    live: Arc<Live>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    /// Take no more requests and close the command channel: the thread cancels what runs,
    /// frees the engine and ends.
    fn close(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.cancel.set();
        self.commands.lock().expect("commands lock").take();
    }

    fn join(&self) {
        if let Some(t) = self.thread.lock().expect("thread lock").take() {
            let _ = t.join();
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.close();
        self.join();
    }
}

/// Send + Sync and cloneable; the serving thread stops when `shutdown` (or `close`) is
/// called or the last clone is dropped.
#[derive(Clone)]
pub struct ServeHandle {
    shared: Arc<Shared>,
}

impl ServeHandle {
    /// The serving thread, with no engine yet: `launch` makes one. Phases, findings and
    /// request lifecycles go to `events`, and `Exit` once the engine is freed.
    pub fn spawn(events: EventSink, preflight: PreflightFn, config: ServeConfig) -> ServeHandle {
        let (commands, rx) = mpsc::channel();
        let live = Arc::new(Live::default());
        let cancel = Cancel::default();
        let worker = Worker { events: events.clone(), preflight, cancel: cancel.clone(), live: live.clone(), config };
        let thread = std::thread::Builder::new()
            .name("specdeck-serve".into())
            .spawn(move || worker.run(&rx))
            .expect("the OS can start the serving thread");
        ServeHandle {
            shared: Arc::new(Shared {
                commands: Mutex::new(Some(commands)),
                events,
                log_requests: config.log_requests,
                next_id: AtomicU64::new(1),
                stopped: AtomicBool::new(false),
                cancel,
                live,
                thread: Mutex::new(Some(thread)),
            }),
        }
    }

    /// Launch `spec` and serve it; blocks until serving began, or returns the finding that
    /// stopped the launch (or that it cannot be served).
    pub fn start(spec: &LaunchSpec, events: EventSink, preflight: PreflightFn, config: ServeConfig) -> Result<ServeHandle, Finding> {
        let handle = ServeHandle::spawn(events, preflight, config);
        let (tx, rx) = mpsc::channel();
        let _ = handle.send(Command::Launch { spec: Box::new(spec.clone()), ready: Some(tx) });
        let ended = || Finding::new(BACKEND_ERROR, Severity::Error, PhaseId::Ready, "the serving thread ended during the launch");
        rx.recv().unwrap_or_else(|_| Err(ended()))?;
        Ok(handle)
    }

    /// Launch or relaunch `spec` without waiting: requests are refused until it is served,
    /// and those in flight when it arrives end as cancelled.
    pub fn launch(&self, spec: LaunchSpec) {
        let _ = self.send(Command::Launch { spec: Box::new(spec), ready: None });
    }

    /// Tokenize, check and queue a request; its events arrive on the receiver. A request
    /// turned away for what it asks (`Invalid`, `TooLong`) is recorded as queued and ended
    /// under its id; one turned away for the server's state is not.
    pub fn submit(&self, req: ServeRequest) -> Result<(RequestId, UnboundedReceiver<ServeEvent>), SubmitError> {
        let s = &self.shared;
        if s.stopped.load(Ordering::Relaxed) {
            return Err(SubmitError::Stopped);
        }
        let served = s.live.served.lock().expect("served lock").clone().map_err(SubmitError::NotServing)?;
        let queued = s.live.stats().queued;
        if queued >= served.max_queued {
            return Err(SubmitError::QueueFull { queued });
        }
        let id = s.next_id.fetch_add(1, Ordering::Relaxed);
        let prompt = s.log_requests.then(|| req.prompt.logged());
        s.events.emit(Event::RequestQueued { id, endpoint: req.endpoint.into(), max_tokens: req.max_tokens, prompt });
        let seq = match tokenized(&served, &req) {
            Ok(seq) => seq,
            Err(e) => {
                s.events.emit(Event::RequestFinished {
                    id,
                    completion_tokens: 0,
                    finish_reason: "invalid".into(),
                    ttft_s: None,
                    itl_s: None,
                    mean_accept_length: 0.0,
                    error: Some(e.to_string()),
                    text: None,
                });
                return Err(e);
            }
        };
        let (tx, rx) = unbounded_channel();
        // Counted as queued at once, so that requests submitted together see each other.
        s.live.pending.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.send(Command::Submit { id, req: seq, stop: req.stop, events: tx }) {
            s.live.pending.fetch_sub(1, Ordering::SeqCst);
            return Err(e);
        }
        Ok((id, rx))
    }

    /// Cancel a queued or running request (it ends with `Cancelled`, its blocks freed).
    pub fn cancel(&self, id: RequestId) {
        let _ = self.send(Command::Cancel(id));
    }

    pub fn stats(&self) -> ServeStats {
        self.shared.live.stats()
    }

    /// TTFT and ITL samples since the previous call.
    pub fn take_latency_samples(&self) -> LatencySamples {
        std::mem::take(&mut *self.shared.live.latency.lock().expect("latency lock"))
    }

    /// Whether a launch is being served (requests are taken).
    pub fn serving(&self) -> bool {
        !self.shared.stopped.load(Ordering::Relaxed) && self.shared.live.served.lock().expect("served lock").is_ok()
    }

    /// The context of the launch being served.
    pub fn context_length(&self) -> Option<usize> {
        self.shared.live.served.lock().expect("served lock").as_ref().ok().map(|s| s.context)
    }

    /// The served model's name (its folder's), when serving.
    pub fn model_name(&self) -> Option<String> {
        self.shared.live.served.lock().expect("served lock").as_ref().ok().map(|s| s.model_name.clone())
    }

    /// Stop accepting and cancel everything in flight; the thread frees the engine, emits
    /// `Exit` and ends. Does not wait.
    pub fn close(&self) {
        self.shared.close();
    }

    /// `close`, then wait for the thread to end.
    pub fn shutdown(&self) {
        self.shared.close();
        self.shared.join();
    }

    fn send(&self, cmd: Command) -> Result<(), SubmitError> {
        let commands = self.shared.commands.lock().expect("commands lock");
        commands.as_ref().ok_or(SubmitError::Stopped)?.send(cmd).map_err(|_| SubmitError::Stopped)
    }
}

/// The request's prompt as token ids, checked against what the launch serves.
fn tokenized(served: &Served, req: &ServeRequest) -> Result<SeqRequest, SubmitError> {
    let tok = &served.tokenizer;
    let invalid = |e: crate::model::tokenizer::TokenizerError| SubmitError::Invalid(e.to_string());
    let prompt = match &req.prompt {
        Prompt::Ids(ids) => ids.clone(),
        Prompt::Text { text, chat: false } => tok.encode(text, true).map_err(invalid)?,
        Prompt::Text { text, chat: true } => tok.encode(&tok.chat_prompt(text).map_err(invalid)?, false).map_err(invalid)?,
        Prompt::Messages(m) => tok.encode(&tok.chat_messages(m).map_err(invalid)?, false).map_err(invalid)?,
    };
    if prompt.is_empty() {
        return Err(SubmitError::Invalid("the prompt has no tokens".into()));
    }
    crate::engine::sampling::check(&req.sampling).map_err(SubmitError::Invalid)?;
    if prompt.len().saturating_add(req.max_tokens) > served.context {
        return Err(SubmitError::TooLong { prompt_tokens: prompt.len(), max_tokens: req.max_tokens, context: served.context });
    }
    Ok(SeqRequest { prompt, max_tokens: req.max_tokens, sampling: req.sampling, ignore_eos: req.ignore_eos })
}

fn model_name(spec: &LaunchSpec) -> String {
    spec.model_path
        .as_deref()
        .and_then(|p| std::path::Path::new(p).file_name())
        .map_or_else(|| "model".to_string(), |n| n.to_string_lossy().into_owned())
}

/// The serving thread.
struct Worker {
    events: EventSink,
    preflight: PreflightFn,
    cancel: Cancel,
    live: Arc<Live>,
    config: ServeConfig,
}

impl Worker {
    /// Commands until the channel closes; then the engine is freed and `Exit` follows.
    fn run(self, rx: &mpsc::Receiver<Command>) {
        let mut placed = Placed::default();
        let mut next = rx.recv().ok();
        while let Some(command) = next.take() {
            next = match command {
                Command::Launch { spec, ready } => self.launch_and_serve(&mut placed, &spec, ready.as_ref(), rx),
                Command::Submit { events, .. } => {
                    self.live.pending.fetch_sub(1, Ordering::SeqCst);
                    // Queued just before a relaunch: the launch it was for is gone.
                    let text = String::new();
                    let _ =
                        events.send(ServeEvent::Finished { reason: FinishReason::Error(NOT_READY.into()), usage: Usage::default(), text });
                    rx.recv().ok()
                }
                Command::Cancel(_) => rx.recv().ok(),
            };
        }
        self.live.set_served(Err("the server is shutting down".into()));
        drop(placed);
        self.events.emit(Event::Exit { code: 0, reason: "shutdown".into() });
    }

    /// Launch; once ready, serve until a relaunch (returned, to run next) or the channel's
    /// end (`None`).
    fn launch_and_serve(
        &self,
        placed: &mut Placed,
        spec: &LaunchSpec,
        ready: Option<&mpsc::Sender<Result<(), Finding>>>,
        rx: &mpsc::Receiver<Command>,
    ) -> Option<Command> {
        self.live.set_served(Err(NOT_READY.into()));
        let report = |r: Result<(), Finding>| {
            if let Some(tx) = ready {
                let _ = tx.send(r);
            }
        };
        let failed = match placed.launch(spec, &self.events, &self.preflight, &self.cancel) {
            Some(LaunchOutcome::Ready { .. }) => None,
            Some(LaunchOutcome::Failed(f)) => Some(f),
            // `Placed::launch` has put the finding on the stream.
            None => Some(Finding::new(BACKEND_ERROR, Severity::Error, PhaseId::Preflight, "no engine for this --device / --tp-size")),
        };
        if let Some(f) = failed {
            report(Err(f));
            return rx.recv().ok();
        }
        let engine = placed.engine().expect("a ready launch has an engine");
        let mut next = None;
        let served = engine.serve_batch(SchedulerConfig::from_spec(spec, engine.gpu_memory()), &mut |batch| {
            let cfg = batch.config();
            let max_queued = self.config.max_queued.unwrap_or(cfg.max_running * QUEUE_PER_PLACE);
            let served = Served { tokenizer: batch.tokenizer(), context: batch.context(), max_queued, model_name: model_name(spec) };
            self.live.set_served(Ok(served));
            report(Ok(()));
            next = Serving::new(batch, self).run(rx);
            self.live.set_served(Err(NOT_READY.into()));
        });
        match served {
            Ok(()) => next,
            Err(e) => {
                let why = format!("the launch is ready but cannot be served: {e}");
                self.events.log(LogLevel::Error, "serving", why.clone());
                self.live.set_served(Err(why));
                report(Err(error_finding(Side::Target, PhaseId::Ready, &e)));
                rx.recv().ok()
            }
        }
    }
}

/// One request as the serving thread follows it.
struct Request {
    id: RequestId,
    events: UnboundedSender<ServeEvent>,
    stream: TextStream,
    /// The output's ids and text so far; `cut` once a stop string ended the text.
    ids: Vec<u32>,
    text: String,
    cut: bool,
    stop: Vec<String>,
    prompt_tokens: usize,
    completion_tokens: usize,
    accept: (usize, usize),
    submitted: Instant,
    started: bool,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
}

/// What one scheduler step gave, for the recent-steps figures.
#[derive(Clone, Copy, Debug)]
struct StepTally {
    at: Instant,
    /// Output tokens.
    tokens: usize,
    /// Tokens the step's verifies committed, and their number.
    accepted: usize,
    verifies: usize,
}

impl StepTally {
    fn of(at: Instant, updates: &[SeqUpdate]) -> StepTally {
        let accepts = updates.iter().filter_map(|u| u.accept_length);
        StepTally { at, tokens: updates.iter().map(|u| u.tokens.len()).sum(), accepted: accepts.clone().sum(), verifies: accepts.count() }
    }

    /// Committed tokens per verify over the steps: a step of many sequences weighs as many
    /// verifies, not as one mean.
    fn accept_length<'t>(steps: impl IntoIterator<Item = &'t StepTally>) -> f64 {
        let (accepted, verifies) = steps.into_iter().fold((0, 0), |(a, v), s| (a + s.accepted, v + s.verifies));
        if verifies == 0 {
            0.0
        } else {
            accepted as f64 / verifies as f64
        }
    }
}

struct Serving<'a> {
    batch: &'a mut dyn Batch,
    worker: &'a Worker,
    /// By the scheduler's id.
    requests: HashMap<u64, Request>,
    recent: VecDeque<StepTally>,
    /// Seconds spent on the steps' updates.
    publish_s: f64,
}

impl<'a> Serving<'a> {
    fn new(batch: &'a mut dyn Batch, worker: &'a Worker) -> Serving<'a> {
        Serving { batch, worker, requests: HashMap::new(), recent: VecDeque::new(), publish_s: 0.0 }
    }

    /// Wait for a command when there is nothing to run, else take the ones there are and
    /// step. A relaunch ends the serving (what runs is cancelled) and is returned; a closed
    /// channel (shutdown, or every handle gone) cancels what runs and returns `None`.
    fn run(mut self, commands: &mpsc::Receiver<Command>) -> Option<Command> {
        loop {
            if self.batch.is_idle() {
                match commands.recv() {
                    Ok(cmd) => {
                        if let Some(relaunch) = self.command(cmd) {
                            return self.end(Some(relaunch));
                        }
                    }
                    Err(_) => return self.end(None),
                }
            }
            loop {
                match commands.try_recv() {
                    Ok(cmd) => {
                        if let Some(relaunch) = self.command(cmd) {
                            return self.end(Some(relaunch));
                        }
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => return self.end(None),
                }
            }
            if self.batch.is_idle() {
                continue;
            }
            match self.batch.step() {
                Ok(updates) => {
                    let start = Instant::now();
                    self.updates(updates);
                    self.publish_s += start.elapsed().as_secs_f64();
                }
                Err(e) => {
                    self.worker.events.log(LogLevel::Error, "serving", format!("step: {e}"));
                    self.end_all(&FinishReason::Error(e.to_string()));
                }
            }
            self.publish();
        }
    }

    fn end(mut self, next: Option<Command>) -> Option<Command> {
        self.end_all(&FinishReason::Cancelled);
        self.publish();
        next
    }

    /// Take a command; a launch is handed back, for the caller to end serving with.
    fn command(&mut self, cmd: Command) -> Option<Command> {
        match cmd {
            Command::Submit { id, req, stop, events } => {
                let prompt_tokens = req.prompt.len();
                self.worker.live.pending.fetch_sub(1, Ordering::SeqCst);
                match self.batch.submit(req) {
                    Ok(sid) => {
                        let r = Request {
                            id,
                            events,
                            stream: TextStream::default(),
                            ids: Vec::new(),
                            text: String::new(),
                            cut: false,
                            stop,
                            prompt_tokens,
                            completion_tokens: 0,
                            accept: (0, 0),
                            submitted: Instant::now(),
                            started: false,
                            first_token: None,
                            last_token: None,
                        };
                        self.requests.insert(sid, r);
                    }
                    Err(e) => {
                        let reason = FinishReason::Error(e.to_string());
                        let _ = events.send(ServeEvent::Finished { reason, usage: Usage::default(), text: String::new() });
                    }
                }
            }
            Command::Cancel(id) => {
                if let Some(sid) = self.requests.iter().find(|(_, r)| r.id == id).map(|(sid, _)| *sid) {
                    self.finish(sid, FinishReason::Cancelled);
                }
            }
            launch @ Command::Launch { .. } => return Some(launch),
        }
        self.publish();
        None
    }

    fn updates(&mut self, updates: Vec<SeqUpdate>) {
        let now = Instant::now();
        let tally = StepTally::of(now, &updates);
        self.recent.push_back(tally);
        while self.recent.len() > RECENT_STEPS {
            self.recent.pop_front();
        }
        let mut st = self.worker.live.stats.lock().expect("stats lock");
        st.generation_tokens_total += tally.tokens as u64;
        st.spec_accepted_total += tally.accepted as u64;
        st.spec_verifies_total += tally.verifies as u64;
        drop(st);
        let tok = self.batch.tokenizer();
        for u in updates {
            let Some(r) = self.requests.get_mut(&u.id) else { continue };
            if !r.started {
                r.started = true;
                let queued_s = now.duration_since(r.submitted).as_secs_f64();
                self.worker.events.emit(Event::RequestStarted { id: r.id, prompt_tokens: r.prompt_tokens, queued_s });
                self.worker.live.stats.lock().expect("stats lock").prompt_tokens_total += r.prompt_tokens as u64;
                let _ = r.events.send(ServeEvent::Started { prompt_tokens: r.prompt_tokens });
            }
            if let Some(a) = u.accept_length {
                r.accept = (r.accept.0 + a, r.accept.1 + 1);
            }
            let mut reason = u.finished.map(|f| match f {
                Finish::Stop => FinishReason::Stop,
                Finish::Length => FinishReason::Length,
                Finish::Cancelled => FinishReason::Cancelled,
            });
            if !u.tokens.is_empty() {
                let mut latency = self.worker.live.latency.lock().expect("latency lock");
                match r.last_token {
                    None => latency.ttft_seconds.push(now.duration_since(r.submitted).as_secs_f64()),
                    Some(t) => latency.itl_seconds.push(now.duration_since(t).as_secs_f64() / u.tokens.len() as f64),
                }
                drop(latency);
                r.first_token.get_or_insert(now);
                r.last_token = Some(now);
                r.completion_tokens += u.tokens.len();
                r.ids.extend(&u.tokens);
                let (draft, own) = u.tokens.split_at(u.drafted.min(u.tokens.len()));
                for (ids, drafted) in [(draft, true), (own, false)] {
                    if ids.is_empty() || r.cut {
                        continue;
                    }
                    let mut piece = r.stream.push(&tok, ids).unwrap_or_default();
                    // A stop string ends the output before it, even across two steps' text:
                    // one that ends in the new piece starts at most its length before it.
                    let before = r.text.len();
                    r.text.push_str(&piece);
                    let mut from = before.saturating_sub(r.stop.iter().map(String::len).max().unwrap_or(0));
                    while !r.text.is_char_boundary(from) {
                        from -= 1;
                    }
                    if let Some(at) = r.stop.iter().filter_map(|s| r.text[from..].find(s.as_str()).map(|at| from + at)).min() {
                        piece = r.text[before.min(at)..at].to_string();
                        r.text.truncate(at);
                        r.cut = true;
                        reason = Some(FinishReason::Stop);
                    }
                    if r.events.send(ServeEvent::Tokens { ids: ids.to_vec(), text: piece, drafted }).is_err() {
                        // The client went away: its request ends here.
                        reason = Some(FinishReason::Cancelled);
                        break;
                    }
                }
            }
            if let Some(reason) = reason {
                self.finish(u.id, reason);
            }
        }
    }

    /// End a request: free it in the scheduler (when it still runs), send `Finished` and
    /// record it.
    fn finish(&mut self, sid: u64, reason: FinishReason) {
        self.batch.cancel(sid);
        // Counters first: a client that reads them after `Finished` sees its request gone.
        self.publish();
        let Some(mut r) = self.requests.remove(&sid) else { return };
        let mean_accept_length = if r.accept.1 == 0 { 0.0 } else { r.accept.0 as f64 / r.accept.1 as f64 };
        let usage = Usage { prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens, mean_accept_length };
        // Decoded whole, with what the pieces held back, unless a stop string cut it.
        if !r.cut {
            r.text = self.batch.tokenizer().decode(&r.ids).unwrap_or(r.text);
        }
        let ttft_s = r.first_token.map(|t| t.duration_since(r.submitted).as_secs_f64());
        let itl_s = match (r.first_token, r.last_token) {
            (Some(first), Some(last)) if r.completion_tokens > 1 => {
                Some(last.duration_since(first).as_secs_f64() / (r.completion_tokens - 1) as f64)
            }
            _ => None,
        };
        let error = match &reason {
            FinishReason::Error(e) => Some(e.clone()),
            _ => None,
        };
        let logged = self.worker.config.log_requests.then(|| r.text.clone());
        self.worker.events.emit(Event::RequestFinished {
            id: r.id,
            completion_tokens: r.completion_tokens,
            finish_reason: reason.name().into(),
            ttft_s,
            itl_s,
            mean_accept_length,
            error,
            text: logged,
        });
        let _ = r.events.send(ServeEvent::Finished { reason, usage, text: r.text });
    }

    fn end_all(&mut self, reason: &FinishReason) {
        for sid in self.requests.keys().copied().collect::<Vec<_>>() {
            self.finish(sid, reason.clone());
        }
    }

    fn publish(&self) {
        let mut st = self.worker.live.stats.lock().expect("stats lock");
        let status = self.batch.status();
        (st.running, st.queued) = (status.running, status.queued);
        (st.kv_blocks_free, st.kv_blocks_total) = (status.kv_blocks_free, status.kv_blocks_total);
        st.step_times = StepTimes { publish_s: self.publish_s, ..status.times };
        st.spec_accept_length = StepTally::accept_length(&self.recent);
        st.gen_throughput = match (self.recent.front(), self.recent.back()) {
            (Some(first), Some(last)) if last.at > first.at => {
                self.recent.iter().skip(1).map(|r| r.tokens).sum::<usize>() as f64 / last.at.duration_since(first.at).as_secs_f64()
            }
            _ => 0.0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::llama::Family;
    use crate::event::EventReceiver;
    use crate::spec::{Algorithm, Device};
    use crate::testkit::{TinyEagle3, TinyLlama};

    fn collect(rx: &mut UnboundedReceiver<ServeEvent>) -> (Vec<u32>, FinishReason, Usage) {
        let mut ids = Vec::new();
        loop {
            match rx.blocking_recv().expect("a request ends with Finished") {
                ServeEvent::Started { .. } => {}
                ServeEvent::Tokens { ids: t, .. } => ids.extend(t),
                ServeEvent::Finished { reason, usage, .. } => return (ids, reason, usage),
            }
        }
    }

    fn pair(dir: &std::path::Path) -> LaunchSpec {
        let (target, draft) = (dir.join("target"), dir.join("draft"));
        let t = TinyLlama::new(Family::Llama, 7);
        let w = t.write(&target).unwrap();
        TinyEagle3::new(8).write(&draft, &t, &w).unwrap();
        LaunchSpec {
            model_path: Some(target.display().to_string()),
            draft_model_path: Some(draft.display().to_string()),
            speculative_algorithm: Some(Algorithm::Eagle3),
            device: Device::Cpu,
            ..LaunchSpec::default()
        }
    }

    fn request(max_tokens: usize) -> ServeRequest {
        ServeRequest {
            prompt: Prompt::Ids(vec![5, 9, 17, 33]),
            max_tokens,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: true,
            endpoint: "test",
        }
    }

    /// The events of the stream so far, by their JSON `type`.
    fn kinds(events: &mut EventReceiver) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(ev) = events.try_recv() {
            out.push(serde_json::to_value(&ev.event).unwrap()["type"].as_str().unwrap().to_string());
        }
        out
    }

    #[test]
    fn requests_through_the_handle_stream_their_tokens_finish_and_are_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let (sink, mut events) = EventSink::channel();
        let h = ServeHandle::start(&pair(dir.path()), sink, Arc::new(|_: &LaunchSpec| Vec::new()), ServeConfig::default()).unwrap();
        assert_eq!((h.context_length(), h.model_name().as_deref()), (Some(512), Some("target")));
        let (a, mut ra) = h.submit(request(8)).unwrap();
        let (b, mut rb) = h.submit(request(8)).unwrap();
        assert_ne!(a, b);
        let (ta, reason, usage) = collect(&mut ra);
        assert_eq!((ta.len(), reason), (8, FinishReason::Length));
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (4, 8));
        assert_eq!(collect(&mut rb).0, ta);
        assert_eq!(h.submit(request(600)).unwrap_err(), SubmitError::TooLong { prompt_tokens: 4, max_tokens: 600, context: 512 });
        let stats = h.stats();
        assert_eq!((stats.running, stats.queued, stats.prompt_tokens_total, stats.generation_tokens_total), (0, 0, 8, 16));
        assert_eq!(stats.kv_blocks_free, stats.kv_blocks_total);
        assert_eq!(h.take_latency_samples().ttft_seconds.len(), 2);
        h.shutdown();
        assert_eq!(h.submit(request(8)).unwrap_err(), SubmitError::Stopped);
        let requests: Vec<String> = kinds(&mut events).into_iter().filter(|k| k.starts_with("request") || k == "exit").collect();
        // The two requests: both queued, started and finished, in that order for each (the
        // scheduler may take the first in before the second is queued), then the refused one
        // under its own id, then the engine's exit.
        let (both, rest) = requests.split_at(requests.len().min(6));
        let mut kinds_of_both = both.to_vec();
        kinds_of_both.sort();
        assert_eq!(
            kinds_of_both,
            ["request-finished", "request-finished", "request-queued", "request-queued", "request-started", "request-started"]
        );
        assert_eq!(
            (both[0].as_str(), &both[4..]),
            ("request-queued", &["request-finished".to_string(), "request-finished".to_string()][..])
        );
        assert_eq!(rest, ["request-queued", "request-finished", "exit"]);
    }

    #[test]
    fn a_relaunch_keeps_the_target_cancels_what_runs_and_serves_again() {
        let dir = tempfile::tempdir().unwrap();
        let spec = pair(dir.path());
        let (sink, mut events) = EventSink::channel();
        let h = ServeHandle::start(&spec, sink, Arc::new(|_: &LaunchSpec| Vec::new()), ServeConfig::default()).unwrap();
        let (_, mut first) = h.submit(request(8)).unwrap();
        let want = collect(&mut first).0;
        let (_, mut long) = h.submit(request(400)).unwrap();
        h.launch(LaunchSpec { speculative_num_steps: Some(2), ..spec });
        assert_eq!(collect(&mut long).1, FinishReason::Cancelled);
        let t0 = Instant::now();
        let answer = loop {
            match h.submit(request(8)) {
                Ok((_, mut rx)) => break collect(&mut rx),
                Err(SubmitError::NotServing(_)) => assert!(t0.elapsed().as_secs() < 60, "not serving again"),
                Err(e) => panic!("{e}"),
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        // Greedy decoding: the same tokens with fewer draft steps.
        assert_eq!(answer.0, want);
        let ready: Vec<bool> = std::iter::from_fn(|| events.try_recv().ok())
            .filter_map(|ev| match ev.event {
                Event::Ready { reused_target, .. } => Some(reused_target),
                _ => None,
            })
            .collect();
        assert_eq!(ready, [false, true]);
    }

    /// A drafter that is the target itself has every draft token accepted: each step's
    /// tokens arrive as its drafted ones, then the target's own single token.
    #[test]
    fn accepted_draft_tokens_arrive_marked_apart_from_the_targets_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = pair(dir.path());
        spec.draft_model_path = spec.model_path.clone();
        spec.speculative_algorithm = Some(Algorithm::Standalone);
        spec.speculative_num_steps = Some(3);
        let h = ServeHandle::start(&spec, EventSink::channel().0, Arc::new(|_: &LaunchSpec| Vec::new()), ServeConfig::default()).unwrap();
        let (_, mut rx) = h.submit(request(17)).unwrap();
        let mut parts = Vec::new();
        loop {
            match rx.blocking_recv().unwrap() {
                ServeEvent::Started { .. } => {}
                ServeEvent::Tokens { ids, drafted, .. } => parts.push((ids.len(), drafted)),
                ServeEvent::Finished { usage, .. } => {
                    assert_eq!(usage.completion_tokens, 17);
                    break;
                }
            }
        }
        // Four steps of 3 drafted + 1 own token, then the first drafted token of a fifth
        // (max_tokens cuts it there).
        let step = [(3, true), (1, false)];
        assert_eq!(parts, [&step[..], &step, &step, &step, &[(1, true)]].concat());
    }

    /// A step of two sequences that accepted 1 and 2 tokens, then one of a sequence that
    /// accepted 4: 7 tokens over 3 verifies, not the mean of the steps' means.
    #[test]
    fn the_accept_length_weighs_every_verify_of_a_batched_step() {
        let update =
            |accept: usize| SeqUpdate { id: 0, tokens: vec![1; accept], drafted: accept - 1, accept_length: Some(accept), finished: None };
        let prefill = SeqUpdate { accept_length: None, tokens: Vec::new(), ..update(1) };
        let now = Instant::now();
        let steps = [StepTally::of(now, &[update(1), update(2), prefill]), StepTally::of(now, &[update(4)])];
        assert_eq!((steps[0].tokens, steps[0].accepted, steps[0].verifies), (3, 3, 2));
        assert_eq!(StepTally::accept_length(&steps), 7.0 / 3.0);
        assert_eq!(StepTally::accept_length(&[]), 0.0);
    }

    #[test]
    fn a_stop_string_ends_the_text_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let h =
            ServeHandle::start(&pair(dir.path()), EventSink::channel().0, Arc::new(|_: &LaunchSpec| Vec::new()), ServeConfig::default())
                .unwrap();
        let whole = |stop: Vec<String>| {
            let (_, mut rx) = h.submit(ServeRequest { stop, ..request(8) }).unwrap();
            loop {
                if let ServeEvent::Finished { reason, text, .. } = rx.blocking_recv().unwrap() {
                    return (text, reason);
                }
            }
        };
        let (text, reason) = whole(Vec::new());
        assert_eq!(reason, FinishReason::Length);
        let words: Vec<&str> = text.split_whitespace().collect();
        assert!(words.len() >= 3, "{text:?}");
        let (cut, reason) = whole(vec![words[2].to_string()]);
        assert_eq!(reason, FinishReason::Stop);
        assert_eq!(cut, &text[..text.find(words[2]).unwrap()]);
    }
}
