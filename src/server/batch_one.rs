//! `Generator` on today's engine: one worker thread owns the engine and serves queued
//! requests one at a time, in order, from a bounded queue. The engine reports tokens only as
//! events, so it gets a stream of its own; the worker marks each request's start and end on
//! that stream (`RequestStarted`, `RequestFinished`), and a router thread reading it sends
//! the tokens between the two marks to their request, times them for `/metrics`, and passes
//! every other event on to the session's stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

use super::generator::{Done, Endpoint, Generator, Load, Refusal, Reply, Submission};
use super::metrics::Metrics;
use crate::engine::handle::Placed;
use crate::engine::request::{Cancel, GenerateRequest, LaunchOutcome, PreflightFn};
use crate::engine::EngineError;
use crate::event::{Event, EventReceiver, EventSink};
use crate::model::tokenizer::TokenizerError;
use crate::spec::LaunchSpec;

type Routes = Arc<Mutex<HashMap<u64, UnboundedSender<Reply>>>>;

enum Command {
    Launch(Box<LaunchSpec>),
    Run(Queued),
    Shutdown,
}

struct Queued {
    id: u64,
    request: GenerateRequest,
    cancel: Cancel,
    at: Instant,
}

#[derive(Default)]
struct Counters {
    queued: AtomicUsize,
    running: AtomicUsize,
    ready: AtomicBool,
}

pub struct BatchOne {
    commands: mpsc::Sender<Command>,
    counters: Arc<Counters>,
    routes: Routes,
    next_id: AtomicU64,
    accepting: AtomicBool,
    max_queued: usize,
    log_requests: bool,
    /// Set at shutdown: the running request stops at its next step.
    engine_cancel: Cancel,
    events: EventSink,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl BatchOne {
    /// The worker and its router; the engine is made at the first `launch`. Events other
    /// than a served request's tokens go to `events`.
    pub fn start(events: EventSink, preflight: PreflightFn, metrics: Arc<Metrics>, max_queued: usize, log_requests: bool) -> BatchOne {
        let (commands, rx) = mpsc::channel();
        let (engine_sink, engine_events) = EventSink::channel();
        let counters = Arc::new(Counters::default());
        let routes = Routes::default();
        let engine_cancel = Cancel::default();
        let router = {
            let (routes, main) = (routes.clone(), events.clone());
            std::thread::Builder::new()
                .name("specdeck-server-router".into())
                .spawn(move || route(engine_events, routes, main, &metrics, log_requests))
                .expect("the OS can start the router thread")
        };
        let worker = {
            let (counters, routes, cancel) = (counters.clone(), routes.clone(), engine_cancel.clone());
            let main = events.clone();
            std::thread::Builder::new()
                .name("specdeck-server-engine".into())
                .spawn(move || work(rx, Worker { events: engine_sink, main, preflight, cancel, counters, routes }))
                .expect("the OS can start the engine thread")
        };
        BatchOne {
            commands,
            counters,
            routes,
            next_id: AtomicU64::new(1),
            accepting: AtomicBool::new(true),
            max_queued,
            log_requests,
            engine_cancel,
            events,
            threads: Mutex::new(vec![worker, router]),
        }
    }

    pub fn launch(&self, spec: LaunchSpec) {
        let _ = self.commands.send(Command::Launch(Box::new(spec)));
    }

    /// Take no more requests, cancel the running one and every queued one, and free the
    /// engine; the engine's `Exit` follows on the stream. Does not wait.
    pub fn shutdown(&self) {
        self.accepting.store(false, Ordering::SeqCst);
        self.engine_cancel.set();
        let _ = self.commands.send(Command::Shutdown);
    }
}

impl Drop for BatchOne {
    /// The worker answers what is still queued and ends once no sender is left.
    fn drop(&mut self) {
        self.shutdown();
        drop(std::mem::replace(&mut self.commands, mpsc::channel().0));
        for t in self.threads.lock().expect("threads lock").drain(..) {
            let _ = t.join();
        }
    }
}

impl Generator for BatchOne {
    fn submit(&self, endpoint: Endpoint, request: GenerateRequest) -> Result<Submission, Refusal> {
        if !self.accepting.load(Ordering::SeqCst) {
            return Err(Refusal::Unavailable("the server is shutting down".into()));
        }
        let queued = self.counters.queued.fetch_add(1, Ordering::SeqCst);
        if queued >= self.max_queued {
            self.counters.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(Refusal::Unavailable(format!("the queue is full ({} requests wait)", self.max_queued)));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = unbounded_channel();
        // The prompt box's tokens go on to the session's stream, as without a server.
        if endpoint != Endpoint::Console {
            self.routes.lock().expect("routes lock").insert(id, tx);
        }
        let prompt = self.log_requests.then(|| request.prompt.clone());
        self.events.emit(Event::RequestQueued { id, endpoint: endpoint.name().into(), max_tokens: request.max_new_tokens, prompt });
        let cancel = Cancel::default();
        let job = Queued { id, request, cancel: cancel.clone(), at: Instant::now() };
        if self.commands.send(Command::Run(job)).is_err() {
            self.routes.lock().expect("routes lock").remove(&id);
            return Err(Refusal::Unavailable("the engine has stopped".into()));
        }
        Ok(Submission::new(id, rx, move || cancel.set()))
    }

    fn load(&self) -> Load {
        Load { running: self.counters.running.load(Ordering::SeqCst), queued: self.counters.queued.load(Ordering::SeqCst) }
    }

    fn ready(&self) -> bool {
        self.accepting.load(Ordering::SeqCst) && self.counters.ready.load(Ordering::SeqCst)
    }
}

struct Worker {
    /// The engine's own stream, read by the router.
    events: EventSink,
    main: EventSink,
    preflight: PreflightFn,
    cancel: Cancel,
    counters: Arc<Counters>,
    routes: Routes,
}

fn work(rx: mpsc::Receiver<Command>, w: Worker) {
    let mut engine = Placed::default();
    let mut ready = false;
    let mut stopping = false;
    // Requests sent after the shutdown are still answered, not lost: the loop goes on until
    // the last sender (the server's) is gone.
    for command in rx.iter() {
        match command {
            Command::Launch(spec) => {
                w.counters.ready.store(false, Ordering::SeqCst);
                ready = matches!(engine.launch(&spec, &w.events, &w.preflight, &w.cancel), Some(LaunchOutcome::Ready { .. }));
                w.counters.ready.store(ready && !stopping, Ordering::SeqCst);
            }
            Command::Run(job) => {
                w.counters.queued.fetch_sub(1, Ordering::SeqCst);
                let unavailable = match (stopping, ready) {
                    (true, _) => Some("the server is shutting down"),
                    (false, false) => Some("the engine is not ready"),
                    (false, true) if job.cancel.is_set() => Some("cancelled while queued"),
                    _ => None,
                };
                match (unavailable, engine.engine()) {
                    (None, Some(e)) => {
                        w.counters.running.store(1, Ordering::SeqCst);
                        w.serve(e, &job);
                        w.counters.running.store(0, Ordering::SeqCst);
                    }
                    (why, _) => w.refuse(&job, Refusal::Unavailable(why.unwrap_or("the engine is not ready").into())),
                }
            }
            Command::Shutdown if !stopping => {
                stopping = true;
                w.counters.ready.store(false, Ordering::SeqCst);
                drop(std::mem::take(&mut engine));
                w.events.emit(Event::Exit { code: 0, reason: "shutdown".into() });
            }
            Command::Shutdown => {}
        }
    }
}

impl Worker {
    fn serve(&self, engine: &mut dyn crate::engine::ranks::Serve, job: &Queued) {
        let prompt_tokens = match engine.prompt_ids(&job.request) {
            Ok(ids) => ids.len(),
            Err(e) => return self.refuse(job, refusal(&e)),
        };
        let queued_s = job.at.elapsed().as_secs_f64();
        self.events.emit(Event::RequestStarted { id: job.id, prompt_tokens, queued_s });
        let finished = |completion_tokens, finish_reason: &str, accept, error, text| Event::RequestFinished {
            id: job.id,
            completion_tokens,
            finish_reason: finish_reason.into(),
            ttft_s: None,
            itl_s: None,
            mean_accept_length: accept,
            error,
            text,
        };
        let event = match engine.generate_until(&job.request, true, &job.cancel) {
            Ok(g) => {
                let reason = if g.cancelled {
                    "cancelled"
                } else if g.tokens.len() >= job.request.max_new_tokens {
                    "length"
                } else {
                    "stop"
                };
                match engine.decode(&g.tokens) {
                    Ok(text) => finished(g.tokens.len(), reason, g.mean_accept_length(), None, Some(text)),
                    Err(e) => finished(g.tokens.len(), "error", g.mean_accept_length(), Some(e.to_string()), None),
                }
            }
            Err(e) => {
                let reason = if matches!(refusal(&e), Refusal::Invalid(_)) { "invalid" } else { "error" };
                finished(0, reason, 0.0, Some(e.to_string()), None)
            }
        };
        self.events.emit(event);
    }

    /// A request that never started: answered at once, and recorded as ended.
    fn refuse(&self, job: &Queued, why: Refusal) {
        let (reason, message) = match &why {
            Refusal::Invalid(m) => ("invalid", m.clone()),
            Refusal::Unavailable(m) => ("cancelled", m.clone()),
            Refusal::Failed(m) => ("error", m.clone()),
        };
        if let Some(tx) = self.routes.lock().expect("routes lock").remove(&job.id) {
            let _ = tx.send(Reply::Refused(why));
        }
        self.main.emit(Event::RequestFinished {
            id: job.id,
            completion_tokens: 0,
            finish_reason: reason.into(),
            ttft_s: None,
            itl_s: None,
            mean_accept_length: 0.0,
            error: Some(message),
            text: None,
        });
    }
}

/// An engine error as the client's answer: what the request asked for is a 400, the rest a 500.
fn refusal(e: &EngineError) -> Refusal {
    match e {
        EngineError::Request(m) => Refusal::Invalid(m.clone()),
        EngineError::Tokenizer(e @ (TokenizerError::Codec(_) | TokenizerError::Template { .. } | TokenizerError::NoTemplate { .. })) => {
            Refusal::Invalid(e.to_string())
        }
        other => Refusal::Failed(other.to_string()),
    }
}

/// The request being served, as the router follows it.
struct Active {
    id: u64,
    reply: Option<UnboundedSender<Reply>>,
    prompt_tokens: usize,
    /// Stream time of its arrival (start minus its wait) and of its latest tokens.
    arrived: f64,
    last: Option<f64>,
    first_token: Option<f64>,
}

fn route(mut rx: EventReceiver, routes: Routes, main: EventSink, metrics: &Metrics, log_requests: bool) {
    let mut active: Option<Active> = None;
    while let Some(ev) = rx.blocking_recv() {
        let event = match ev.event {
            Event::RequestStarted { id, prompt_tokens, queued_s } => {
                metrics.on_started(prompt_tokens);
                let reply = routes.lock().expect("routes lock").remove(&id);
                active = Some(Active { id, reply, prompt_tokens, arrived: ev.t - queued_s, last: None, first_token: None });
                Event::RequestStarted { id, prompt_tokens, queued_s }
            }
            Event::Token { ids, text, drafted } => match &mut active {
                Some(a) if a.reply.is_some() => {
                    let gap = ev.t - a.last.unwrap_or(a.arrived);
                    metrics.on_tokens(ids.len(), gap, a.last.is_none());
                    a.first_token.get_or_insert(ev.t);
                    a.last = Some(ev.t);
                    let _ = a.reply.as_ref().expect("checked").send(Reply::Text { text, tokens: ids.len() });
                    continue;
                }
                _ => Event::Token { ids, text, drafted },
            },
            // A served request's figures are in its `RequestFinished`; the prompt box's go on.
            Event::Stats(_) if active.as_ref().is_some_and(|a| a.reply.is_some()) => continue,
            Event::RequestFinished { id, completion_tokens, finish_reason, mean_accept_length, error, text, .. } => {
                let a = active.take().filter(|a| a.id == id);
                let (ttft_s, itl_s) = match &a {
                    Some(Active { arrived, first_token: Some(first), last: Some(last), .. }) => {
                        let itl = (completion_tokens > 1).then(|| (last - first) / (completion_tokens - 1) as f64);
                        (Some(first - arrived), itl)
                    }
                    _ => (None, None),
                };
                metrics.on_finished(mean_accept_length);
                if let Some(Active { reply: Some(tx), prompt_tokens, .. }) = a {
                    let reply = match (finish_reason.as_str(), &error) {
                        ("invalid", Some(m)) => Reply::Refused(Refusal::Invalid(m.clone())),
                        ("error", Some(m)) => Reply::Refused(Refusal::Failed(m.clone())),
                        (reason, _) => {
                            let text = text.clone().unwrap_or_default();
                            Reply::Done(Done { text, prompt_tokens, completion_tokens, finish_reason: reason_name(reason) })
                        }
                    };
                    let _ = tx.send(reply);
                }
                let text = text.filter(|_| log_requests);
                Event::RequestFinished { id, completion_tokens, finish_reason, ttft_s, itl_s, mean_accept_length, error, text }
            }
            other => other,
        };
        main.emit(event);
    }
}

fn reason_name(reason: &str) -> &'static str {
    match reason {
        "length" => "length",
        "cancelled" => "cancelled",
        _ => "stop",
    }
}
