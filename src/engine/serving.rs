//! The engine as a server calls it (/work/wt/serving-api.md has the contract): a launch,
//! then the scheduler (`engine::scheduler`) on its own OS thread, driven through a cloneable
//! `ServeHandle`. Each request gets its own stream of `ServeEvent`s; stop strings, text and
//! the live counters are kept here, so the scheduler deals in token ids only.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::engine::findings::{error_finding, BACKEND_ERROR};
use crate::engine::ranks::engine_for;
use crate::engine::request::{Cancel, LaunchOutcome, PreflightFn};
pub use crate::engine::sampling::SamplingParams;
use crate::engine::scheduler::{Batch, Finish, SchedulerConfig, SeqRequest, SeqUpdate};
use crate::event::{EventSink, LogLevel};
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

#[derive(Clone, Debug, PartialEq)]
pub struct ServeRequest {
    pub prompt: Prompt,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Text that ends the output (not included).
    pub stop: Vec<String>,
    pub ignore_eos: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum FinishReason {
    Stop,
    Length,
    Cancelled,
    Error(String),
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub mean_accept_length: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ServeEvent {
    Tokens {
        ids: Vec<u32>,
        text: String,
    },
    /// Always the last event of a request.
    Finished {
        reason: FinishReason,
        usage: Usage,
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
    #[error("the server is shutting down")]
    Stopped,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServeStats {
    pub running: usize,
    pub queued: usize,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    /// Mean tokens per verify step over the last `RECENT_STEPS` (1.0 target-only).
    pub spec_accept_length: f64,
    /// Output tokens per second over the last `RECENT_STEPS` steps.
    pub gen_throughput: f64,
    pub kv_blocks_total: usize,
    pub kv_blocks_free: usize,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatencySamples {
    pub ttft_seconds: Vec<f64>,
    pub itl_seconds: Vec<f64>,
}

/// Waiting requests per running place before `submit` answers `QueueFull`.
const QUEUE_PER_PLACE: usize = 4;
const RECENT_STEPS: usize = 64;

enum Command {
    Submit { id: RequestId, req: SeqRequest, stop: Vec<String>, events: UnboundedSender<ServeEvent> },
    Cancel(RequestId),
}

/// What the serving thread updates and the handle reads.
#[derive(Default)]
struct Live {
    stats: Mutex<ServeStats>,
    latency: Mutex<LatencySamples>,
}

struct Shared {
    commands: Mutex<Option<mpsc::Sender<Command>>>,
    tokenizer: Arc<TextTokenizer>,
    context: usize,
    max_queue: usize,
    model_name: String,
    next_id: AtomicU64,
    stopped: AtomicBool,
    live: Arc<Live>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    /// Close the command channel (the thread cancels what runs and ends) and wait for it.
    fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.commands.lock().expect("commands lock").take();
        if let Some(t) = self.thread.lock().expect("thread lock").take() {
            let _ = t.join();
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Send + Sync and cloneable; the scheduler stops when `shutdown` is called or the last
/// clone is dropped.
#[derive(Clone)]
pub struct ServeHandle {
    shared: Arc<Shared>,
}

type Ready = Result<(Arc<TextTokenizer>, usize, SchedulerConfig), Finding>;

impl ServeHandle {
    /// Launch `spec` (its phases as events on `events`) and start serving; blocks until the
    /// launch is ready, or returns the finding that stopped it.
    pub fn start(spec: &LaunchSpec, events: EventSink, preflight: PreflightFn) -> Result<ServeHandle, Finding> {
        let (ready_tx, ready_rx) = mpsc::channel::<Ready>();
        let (cmd_tx, cmd_rx) = mpsc::channel();
        let live = Arc::new(Live::default());
        let (thread_spec, thread_live) = (spec.clone(), live.clone());
        let thread = std::thread::Builder::new()
            .name("specdeck-serve".into())
            .spawn(move || match launch(&thread_spec, &events, &preflight) {
                Ok(batch) => {
                    let _ = ready_tx.send(Ok((batch.tokenizer(), batch.context(), batch.config())));
                    Serving { batch, events, live: thread_live, requests: HashMap::new(), recent: VecDeque::new() }.run(cmd_rx);
                }
                Err(f) => {
                    let _ = ready_tx.send(Err(f));
                }
            })
            .expect("the OS can start the serving thread");
        let ready = ready_rx.recv().unwrap_or_else(|_| {
            Err(Finding::new(BACKEND_ERROR, Severity::Error, PhaseId::Ready, "the serving thread ended during the launch"))
        });
        let (tokenizer, context, cfg) = match ready {
            Ok(r) => r,
            Err(f) => {
                let _ = thread.join();
                return Err(f);
            }
        };
        let model_name = spec
            .model_path
            .as_deref()
            .and_then(|p| std::path::Path::new(p).file_name())
            .map_or_else(|| "model".to_string(), |n| n.to_string_lossy().into_owned());
        Ok(ServeHandle {
            shared: Arc::new(Shared {
                commands: Mutex::new(Some(cmd_tx)),
                tokenizer,
                context,
                max_queue: cfg.max_running * QUEUE_PER_PLACE,
                model_name,
                next_id: AtomicU64::new(1),
                stopped: AtomicBool::new(false),
                live,
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// Tokenize, check and queue a request; its events arrive on the receiver.
    pub fn submit(&self, req: ServeRequest) -> Result<(RequestId, UnboundedReceiver<ServeEvent>), SubmitError> {
        let s = &self.shared;
        if s.stopped.load(Ordering::Relaxed) {
            return Err(SubmitError::Stopped);
        }
        let tok = &s.tokenizer;
        let invalid = |e: crate::model::tokenizer::TokenizerError| SubmitError::Invalid(e.to_string());
        let prompt = match req.prompt {
            Prompt::Ids(ids) => ids,
            Prompt::Text { text, chat: false } => tok.encode(&text, true).map_err(invalid)?,
            Prompt::Text { text, chat: true } => tok.encode(&tok.chat_prompt(&text).map_err(invalid)?, false).map_err(invalid)?,
            Prompt::Messages(m) => tok.encode(&tok.chat_messages(&m).map_err(invalid)?, false).map_err(invalid)?,
        };
        if prompt.is_empty() {
            return Err(SubmitError::Invalid("the prompt has no tokens".into()));
        }
        crate::engine::sampling::check(&req.sampling).map_err(SubmitError::Invalid)?;
        if prompt.len().saturating_add(req.max_tokens) > s.context {
            return Err(SubmitError::TooLong { prompt_tokens: prompt.len(), max_tokens: req.max_tokens, context: s.context });
        }
        let queued = s.live.stats.lock().expect("stats lock").queued;
        if queued >= s.max_queue {
            return Err(SubmitError::QueueFull { queued });
        }
        let id = s.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = unbounded_channel();
        let seq = SeqRequest { prompt, max_tokens: req.max_tokens, sampling: req.sampling, ignore_eos: req.ignore_eos };
        self.send(Command::Submit { id, req: seq, stop: req.stop, events: tx })?;
        Ok((id, rx))
    }

    /// Cancel a queued or running request (it ends with `Cancelled`, its blocks freed).
    pub fn cancel(&self, id: RequestId) {
        let _ = self.send(Command::Cancel(id));
    }

    pub fn stats(&self) -> ServeStats {
        self.shared.live.stats.lock().expect("stats lock").clone()
    }

    /// TTFT and ITL samples since the previous call.
    pub fn take_latency_samples(&self) -> LatencySamples {
        std::mem::take(&mut *self.shared.live.latency.lock().expect("latency lock"))
    }

    pub fn context_length(&self) -> usize {
        self.shared.context
    }

    pub fn model_name(&self) -> String {
        self.shared.model_name.clone()
    }

    /// Stop accepting, cancel everything in flight, free and join the serving thread.
    pub fn shutdown(&self) {
        self.shared.stop();
    }

    fn send(&self, cmd: Command) -> Result<(), SubmitError> {
        let commands = self.shared.commands.lock().expect("commands lock");
        commands.as_ref().ok_or(SubmitError::Stopped)?.send(cmd).map_err(|_| SubmitError::Stopped)
    }
}

fn launch(spec: &LaunchSpec, events: &EventSink, preflight: &PreflightFn) -> Result<Box<dyn Batch>, Finding> {
    let mut engine = engine_for(spec, events, &Cancel::default())?;
    if let LaunchOutcome::Failed(f) = engine.launch(spec, preflight) {
        return Err(f);
    }
    engine.into_batch(SchedulerConfig::from_spec(spec)).map_err(|e| error_finding(Side::Target, PhaseId::Ready, &e))
}

/// One request as the serving thread follows it.
struct Request {
    id: RequestId,
    events: UnboundedSender<ServeEvent>,
    stream: TextStream,
    text: String,
    stop: Vec<String>,
    prompt_tokens: usize,
    completion_tokens: usize,
    accept: (usize, usize),
    submitted: Instant,
    last_token: Option<Instant>,
}

struct Serving {
    batch: Box<dyn Batch>,
    events: EventSink,
    live: Arc<Live>,
    /// By the scheduler's id.
    requests: HashMap<u64, Request>,
    /// (time, output tokens, accept length) of recent steps.
    recent: VecDeque<(Instant, usize, Option<usize>)>,
}

impl Serving {
    /// Wait for a command when there is nothing to run, else take the ones there are and
    /// step; a closed channel (shutdown, or every handle gone) cancels what runs and ends.
    fn run(mut self, commands: mpsc::Receiver<Command>) {
        loop {
            if self.batch.is_idle() {
                match commands.recv() {
                    Ok(cmd) => self.command(cmd),
                    Err(_) => return,
                }
            }
            loop {
                match commands.try_recv() {
                    Ok(cmd) => self.command(cmd),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        self.cancel_all();
                        self.publish();
                        return;
                    }
                }
            }
            if self.batch.is_idle() {
                continue;
            }
            match self.batch.step() {
                Ok(updates) => self.updates(updates),
                Err(e) => {
                    self.events.log(LogLevel::Error, "serving", format!("step: {e}"));
                    self.fail_all(&e.to_string());
                }
            }
            self.publish();
        }
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Submit { id, req, stop, events } => {
                let prompt_tokens = req.prompt.len();
                match self.batch.submit(req) {
                    Ok(sid) => {
                        let r = Request {
                            id,
                            events,
                            stream: TextStream::default(),
                            text: String::new(),
                            stop,
                            prompt_tokens,
                            completion_tokens: 0,
                            accept: (0, 0),
                            submitted: Instant::now(),
                            last_token: None,
                        };
                        self.requests.insert(sid, r);
                        self.live.stats.lock().expect("stats lock").prompt_tokens_total += prompt_tokens as u64;
                    }
                    Err(e) => {
                        let _ = events.send(ServeEvent::Finished { reason: FinishReason::Error(e.to_string()), usage: Usage::default() });
                    }
                }
            }
            Command::Cancel(id) => {
                if let Some(sid) = self.requests.iter().find(|(_, r)| r.id == id).map(|(sid, _)| *sid) {
                    self.finish(sid, FinishReason::Cancelled);
                }
            }
        }
        self.publish();
    }

    fn updates(&mut self, updates: Vec<SeqUpdate>) {
        let now = Instant::now();
        let tokens: usize = updates.iter().map(|u| u.tokens.len()).sum();
        let accept = updates.iter().filter_map(|u| u.accept_length).collect::<Vec<_>>();
        self.recent.push_back((now, tokens, (!accept.is_empty()).then(|| accept.iter().sum::<usize>() / accept.len())));
        while self.recent.len() > RECENT_STEPS {
            self.recent.pop_front();
        }
        self.live.stats.lock().expect("stats lock").generation_tokens_total += tokens as u64;
        for u in updates {
            let tok = self.batch.tokenizer();
            let Some(r) = self.requests.get_mut(&u.id) else { continue };
            if let Some(a) = u.accept_length {
                r.accept = (r.accept.0 + a, r.accept.1 + 1);
            }
            let mut reason = u.finished.map(|f| match f {
                Finish::Stop => FinishReason::Stop,
                Finish::Length => FinishReason::Length,
                Finish::Cancelled => FinishReason::Cancelled,
            });
            if !u.tokens.is_empty() {
                let mut latency = self.live.latency.lock().expect("latency lock");
                match r.last_token {
                    None => latency.ttft_seconds.push(now.duration_since(r.submitted).as_secs_f64()),
                    Some(t) => latency.itl_seconds.push(now.duration_since(t).as_secs_f64() / u.tokens.len() as f64),
                }
                drop(latency);
                r.last_token = Some(now);
                r.completion_tokens += u.tokens.len();
                let mut piece = r.stream.push(&tok, &u.tokens).unwrap_or_default();
                // A stop string ends the output before it, even across two steps' text.
                let before = r.text.len();
                r.text.push_str(&piece);
                if let Some(at) = r.stop.iter().filter_map(|s| r.text.find(s.as_str())).min() {
                    piece = r.text[before.min(at)..at].to_string();
                    reason = Some(FinishReason::Stop);
                }
                if r.events.send(ServeEvent::Tokens { ids: u.tokens, text: piece }).is_err() {
                    // The client went away: its request ends here.
                    reason = Some(FinishReason::Cancelled);
                }
            }
            if let Some(reason) = reason {
                self.finish(u.id, reason);
            }
        }
    }

    /// End a request: free it in the scheduler (when it still runs) and send `Finished`.
    fn finish(&mut self, sid: u64, reason: FinishReason) {
        self.batch.cancel(sid);
        // Counters first: a client that reads them after `Finished` sees its request gone.
        self.publish();
        if let Some(r) = self.requests.remove(&sid) {
            let mean_accept_length = if r.accept.1 == 0 { 0.0 } else { r.accept.0 as f64 / r.accept.1 as f64 };
            let usage = Usage { prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens, mean_accept_length };
            let _ = r.events.send(ServeEvent::Finished { reason, usage });
        }
    }

    fn cancel_all(&mut self) {
        for sid in self.requests.keys().copied().collect::<Vec<_>>() {
            self.finish(sid, FinishReason::Cancelled);
        }
    }

    fn fail_all(&mut self, why: &str) {
        for sid in self.requests.keys().copied().collect::<Vec<_>>() {
            self.finish(sid, FinishReason::Error(why.to_string()));
        }
    }

    fn publish(&self) {
        let mut st = self.live.stats.lock().expect("stats lock");
        st.running = self.batch.running();
        st.queued = self.batch.queued();
        (st.kv_blocks_free, st.kv_blocks_total) = self.batch.blocks();
        let accepts: Vec<usize> = self.recent.iter().filter_map(|r| r.2).collect();
        st.spec_accept_length = if accepts.is_empty() { 0.0 } else { accepts.iter().sum::<usize>() as f64 / accepts.len() as f64 };
        st.gen_throughput = match (self.recent.front(), self.recent.back()) {
            (Some(first), Some(last)) if last.0 > first.0 => {
                self.recent.iter().skip(1).map(|r| r.1).sum::<usize>() as f64 / last.0.duration_since(first.0).as_secs_f64()
            }
            _ => 0.0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::llama::Family;
    use crate::spec::{Algorithm, Device};
    use crate::testkit::{TinyEagle3, TinyLlama};

    fn collect(rx: &mut UnboundedReceiver<ServeEvent>) -> (Vec<u32>, FinishReason, Usage) {
        let mut ids = Vec::new();
        loop {
            match rx.blocking_recv().expect("a request ends with Finished") {
                ServeEvent::Tokens { ids: t, .. } => ids.extend(t),
                ServeEvent::Finished { reason, usage } => return (ids, reason, usage),
            }
        }
    }

    #[test]
    fn requests_through_the_handle_stream_their_tokens_and_finish() {
        let dir = tempfile::tempdir().unwrap();
        let (target, draft) = (dir.path().join("target"), dir.path().join("draft"));
        let t = TinyLlama::new(Family::Llama, 7);
        let w = t.write(&target).unwrap();
        TinyEagle3::new(8).write(&draft, &t, &w).unwrap();
        let spec = LaunchSpec {
            model_path: Some(target.display().to_string()),
            draft_model_path: Some(draft.display().to_string()),
            speculative_algorithm: Some(Algorithm::Eagle3),
            device: Device::Cpu,
            ..LaunchSpec::default()
        };
        let (sink, _events) = EventSink::channel();
        let h = ServeHandle::start(&spec, sink, Arc::new(|_: &LaunchSpec| Vec::new())).unwrap();
        assert_eq!((h.context_length(), h.model_name().as_str()), (512, "target"));
        let req = |max_tokens| ServeRequest {
            prompt: Prompt::Ids(vec![5, 9, 17, 33]),
            max_tokens,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: true,
        };
        let (a, mut ra) = h.submit(req(8)).unwrap();
        let (b, mut rb) = h.submit(req(8)).unwrap();
        assert_ne!(a, b);
        let (ta, reason, usage) = collect(&mut ra);
        assert_eq!((ta.len(), reason), (8, FinishReason::Length));
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (4, 8));
        assert_eq!(collect(&mut rb).0, ta);
        assert_eq!(h.submit(req(600)).unwrap_err(), SubmitError::TooLong { prompt_tokens: 4, max_tokens: 600, context: 512 });
        let stats = h.stats();
        assert_eq!((stats.running, stats.queued, stats.prompt_tokens_total, stats.generation_tokens_total), (0, 0, 8, 16));
        assert_eq!(stats.kv_blocks_free, stats.kv_blocks_total);
        assert_eq!(h.take_latency_samples().ttft_seconds.len(), 2);
        h.shutdown();
        assert_eq!(h.submit(req(8)).unwrap_err(), SubmitError::Stopped);
    }
}
