//! The OpenAI wire format: request bodies read into engine requests (every known field type
//! checked, unknown fields ignored as OpenAI's own server does), answers and stream chunks
//! written, and errors as OpenAI's error object.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::generator::{Done, Refusal};
use crate::engine::serving::{Prompt as EnginePrompt, SamplingParams, ServeRequest};

/// OpenAI's defaults when `max_tokens` is left out.
const COMPLETION_MAX_TOKENS: usize = 16;
const CHAT_MAX_TOKENS: usize = 128;

/// A request as the engine will serve it, and how to answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    pub request: ServeRequest,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the usage.
    pub include_usage: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// The fields both endpoints share.
#[derive(Deserialize)]
struct Common {
    /// Type-checked, not used: one model is served, whatever the client names.
    #[serde(default, rename = "model")]
    _model: Option<String>,
    #[serde(default)]
    max_tokens: Option<usize>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    /// SGLang's and vLLM's extension; -1 (or 0) keeps every token.
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    seed: Option<u64>,
    /// SGLang's extension: generate `max_tokens` whatever the model's end of text.
    #[serde(default)]
    ignore_eos: Option<bool>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    n: Option<u32>,
    #[serde(default)]
    stop: Option<Stop>,
}

#[derive(Deserialize)]
struct CompletionBody {
    prompt: Prompt,
    #[serde(flatten)]
    common: Common,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    content: String,
}

#[derive(Deserialize)]
struct ChatBody {
    messages: Vec<Message>,
    #[serde(default)]
    max_completion_tokens: Option<usize>,
    #[serde(flatten)]
    common: Common,
}

/// An answer that is not a completion: its status and OpenAI's error object.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<&'static str>,
}

impl ApiError {
    pub fn invalid(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, message: message.into(), param }
    }

    pub fn body(&self) -> Value {
        let kind = match self.status {
            StatusCode::BAD_REQUEST => "invalid_request_error",
            StatusCode::SERVICE_UNAVAILABLE => "service_unavailable",
            _ => "server_error",
        };
        json!({"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status.as_u16()}})
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        let (status, message) = match r {
            Refusal::Invalid(m) => (StatusCode::BAD_REQUEST, m),
            Refusal::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, m),
            Refusal::Failed(m) => (StatusCode::INTERNAL_SERVER_ERROR, m),
        };
        ApiError { status, message, param: None }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            // A full queue drains at the engine's speed: a second is a fair first wait.
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

fn read<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        let what = if e.is_syntax() || e.is_eof() { "malformed JSON" } else { "invalid request" };
        ApiError::invalid(format!("{what}: {e}"), None)
    })
}

impl Common {
    fn parse(self, prompt: EnginePrompt, chat: bool, max_tokens: Option<usize>) -> Result<Parsed, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::invalid("n: this server answers with one choice (n = 1)", Some("n")));
        }
        let stop = match self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s],
            Some(Stop::Many(v)) => v,
        };
        let stop: Vec<String> = stop.into_iter().filter(|s| !s.is_empty()).collect();
        // OpenAI's default temperature is 1; 0 is greedy.
        let temperature = self.temperature.unwrap_or(1.0);
        if !(temperature >= 0.0 && temperature.is_finite()) {
            return Err(ApiError::invalid(format!("temperature: expected 0 or more, got {temperature}"), Some("temperature")));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::invalid(format!("top_p: expected more than 0 and at most 1, got {top_p}"), Some("top_p")));
        }
        let top_k = u32::try_from(self.top_k.unwrap_or(0).max(0)).map_err(|_| ApiError::invalid("top_k: too large", Some("top_k")))?;
        let max_tokens = max_tokens.or(self.max_tokens).unwrap_or(if chat { CHAT_MAX_TOKENS } else { COMPLETION_MAX_TOKENS });
        if max_tokens == 0 {
            return Err(ApiError::invalid("max_tokens: expected at least 1", Some("max_tokens")));
        }
        Ok(Parsed {
            request: ServeRequest {
                prompt,
                max_tokens,
                sampling: SamplingParams { temperature, top_p, top_k, seed: self.seed },
                stop,
                ignore_eos: self.ignore_eos.unwrap_or(false),
                // The route names it when it submits.
                endpoint: "",
            },
            stream: self.stream.unwrap_or(false),
            include_usage: self.stream_options.and_then(|o| o.include_usage).unwrap_or(false),
        })
    }
}

/// `POST /v1/completions`.
pub fn completion(body: &[u8]) -> Result<Parsed, ApiError> {
    let b: CompletionBody = read(body)?;
    let prompt = match b.prompt {
        Prompt::One(p) => p,
        Prompt::Many(mut v) if v.len() == 1 => v.remove(0),
        Prompt::Many(_) => return Err(ApiError::invalid("prompt: this server answers one prompt per request", Some("prompt"))),
    };
    b.common.parse(EnginePrompt::Text { text: prompt, chat: false }, false, None)
}

/// `POST /v1/chat/completions`: the conversation through the model's chat template.
pub fn chat(body: &[u8]) -> Result<Parsed, ApiError> {
    let b: ChatBody = read(body)?;
    if b.messages.is_empty() {
        return Err(ApiError::invalid("messages: expected at least one message", Some("messages")));
    }
    let messages = b.messages.into_iter().map(|m| (m.role, m.content)).collect();
    b.common.parse(EnginePrompt::Messages(messages), true, b.max_completion_tokens)
}

/// What an answer carries besides its text.
pub struct Envelope {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub chat: bool,
}

impl Envelope {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.chat, chunk) {
            (true, true) => "chat.completion.chunk",
            (true, false) => "chat.completion",
            (false, _) => "text_completion",
        }
    }

    fn with(&self, chunk: bool, choices: Value) -> Value {
        json!({"id": self.id, "object": self.object(chunk), "created": self.created, "model": self.model, "choices": choices})
    }

    fn usage(done: &Done) -> Value {
        let (prompt, completion) = (done.prompt_tokens, done.completion_tokens);
        json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
    }

    /// The whole answer.
    pub fn answer(&self, done: &Done) -> Value {
        let choice = if self.chat {
            json!({"index": 0, "message": {"role": "assistant", "content": done.text}, "finish_reason": done.finish_reason})
        } else {
            json!({"index": 0, "text": done.text, "logprobs": null, "finish_reason": done.finish_reason})
        };
        let mut v = self.with(false, json!([choice]));
        v["usage"] = Self::usage(done);
        v
    }

    /// A stream chunk: new text, or (with `finish_reason`) the end.
    pub fn chunk(&self, text: &str, finish_reason: Option<&str>) -> Value {
        let choice = if self.chat {
            json!({"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": finish_reason})
        } else {
            json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish_reason})
        };
        self.with(true, json!([choice]))
    }

    /// The last chunk when the client asked for the usage.
    pub fn usage_chunk(&self, done: &Done) -> Value {
        let mut v = self.with(true, json!([]));
        v["usage"] = Self::usage(done);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(body: &str) -> String {
        completion(body.as_bytes()).unwrap_err().message
    }

    #[test]
    fn a_completion_request_with_openais_defaults() {
        let p = completion(br#"{"model": "m", "prompt": "w5 w6", "unknown": [1]}"#).unwrap();
        let want = ServeRequest {
            prompt: EnginePrompt::Text { text: "w5 w6".into(), chat: false },
            max_tokens: 16,
            sampling: SamplingParams { temperature: 1.0, ..SamplingParams::default() },
            stop: Vec::new(),
            ignore_eos: false,
            endpoint: "",
        };
        assert_eq!(p, Parsed { request: want, stream: false, include_usage: false });
        let body = br#"{"prompt": ["x"], "max_tokens": 3, "temperature": 0, "seed": 9, "top_p": 0.5, "top_k": -1, "stop": ["\n", ""],
            "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}"#;
        let p = completion(body).unwrap();
        let sampling = SamplingParams { temperature: 0.0, top_p: 0.5, top_k: 0, seed: Some(9) };
        assert_eq!((p.request.max_tokens, p.request.sampling, p.stream, p.include_usage), (3, sampling, true, true));
        assert_eq!((p.request.stop, p.request.ignore_eos), (vec!["\n".to_string()], true));
        let c =
            chat(br#"{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}], "max_completion_tokens": 5}"#)
                .unwrap();
        let conversation = vec![("system".to_string(), "s".to_string()), ("user".to_string(), "hi".to_string())];
        assert_eq!((c.request.prompt, c.request.max_tokens), (EnginePrompt::Messages(conversation), 5));
    }

    #[test]
    fn malformed_json_and_known_fields_of_the_wrong_type_are_400s() {
        assert!(bad(r#"{"prompt": "x""#).starts_with("malformed JSON: EOF while parsing"), "{}", bad(r#"{"prompt": "x""#));
        assert!(bad(r#"{"prompt": "x", "max_tokens": "ten"}"#).starts_with("invalid request: invalid type: string \"ten\""));
        assert!(bad(r#"{"prompt": "x", "stream": 1}"#).starts_with("invalid request: invalid type: integer `1`, expected a boolean"));
        assert!(bad(r#"{"max_tokens": 4}"#).starts_with("invalid request: missing field `prompt`"));
        assert_eq!(bad(r#"{"prompt": "x", "max_tokens": 0}"#), "max_tokens: expected at least 1");
        assert_eq!(bad(r#"{"prompt": "x", "top_p": 0}"#), "top_p: expected more than 0 and at most 1, got 0");
        let e = chat(br#"{"messages": []}"#).unwrap_err();
        assert_eq!((e.status, e.param), (StatusCode::BAD_REQUEST, Some("messages")));
        let body = ApiError::invalid("m", Some("n")).body();
        assert_eq!(body, json!({"error": {"message": "m", "type": "invalid_request_error", "param": "n", "code": 400}}));
    }
}
