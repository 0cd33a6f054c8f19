//! The OpenAI-compatible server (`specdeck launch --port`) as a client sees it: a real HTTP
//! client (ureq) and curl against the binary, on the tiny testkit pair and the demo pair.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::tiny_pair::pair;
use serde_json::{json, Value};

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `specdeck launch --headless … --port 0` until it says where it serves and is ready.
struct Server {
    child: Child,
    out: BufReader<ChildStdout>,
    base: String,
    agent: ureq::Agent,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_specdeck"))
            .args(["--headless", "launch", "--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut base = None;
        let mut line = String::new();
        loop {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "the server ended before it was ready");
            if let Some((_, address)) = line.trim().split_once(" at http://") {
                base = Some(format!("http://{address}"));
            }
            if line.starts_with("ready in ") {
                break;
            }
        }
        let agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let server = Server { child, out, base: base.expect("a `serving … at` line before ready"), agent };
        // The worker marks itself ready when its launch call returns, just after the event
        // that printed `ready in`.
        let t0 = std::time::Instant::now();
        while server.get("/health").0 != 200 {
            assert!(t0.elapsed() < Duration::from_secs(20), "/health never answered 200 after ready");
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    fn post(&self, route: &str, body: &str) -> (u16, Option<String>, String) {
        let mut r = self.agent.post(format!("{}{route}", self.base)).header("content-type", "application/json").send(body).unwrap();
        let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
        (r.status().as_u16(), retry, r.body_mut().read_to_string().unwrap())
    }

    fn json(&self, route: &str, body: Value) -> (u16, Value) {
        let (status, _, text) = self.post(route, &body.to_string());
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")))
    }

    fn get(&self, route: &str) -> (u16, String) {
        let mut r = self.agent.get(format!("{}{route}", self.base)).call().unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    }

    /// A streamed answer: the `data:` payloads in order.
    fn stream(&self, route: &str, body: Value) -> Vec<String> {
        let r = self.agent.post(format!("{}{route}", self.base)).send(body.to_string()).unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(r.headers().get("content-type").unwrap(), "text/event-stream");
        let reader = BufReader::new(r.into_body().into_reader());
        reader.lines().map(Result::unwrap).filter_map(|l| l.strip_prefix("data: ").map(str::to_string)).collect()
    }

    /// SIGTERM, and how long the process took to exit, and its status.
    fn terminate(mut self) -> (Duration, Option<i32>, String) {
        let t0 = Instant::now();
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) }, 0);
        let status = self.child.wait().unwrap();
        let took = t0.elapsed();
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        (took, status.code(), rest)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Prometheus text, checked line by line against the exposition format (a `# TYPE` before
/// each family's samples; metric names `[a-zA-Z_:][a-zA-Z0-9_:]*`; float values): every
/// sample as (name with its labels, value).
fn prometheus_samples(text: &str) -> Vec<(String, f64)> {
    let name = regex::Regex::new(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$").unwrap();
    let sample =
        regex::Regex::new(r#"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? (\S+)$"#)
            .unwrap();
    let mut typed: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest.split_once(' ').unwrap();
            assert!(name.is_match(family) && ["counter", "gauge", "histogram"].contains(&kind), "{line}");
            typed.push(family.to_string());
        } else if line.starts_with("# HELP ") || line == "# EOF" {
        } else {
            let c = sample.captures(line).unwrap_or_else(|| panic!("not a sample line: {line:?}"));
            let metric = &c[1];
            assert!(
                typed
                    .iter()
                    .any(|f| metric.strip_prefix(f.as_str()).is_some_and(|s| ["", "_total", "_bucket", "_sum", "_count"].contains(&s))),
                "{line}: no # TYPE"
            );
            let value: f64 = c[4].parse().unwrap_or_else(|e| panic!("{line}: {e}"));
            out.push((format!("{metric}{}", c.get(2).map_or("", |l| l.as_str())), value));
        }
    }
    out
}

fn generate(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_specdeck")).arg("generate").args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The text of a streamed completion or chat answer, and its finish reason.
fn streamed_text(chunks: &[String]) -> (String, String) {
    assert_eq!(chunks.last().map(String::as_str), Some("[DONE]"), "{chunks:?}");
    let mut text = String::new();
    let mut finish = String::new();
    for c in &chunks[..chunks.len() - 1] {
        let v: Value = serde_json::from_str(c).unwrap();
        let choice = &v["choices"][0];
        text += choice["text"].as_str().or(choice["delta"]["content"].as_str()).unwrap_or_default();
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (text, finish)
}

#[test]
fn greedy_answers_over_http_equal_generate_whole_and_streamed_target_only_and_eagle3() {
    let p = pair();
    let eagle = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", path(&p.eagle), "--speculative-num-steps", "3"];
    for drafter in [&[][..], &eagle[..]] {
        let mut launch = vec!["--model-path", path(&p.target), "--served-model-name", "tiny"];
        launch.extend(drafter);
        let server = Server::start(&launch);
        let (status, models) = server.get("/v1/models");
        assert_eq!(status, 200);
        assert_eq!(serde_json::from_str::<Value>(&models).unwrap()["data"][0]["id"], "tiny");
        assert_eq!(server.get("/health").0, 200);

        let mut gen = vec!["--model-path", path(&p.target), "--prompt", "w5 w9 w17 w33", "--max-new-tokens", "12"];
        gen.extend(drafter);
        let want = generate(&gen);
        let body = json!({"model": "tiny", "prompt": "w5 w9 w17 w33", "max_tokens": 12, "temperature": 0});
        let (status, whole) = server.json("/v1/completions", body.clone());
        assert_eq!(status, 200, "{whole}");
        assert_eq!(whole["object"], "text_completion");
        assert_eq!(whole["model"], "tiny");
        assert_eq!(whole["choices"][0]["text"], want["text"]);
        let n = want["tokens"].as_array().unwrap().len();
        assert_eq!(whole["usage"]["completion_tokens"], n);
        // The four words (this tokenizer adds no BOS).
        assert_eq!(whole["usage"]["prompt_tokens"], 4);
        assert_eq!(whole["usage"]["total_tokens"], 4 + n);
        let finish = if n == 12 { "length" } else { "stop" };
        assert_eq!(whole["choices"][0]["finish_reason"], finish);

        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        streamed["stream_options"] = json!({"include_usage": true});
        let chunks = server.stream("/v1/completions", streamed);
        let usage: Value = serde_json::from_str(&chunks[chunks.len() - 2]).unwrap();
        assert_eq!(usage["usage"], whole["usage"]);
        let (text, reason) = streamed_text(&chunks);
        assert_eq!((text.as_str(), reason.as_str()), (want["text"].as_str().unwrap(), finish));

        // Chat: the tokenizer's template, as `generate --chat` applies it.
        gen.push("--chat");
        let want = generate(&gen);
        let chat = json!({"messages": [{"role": "user", "content": "w5 w9 w17 w33"}], "max_tokens": 12, "temperature": 0});
        let (status, answer) = server.json("/v1/chat/completions", chat.clone());
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["object"], "chat.completion");
        assert_eq!(answer["choices"][0]["message"], json!({"role": "assistant", "content": want["text"]}));
        let mut streamed = chat;
        streamed["stream"] = json!(true);
        let (text, _) = streamed_text(&server.stream("/v1/chat/completions", streamed));
        assert_eq!(text, want["text"].as_str().unwrap());

        // curl, as a user would: SSE with the final [DONE].
        let mut body = body;
        body["stream"] = json!(true);
        let curl = Command::new("curl")
            .args(["-sN", "-H", "content-type: application/json", "-d", &body.to_string(), &format!("{}/v1/completions", server.base)])
            .output()
            .unwrap();
        let out = String::from_utf8(curl.stdout).unwrap();
        assert!(out.starts_with("data: {\"id\":\"cmpl-"), "{out}");
        assert!(out.ends_with("data: [DONE]\n\n"), "{out}");

        // Four answered requests of 5 prompt tokens and two chats: /metrics parses and adds up.
        let (status, metrics) = server.get("/metrics");
        assert_eq!(status, 200);
        let samples = prometheus_samples(&metrics);
        let value = |name: &str| samples.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name} in\n{metrics}")).1;
        assert_eq!(value("sglang:num_running_reqs"), 0.0);
        assert_eq!(value("sglang:num_queue_reqs"), 0.0);
        assert!(value("sglang:prompt_tokens_total") >= 3.0 * 4.0, "{metrics}");
        assert!(value("sglang:generation_tokens_total") >= 3.0 * n as f64, "{metrics}");
        for histogram in ["sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds"] {
            assert_eq!(value(&format!("{histogram}_bucket{{le=\"+Inf\"}}")), value(&format!("{histogram}_count")), "{metrics}");
            assert!(value(&format!("{histogram}_count")) >= 3.0, "{metrics}");
        }
        assert!(value("sglang:spec_accept_length") >= 1.0, "{metrics}");
        assert!(value("sglang:gen_throughput") >= 0.0, "{metrics}");
        let (took, code, _) = server.terminate();
        assert_eq!(code, Some(143));
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
}

/// Eight prompts of the tiny pair's vocabulary, each a different length.
fn eight_prompts() -> Vec<String> {
    (0..8u32).map(|i| (0..3 + 2 * i).map(|j| format!("w{}", 4 + (i * 13 + j * 7) % 60)).collect::<Vec<_>>().join(" ")).collect()
}

#[test]
fn eight_concurrent_requests_each_equal_their_sequential_answer_and_run_batched_target_only_and_eagle3() {
    let p = pair();
    let dir = tempfile::tempdir().unwrap();
    let eagle = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", path(&p.eagle), "--speculative-num-steps", "3"];
    for (round, drafter) in [&[][..], &eagle[..]].into_iter().enumerate() {
        let log = dir.path().join(format!("events-{round}.jsonl"));
        let mut launch = vec!["--model-path", path(&p.target), "--event-log", path(&log)];
        launch.extend(drafter);
        let server = Server::start(&launch);
        let body = |prompt: &str| json!({"prompt": prompt, "max_tokens": 160, "temperature": 0, "ignore_eos": true});
        let text = |v: &Value| v["choices"][0]["text"].as_str().unwrap_or_else(|| panic!("{v}")).to_string();
        let sequential: Vec<String> = eight_prompts().iter().map(|p| text(&server.json("/v1/completions", body(p)).1)).collect();
        assert!(sequential.iter().all(|t| !t.is_empty()));
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let concurrent: Vec<String> = eight_prompts()
            .into_iter()
            .map(|prompt| {
                let (agent, url, barrier) = (server.agent.clone(), format!("{}/v1/completions", server.base), barrier.clone());
                let body = body(&prompt).to_string();
                std::thread::spawn(move || {
                    barrier.wait();
                    let answer: Value =
                        serde_json::from_str(&agent.post(url).send(body).unwrap().body_mut().read_to_string().unwrap()).unwrap();
                    text(&answer)
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert_eq!(concurrent, sequential, "round {round}");
        // `bench --url` as the load generator: the same answers, streamed, 3 at a time.
        let prompts = dir.path().join("prompts.jsonl");
        std::fs::write(&prompts, eight_prompts().iter().map(|p| format!("{}\n", json!({"prompt": p}))).collect::<String>()).unwrap();
        let bench = Command::new(env!("CARGO_BIN_EXE_specdeck"))
            .args(["bench", "--url", &server.base, "--prompts", path(&prompts), "--max-new-tokens", "160", "--concurrency", "3", "--json"])
            .output()
            .unwrap();
        assert!(bench.status.success(), "{}", String::from_utf8_lossy(&bench.stderr));
        let load: Value = serde_json::from_slice(&bench.stdout).unwrap();
        assert_eq!(load["texts"], json!(sequential), "round {round}");
        assert_eq!((load["output_tokens"].as_u64(), load["model"].as_str()), (Some(8 * 160), Some(path(&p.target))), "{load}");
        assert!(load["ttft_ms"]["p50"].as_f64().unwrap() > 0.0 && load["itl_ms"]["p99"].as_f64().unwrap() > 0.0, "{load}");
        let (_, code, _) = server.terminate();
        assert_eq!(code, Some(143));
        // Batched: several of the concurrent eight started before the first of them finished.
        let events: Vec<Value> = std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let concurrent_events = events.iter().filter(|e| e["id"].as_u64().is_some_and(|id| id > 8));
        let before_first_end =
            concurrent_events.take_while(|e| e["type"] != "request-finished").filter(|e| e["type"] == "request-started").count();
        assert!(before_first_end >= 2, "round {round}: {before_first_end} started before the first ended");
    }
}

#[test]
fn a_stop_string_ends_the_answer_before_it() {
    let p = pair();
    let server = Server::start(&["--model-path", path(&p.target)]);
    let body = json!({"prompt": "w5 w9 w17 w33", "max_tokens": 12, "temperature": 0, "ignore_eos": true});
    let (_, whole) = server.json("/v1/completions", body.clone());
    let text = whole["choices"][0]["text"].as_str().unwrap().to_string();
    let words: Vec<&str> = text.split_whitespace().collect();
    assert!(words.len() >= 4, "{text:?}");
    let mut stopped = body;
    stopped["stop"] = json!([words[3]]);
    let (status, cut) = server.json("/v1/completions", stopped.clone());
    assert_eq!(status, 200, "{cut}");
    assert_eq!(cut["choices"][0]["finish_reason"], "stop");
    assert_eq!(cut["choices"][0]["text"], &text[..text.find(words[3]).unwrap()]);
    stopped["stream"] = json!(true);
    let (streamed, reason) = streamed_text(&server.stream("/v1/completions", stopped));
    assert_eq!((streamed.as_str(), reason.as_str()), (&text[..text.find(words[3]).unwrap()], "stop"));
}

/// A long answer from the demo pair: its greedy continuation of the demo prompt runs on
/// without an end of text, so a request for many tokens stays running for a while.
fn demo_launch() -> Vec<String> {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/demo");
    let (t, d) = (demo.join("target"), demo.join("draft"));
    [
        "--model-path",
        path(&t),
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        path(&d),
        // The pair's drafter has fewer positions than the target's context: fixed as `specdeck demo` fixes it.
        "--apply",
        "clamp-context-length",
        "--max-running-requests",
        "1",
        "--max-queued-requests",
        "1",
    ]
    .map(String::from)
    .to_vec()
}

const LONG: usize = 3000;

fn long_request(stream: bool) -> Value {
    json!({"prompt": "HAMLET.\nTo be, or not to be, that is the question:\n", "max_tokens": LONG, "temperature": 0, "stream": stream})
}

/// Open a streamed request and read until its first chunk: it is running.
fn open_stream(server: &Server) -> BufReader<ureq::BodyReader<'static>> {
    let r = server.agent.post(format!("{}/v1/completions", server.base)).send(long_request(true).to_string()).unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let mut reader = BufReader::new(r.into_body().into_reader());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("data: {"), "{line}");
    reader
}

fn wait_for(server: &Server, metric_line: &str) {
    let t0 = Instant::now();
    while !server.get("/metrics").1.lines().any(|l| l == metric_line) {
        assert!(t0.elapsed() < Duration::from_secs(20), "no {metric_line}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bad_input_gets_400_a_full_queue_503_a_dropped_stream_is_cancelled_and_sigterm_exits_in_2s() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let mut args = demo_launch();
    args.extend(["--event-log".to_string(), path(&log).to_string()]);
    let server = Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>());

    let error = |status: u16, body: &str| {
        let (got, _, text) = server.post("/v1/completions", body);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!((got, &v["error"]["code"], &v["error"]["type"]), (status, &json!(status), &json!("invalid_request_error")), "{text}");
        v["error"]["message"].as_str().unwrap().to_string()
    };
    assert!(error(400, r#"{"prompt": "x", "max_tokens": 4"#).starts_with("malformed JSON: "));
    assert!(error(400, r#"{"prompt": "x", "max_tokens": "four"}"#).starts_with("invalid request: invalid type: string \"four\""));
    assert!(error(400, r#"{"prompt": 7}"#).starts_with("invalid request: "));
    assert!(error(400, r#"{"prompt": "x", "temperature": "hot"}"#).starts_with("invalid request: "));
    // Past the launch's context (the drafter's 131072 positions, after clamp-context-length).
    let long_prompt = json!({"prompt": "the ".repeat(140_000), "max_tokens": 4}).to_string();
    let m = error(400, &long_prompt);
    assert_eq!(m, "the prompt (140001 tokens) plus max_tokens (4) exceed the context (131072 tokens)");
    let (status, _, text) = server.post("/v1/chat/completions", r#"{"messages": [{"role": "user", "content": "hi"}]}"#);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("no chat template"), "{text}");

    // One running (--max-running-requests 1), one queued (--max-queued-requests 1), the third
    // turned away.
    let running = open_stream(&server);
    wait_for(&server, "sglang:num_running_reqs 1");
    let queued = {
        let (agent, url) = (server.agent.clone(), format!("{}/v1/completions", server.base));
        let body = json!({"prompt": "HAMLET.\n", "max_tokens": 8, "temperature": 0}).to_string();
        std::thread::spawn(move || agent.post(url).send(body).unwrap().body_mut().read_to_string().unwrap())
    };
    wait_for(&server, "sglang:num_queue_reqs 1");
    let (status, retry, text) = server.post("/v1/completions", &long_request(false).to_string());
    assert_eq!((status, retry.as_deref()), (503, Some("1")), "{text}");
    assert!(text.contains("the queue is full"), "{text}");

    // The running stream's client goes away: its request is cancelled, the queued one runs.
    let t0 = Instant::now();
    drop(running);
    let answer: Value = serde_json::from_str(&queued.join().unwrap()).unwrap();
    assert_eq!(answer["usage"]["completion_tokens"], 8, "{answer}");
    assert!(t0.elapsed() < Duration::from_secs(10), "the dropped request ran on: {:?}", t0.elapsed());
    wait_for(&server, "sglang:num_running_reqs 0");

    // SIGTERM with a request running: out within 2 s, the request cancelled.
    let _running = open_stream(&server);
    let (took, code, _) = server.terminate();
    assert_eq!(code, Some(143));
    assert!(took < Duration::from_secs(2), "{took:?}");

    let events: Vec<Value> = std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let finished: Vec<(u64, String)> = events
        .iter()
        .filter(|e| e["type"] == "request-finished")
        .map(|e| (e["id"].as_u64().unwrap(), e["finish_reason"].as_str().unwrap().to_string()))
        .collect();
    let reasons: Vec<(u64, &str)> = finished.iter().map(|(id, r)| (*id, r.as_str())).collect();
    // 1: the long prompt (the JSON errors never reach the queue), 2: the chat without a
    // template, 3: dropped, 4: the queued one, 5: cancelled by SIGTERM; the 503 got no id.
    assert_eq!(reasons, [(1, "invalid"), (2, "invalid"), (3, "cancelled"), (4, "length"), (5, "cancelled")]);
    // No prompt text without --log-requests.
    assert!(events.iter().filter(|e| e["type"] == "request-queued").all(|e| e.get("prompt").is_none()));
    assert!(events.iter().all(|e| e.get("text").is_none()));
}
