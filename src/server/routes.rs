//! The HTTP front: axum routes over a `Generator`. A handler submits its request and waits
//! for the first reply, which decides the status (a refusal is an error object; tokens are
//! a 200, whole or as server-sent events). The submission lives in the handler or in its
//! event stream, so a client that goes away drops it, and that cancels the request.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::stream::{self, Stream, StreamExt};
use serde_json::{json, Value};

use super::generator::{Done, Endpoint, Generator, Refusal, Reply, Submission};
use super::metrics::Metrics;
use super::openai::{self, ApiError, Envelope, Parsed};

#[derive(Clone)]
pub struct App {
    pub generator: Arc<dyn Generator>,
    pub metrics: Arc<Metrics>,
    pub model: String,
}

pub fn router(app: App) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .with_state(app)
}

async fn completions(State(app): State<App>, body: Bytes) -> Response {
    match openai::completion(&body) {
        Ok(parsed) => answer(app, Endpoint::Completions, parsed).await,
        Err(e) => e.into_response(),
    }
}

async fn chat_completions(State(app): State<App>, body: Bytes) -> Response {
    match openai::chat(&body) {
        Ok(parsed) => answer(app, Endpoint::ChatCompletions, parsed).await,
        Err(e) => e.into_response(),
    }
}

async fn models(State(app): State<App>) -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": app.model, "object": "model", "created": now(), "owned_by": "specdeck"}]}))
}

/// 200 once the engine is ready to serve, 503 before (and while it shuts down).
async fn health(State(app): State<App>) -> StatusCode {
    if app.generator.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn metrics(State(app): State<App>) -> Response {
    let text = app.metrics.render(app.generator.load());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn answer(app: App, endpoint: Endpoint, parsed: Parsed) -> Response {
    let chat = endpoint == Endpoint::ChatCompletions;
    let mut sub = match app.generator.submit(endpoint, parsed.request) {
        Ok(sub) => sub,
        Err(refusal) => return ApiError::from(refusal).into_response(),
    };
    let prefix = if chat { "chatcmpl" } else { "cmpl" };
    let envelope = Envelope { id: format!("{prefix}-{}", sub.id), created: now(), model: app.model.clone(), chat };
    let stopped = || ApiError::from(Refusal::Unavailable("the engine stopped".into())).into_response();
    let first = match sub.replies.recv().await {
        Some(Reply::Refused(refusal)) => return ApiError::from(refusal).into_response(),
        Some(reply) => reply,
        None => return stopped(),
    };
    if parsed.stream {
        let stream = Streamed { sub, pending: Some(first), sent: String::new(), include_usage: parsed.include_usage };
        return Sse::new(events(stream, envelope)).into_response();
    }
    let mut reply = Some(first);
    loop {
        match reply.take().or(sub.replies.recv().await) {
            Some(Reply::Done(done)) => return Json(envelope.answer(&done)).into_response(),
            Some(Reply::Refused(refusal)) => return ApiError::from(refusal).into_response(),
            Some(Reply::Text { .. }) => {}
            None => return stopped(),
        }
    }
}

struct Streamed {
    sub: Submission,
    /// The first reply, read before the status was chosen.
    pending: Option<Reply>,
    /// The text sent so far: the end sends what the whole answer has beyond it.
    sent: String,
    include_usage: bool,
}

fn data(v: Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// The chunks of one answer, then `data: [DONE]`.
fn events(s: Streamed, envelope: Envelope) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    stream::unfold(Some((s, envelope)), |state| async move {
        let (mut s, e) = state?;
        loop {
            let reply = match s.pending.take() {
                Some(r) => Some(r),
                None => s.sub.replies.recv().await,
            };
            match reply {
                Some(Reply::Text { text, .. }) if !text.is_empty() => {
                    s.sent.push_str(&text);
                    let chunk = vec![data(e.chunk(&text, None))];
                    return Some((chunk, Some((s, e))));
                }
                Some(Reply::Text { .. }) => continue,
                Some(Reply::Done(done)) => return Some((ending(&e, &s, &done), None)),
                // A failure after the first token: the stream ends without its [DONE].
                Some(Reply::Refused(_)) | None => return None,
            }
        }
    })
    .flat_map(|chunks| stream::iter(chunks.into_iter().map(Ok)))
}

/// The last chunk (the rest of the text and the finish reason), the usage when asked, [DONE].
fn ending(e: &Envelope, s: &Streamed, done: &Done) -> Vec<SseEvent> {
    let rest = done.text.strip_prefix(s.sent.as_str()).unwrap_or_default();
    let mut out = vec![data(e.chunk(rest, Some(done.finish_reason)))];
    if s.include_usage {
        out.push(data(e.usage_chunk(done)));
    }
    out.push(SseEvent::default().data("[DONE]"));
    out
}
