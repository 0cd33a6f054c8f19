//! `Generator` on the serving engine (`engine::serving`): its thread launches, batches every
//! request and records each one on the session's stream. Here each request's events are
//! forwarded, by a task on the server's runtime, into the client's replies and the
//! `/metrics` counters; the prompt box's tokens go on to the session's stream instead, as
//! the engine's own generation sends them.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::generator::{Done, Endpoint, Generator, Load, Refusal, Reply, Submission};
use super::metrics::Metrics;
use super::options::ServeOptions;
use crate::engine::request::PreflightFn;
use crate::engine::serving::{FinishReason, ServeConfig, ServeEvent, ServeHandle, ServeRequest, SubmitError};
use crate::event::{Event, EventSink, GenerationStats, LogLevel};
use crate::spec::LaunchSpec;

pub struct Scheduled {
    handle: ServeHandle,
    metrics: Arc<Metrics>,
    events: EventSink,
    runtime: tokio::runtime::Handle,
}

impl Scheduled {
    /// The serving thread, with no engine until the first `launch`; forwarding runs on the
    /// current tokio runtime.
    pub fn start(events: EventSink, preflight: PreflightFn, metrics: Arc<Metrics>, options: &ServeOptions) -> Scheduled {
        let config = ServeConfig { max_queued: Some(options.max_queued), log_requests: options.log_requests };
        let handle = ServeHandle::spawn(events.clone(), preflight, config);
        Scheduled { handle, metrics, events, runtime: tokio::runtime::Handle::current() }
    }

    pub fn launch(&self, spec: LaunchSpec) {
        self.handle.launch(spec);
    }

    /// Take no more requests and cancel what runs; the engine's `Exit` follows on the
    /// stream once it is freed. Does not wait.
    pub fn shutdown(&self) {
        self.handle.close();
    }
}

/// A request the engine did not take, as the client's answer.
fn refusal(e: SubmitError) -> Refusal {
    match e {
        SubmitError::TooLong { .. } | SubmitError::Invalid(_) => Refusal::Invalid(e.to_string()),
        SubmitError::QueueFull { .. } | SubmitError::NotServing(_) | SubmitError::Stopped => Refusal::Unavailable(e.to_string()),
    }
}

impl Generator for Scheduled {
    fn submit(&self, endpoint: Endpoint, request: ServeRequest) -> Result<Submission, Refusal> {
        let (id, events) = self.handle.submit(ServeRequest { endpoint: endpoint.name(), ..request }).map_err(refusal)?;
        let (replies, rx) = unbounded_channel();
        let session = (endpoint == Endpoint::Console).then(|| self.events.clone());
        let forward = Forward { metrics: self.metrics.clone(), session, replies, arrived: Instant::now(), last: None };
        self.runtime.spawn(forward.run(events));
        let handle = self.handle.clone();
        Ok(Submission::new(id, rx, move || handle.cancel(id)))
    }

    fn load(&self) -> Load {
        let s = self.handle.stats();
        Load { running: s.running, queued: s.queued }
    }

    fn ready(&self) -> bool {
        self.handle.serving()
    }
}

/// One request's events, on their way to its client (or to the session's stream).
struct Forward {
    metrics: Arc<Metrics>,
    /// The prompt box's request: tokens go to the session's stream.
    session: Option<EventSink>,
    replies: UnboundedSender<Reply>,
    arrived: Instant,
    last: Option<Instant>,
}

impl Forward {
    async fn run(mut self, mut events: UnboundedReceiver<ServeEvent>) {
        while let Some(event) = events.recv().await {
            match event {
                ServeEvent::Started { prompt_tokens } => self.metrics.on_started(prompt_tokens),
                ServeEvent::Tokens { ids, text, drafted } => {
                    let now = Instant::now();
                    let gap = now.duration_since(self.last.unwrap_or(self.arrived)).as_secs_f64();
                    self.metrics.on_tokens(ids.len(), gap, self.last.is_none());
                    self.last = Some(now);
                    match &self.session {
                        Some(session) => session.emit(Event::Token { ids, text, drafted }),
                        None => {
                            let _ = self.replies.send(Reply::Text { text, tokens: ids.len() });
                        }
                    }
                }
                ServeEvent::Finished { reason, usage, text } => {
                    self.metrics.on_finished(usage.mean_accept_length);
                    if let Some(session) = &self.session {
                        match &reason {
                            FinishReason::Error(m) => session.log(LogLevel::Error, "server", format!("generate: {m}")),
                            _ => session.emit(Event::Stats(GenerationStats {
                                tokens: usage.completion_tokens,
                                tokens_per_s: usage.completion_tokens as f64 / self.arrived.elapsed().as_secs_f64(),
                                mean_accept_length: usage.mean_accept_length,
                                accept_histogram: Vec::new(),
                            })),
                        }
                    }
                    let reply = match reason {
                        FinishReason::Error(m) => Reply::Refused(Refusal::Failed(m)),
                        done => Reply::Done(Done {
                            text,
                            prompt_tokens: usage.prompt_tokens,
                            completion_tokens: usage.completion_tokens,
                            finish_reason: done.name(),
                        }),
                    };
                    let _ = self.replies.send(reply);
                    return;
                }
            }
        }
    }
}
