//! `specdeck bench --url URL --concurrency N [--request-rate R]`: the prompts sent to a
//! running OpenAI-compatible server (specdeck's own `launch --port`, SGLang's or vLLM's) as
//! streamed `/v1/completions` (or, with `--chat`, `/v1/chat/completions`) requests, at most N
//! at a time, arriving as `bench_load`'s Poisson process. The figures are what SGLang's
//! bench_serving reports, measured on the wire: output tokens/s from each stream's usage,
//! TTFT to the first content chunk, ITL between content chunks.

use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};

use super::bench_load::{arrivals, Load};

/// A server that sends nothing for this long, mid-answer, is taken for hung.
const READ_TIMEOUT: Duration = Duration::from_secs(120);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of one answer, and of one line of its event stream: a stream past these is an
/// error, not unbounded memory.
const BODY_LIMIT: u64 = 64 << 20;
const LINE_LIMIT: u64 = 1 << 20;

/// One request as the wire showed it.
#[derive(Debug, Default)]
struct Answer {
    text: String,
    prompt_tokens: u64,
    completion_tokens: u64,
    ttft_s: f64,
    /// Gaps between content chunks.
    itl_s: Vec<f64>,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_per_read(Some(READ_TIMEOUT))
        .build()
        .into()
}

/// The model a server serves: the first id of its `/v1/models`, which vLLM requires each
/// request to name.
fn served_model(agent: &ureq::Agent, base: &str) -> anyhow::Result<String> {
    let url = format!("{base}/v1/models");
    let mut r = agent.get(&url).call().with_context(|| format!("{url}: no answer"))?;
    let status = r.status().as_u16();
    let body = r.body_mut().read_to_string().with_context(|| format!("{url}: unreadable answer"))?;
    if status != 200 {
        bail!("{url}: status {status}: {}", excerpt(&body));
    }
    let v: Value = serde_json::from_str(&body).with_context(|| format!("{url}: not JSON: {}", excerpt(&body)))?;
    v.pointer("/data/0/id").and_then(Value::as_str).map(str::to_string).ok_or_else(|| anyhow!("{url}: no model under data[0].id"))
}

fn excerpt(text: &str) -> String {
    text.chars().take(200).collect()
}

/// One line of the event stream, without its line end; `None` at the end of the stream.
fn read_line(reader: &mut impl BufRead, line: &mut String) -> anyhow::Result<Option<()>> {
    line.clear();
    let n = reader.by_ref().take(LINE_LIMIT).read_line(line)?;
    if n == 0 {
        return Ok(None);
    }
    if !line.ends_with('\n') && n as u64 == LINE_LIMIT {
        bail!("a line of the event stream is over {LINE_LIMIT} bytes");
    }
    line.truncate(line.trim_end_matches(['\r', '\n']).len());
    Ok(Some(()))
}

/// Stream one prompt's answer.
fn send(agent: &ureq::Agent, url: &str, body: &Value, chat: bool) -> anyhow::Result<Answer> {
    let sent = Instant::now();
    let mut r =
        agent.post(url).header("content-type", "application/json").send(body.to_string()).with_context(|| format!("{url}: no answer"))?;
    let status = r.status().as_u16();
    if status != 200 {
        let text = r.body_mut().read_to_string().unwrap_or_default();
        bail!("{url}: status {status}: {}", excerpt(&text));
    }
    let mut reader = BufReader::new(r.into_body().into_with_config().limit(BODY_LIMIT).reader());
    let content = if chat { "/choices/0/delta/content" } else { "/choices/0/text" };
    let (mut answer, mut last_chunk, mut done) = (Answer::default(), None::<Instant>, false);
    let mut line = String::new();
    while read_line(&mut reader, &mut line).with_context(|| format!("{url}: the stream broke"))?.is_some() {
        let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
        if data == "[DONE]" {
            done = true;
            break;
        }
        let chunk: Value = serde_json::from_str(data).with_context(|| format!("{url}: a chunk that is not JSON: {}", excerpt(data)))?;
        if let Some(err) = chunk.get("error") {
            bail!("{url}: the stream ended in an error: {err}");
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            answer.prompt_tokens = usage["prompt_tokens"].as_u64().unwrap_or(0);
            answer.completion_tokens = usage["completion_tokens"].as_u64().unwrap_or(0);
        }
        let piece = chunk.pointer(content).and_then(Value::as_str).unwrap_or("");
        if piece.is_empty() {
            continue;
        }
        let now = Instant::now();
        match last_chunk {
            None => answer.ttft_s = now.duration_since(sent).as_secs_f64(),
            Some(t) => answer.itl_s.push(now.duration_since(t).as_secs_f64()),
        }
        last_chunk = Some(now);
        answer.text.push_str(piece);
    }
    if !done {
        bail!("{url}: the stream ended without `data: [DONE]`");
    }
    if answer.completion_tokens == 0 && !answer.text.is_empty() {
        bail!("{url}: the stream had no usage chunk (stream_options.include_usage)");
    }
    Ok(answer)
}

/// The request body of one prompt: greedy, EOS ignored, so every request runs its length.
fn request_body(model: &str, prompt: &str, chat: bool, max_tokens: usize) -> Value {
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if chat {
        body["messages"] = json!([{"role": "user", "content": prompt}]);
    } else {
        body["prompt"] = json!(prompt);
    }
    body
}

/// Send every prompt to the server at `base` (`http://host:port`), `concurrency` at a time.
pub fn run(base: &str, prompts: &[String], chat: bool, max_tokens: usize, concurrency: usize, rate: Option<f64>) -> anyhow::Result<Value> {
    let base = base.trim_end_matches('/');
    // Plain HTTP only: servers under test listen on a local or private address.
    if !base.starts_with("http://") {
        bail!("--url {base}: expected http://HOST:PORT");
    }
    let concurrency = concurrency.max(1);
    let agent = agent();
    let model = served_model(&agent, base)?;
    let url = format!("{base}/v1/{}", if chat { "chat/completions" } else { "completions" });
    let offsets = arrivals(prompts.len(), rate);
    let next = AtomicUsize::new(0);
    let answers: Mutex<Vec<Option<anyhow::Result<Answer>>>> = Mutex::new((0..prompts.len()).map(|_| None).collect());
    let start = Instant::now();
    // One thread a request in flight, as many as the concurrency: each takes the next prompt
    // once it is free and that prompt has arrived.
    std::thread::scope(|scope| {
        for _ in 0..concurrency.min(prompts.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(prompt) = prompts.get(i) else { break };
                std::thread::sleep(offsets[i].saturating_sub(start.elapsed()));
                let answer = send(&agent, &url, &request_body(&model, prompt, chat, max_tokens), chat);
                answers.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(answer);
            });
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    let answers = answers.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut done = Vec::with_capacity(answers.len());
    for (i, a) in answers.into_iter().enumerate() {
        done.push(a.expect("every prompt was taken").with_context(|| format!("prompt {}", i + 1))?);
    }
    let ttft: Vec<f64> = done.iter().map(|a| a.ttft_s).collect();
    let itl: Vec<f64> = done.iter().flat_map(|a| a.itl_s.iter().copied()).collect();
    let output: u64 = done.iter().map(|a| a.completion_tokens).sum();
    let prompt_tokens = done.iter().map(|a| a.prompt_tokens).sum();
    let load = Load { concurrency, rate, prompts: prompts.len(), seconds, output, prompt_tokens };
    let mut out = load.figures(&ttft, &itl);
    out["url"] = json!(url);
    out["model"] = json!(model);
    out["texts"] = done.iter().map(|a| json!(a.text)).collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_of_the_stream_is_bounded_and_loses_its_line_end() {
        let mut line = String::new();
        let mut r = BufReader::new(&b"data: {}\r\n\nlast"[..]);
        read_line(&mut r, &mut line).unwrap().unwrap();
        assert_eq!(line, "data: {}");
        read_line(&mut r, &mut line).unwrap().unwrap();
        assert_eq!(line, "");
        read_line(&mut r, &mut line).unwrap().unwrap();
        assert_eq!(line, "last");
        assert!(read_line(&mut r, &mut line).unwrap().is_none());
        let long = vec![b'x'; LINE_LIMIT as usize + 5];
        let err = read_line(&mut BufReader::new(&long[..]), &mut line).unwrap_err();
        assert_eq!(err.to_string(), "a line of the event stream is over 1048576 bytes");
    }

    #[test]
    fn requests_are_greedy_streamed_and_ignore_eos() {
        let body = request_body("m", "Hi", true, 4);
        assert_eq!(body["messages"], json!([{"role": "user", "content": "Hi"}]));
        assert_eq!((body["stream_options"]["include_usage"].as_bool(), body["ignore_eos"].as_bool()), (Some(true), Some(true)));
        assert_eq!(request_body("m", "Hi", false, 4)["prompt"], "Hi");
        let err = run("localhost:1", &["x".into()], false, 1, 1, None).unwrap_err();
        assert_eq!(err.to_string(), "--url localhost:1: expected http://HOST:PORT");
        // Port 1 of this machine has no server: the error names what was asked.
        let err = run("http://127.0.0.1:1/", &["x".into()], false, 1, 1, None).unwrap_err();
        assert_eq!(err.to_string(), "http://127.0.0.1:1/v1/models: no answer");
    }
}
