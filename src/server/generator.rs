//! The seam between the HTTP front and the engine that serves it: submit a request and read
//! its replies, cancel it, ask how loaded it is. `scheduled` implements it on the serving
//! engine's continuous batching.

use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::serving::ServeRequest;

/// Where a request came from, for the event log and the serving pane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    ChatCompletions,
    /// The console's prompt box.
    Console,
}

impl Endpoint {
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Completions => "/v1/completions",
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Console => "console",
        }
    }
}

/// What a request's stream says, in order: `Text` pieces, then one end.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// New text; `tokens` is how many tokens it is.
    Text {
        text: String,
        tokens: usize,
    },
    Done(Done),
    /// The request was not served; nothing else follows.
    Refused(Refusal),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Done {
    /// The whole answer, decoded at once (the pieces hold back an incomplete character).
    pub text: String,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// `stop`, `length` or `cancelled`.
    pub finish_reason: &'static str,
}

/// Why a request was not served, and so the HTTP status it gets.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// The request cannot be served by this engine (a prompt longer than the context): 400.
    #[error("{0}")]
    Invalid(String),
    /// The queue is full, the engine is not ready, or it is shutting down: 503.
    #[error("{0}")]
    Unavailable(String),
    /// The engine failed: 500.
    #[error("{0}")]
    Failed(String),
}

/// How many requests run and wait.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    pub running: usize,
    pub queued: usize,
}

/// A submitted request: its replies, and its cancel, called when this is dropped, so a
/// client that goes away (its handler or its stream dropped) cancels its request.
pub struct Submission {
    pub id: u64,
    pub replies: UnboundedReceiver<Reply>,
    cancel: Option<Box<dyn FnOnce() + Send>>,
}

impl Submission {
    /// `cancel` must be harmless once the request has ended.
    pub fn new(id: u64, replies: UnboundedReceiver<Reply>, cancel: impl FnOnce() + Send + 'static) -> Submission {
        Submission { id, replies, cancel: Some(Box::new(cancel)) }
    }

    /// Let the request run without a reader (the prompt box, whose tokens go to the stream).
    pub fn detach(mut self) {
        self.cancel = None;
    }
}

impl Drop for Submission {
    fn drop(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel();
        }
    }
}

pub trait Generator: Send + Sync {
    /// Queue a request; `Err` when it cannot be served (`Invalid`) or not now (`Unavailable`:
    /// the queue is full, the engine is not ready, or the server is shutting down).
    fn submit(&self, endpoint: Endpoint, request: ServeRequest) -> Result<Submission, Refusal>;
    fn load(&self) -> Load;
    /// Whether the engine is launched and takes requests.
    fn ready(&self) -> bool;
}
