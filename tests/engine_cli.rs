//! `specdeck generate` / `bench` as a user runs them, and the engine handle (contract 1), on
//! tiny checkpoints written by `specdeck::testkit`.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use common::tiny_pair::pair;
use serde_json::Value;
use specdeck::engine::handle::{EngineCommand, EngineHandle};
use specdeck::engine::llama::Family;
use specdeck::engine::request::GenerateRequest;
use specdeck::event::{Event, EventSink, PhaseState};
use specdeck::phase::PhaseId;
use specdeck::spec::{Algorithm, LaunchSpec};
use specdeck::testkit::{word, TinyEagle3, TinyLlama};

fn specdeck(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_specdeck")).args(args).output().unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "exit {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

#[test]
fn generate_prints_the_contract_json_and_speculation_changes_no_token() {
    let p = pair();
    let base = ["generate", "--model-path", path(&p.target), "--prompt", "w5 w9 w17 w33", "--max-new-tokens", "12", "--json"];
    let plain = json_of(&specdeck(&base));
    let keys: Vec<&str> = plain.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["tokens", "text", "accept_lengths", "mean_accept_length", "tokens_per_s", "phases"]);
    let tokens = ids(&plain["tokens"]);
    assert!(!tokens.is_empty() && tokens.len() <= 12);
    // The word-level tokenizer decodes to the words, special ids skipped.
    let words: Vec<String> = tokens.iter().filter(|&&t| t > 2).map(|&t| word(t as u32)).collect();
    assert_eq!(plain["text"], words.join(" "));
    assert_eq!(plain["mean_accept_length"], 1.0);
    let phase_names: Vec<&str> = plain["phases"].as_array().unwrap().iter().map(|p| p["phase"].as_str().unwrap()).collect();
    assert_eq!(phase_names, ["preflight", "target-load", "kv-alloc", "warmup"]);

    let mut spec_args = base.to_vec();
    spec_args.extend(["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", path(&p.eagle)]);
    spec_args.extend(["--speculative-num-steps", "3", "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "5"]);
    let spec = json_of(&specdeck(&spec_args));
    assert_eq!(ids(&spec["tokens"]), tokens);
    let accept = ids(&spec["accept_lengths"]);
    assert!(accept.iter().all(|&a| (1..=4).contains(&a)), "{accept:?}");
    let phase_names: Vec<&str> = spec["phases"].as_array().unwrap().iter().map(|p| p["phase"].as_str().unwrap()).collect();
    assert_eq!(phase_names, ["preflight", "target-load", "kv-alloc", "drafter-load", "drafter-init", "warmup"]);
}

#[test]
fn chat_applies_the_template_and_cuda_is_refused_clearly() {
    let p = pair();
    let chat = ["generate", "--model-path", path(&p.target), "--prompt", " w7 ", "--chat", "--max-new-tokens", "4", "--json"];
    let out = json_of(&specdeck(&chat));
    assert!(!ids(&out["tokens"]).is_empty());

    // This test machine has no NVIDIA driver: the probe's finding says so.
    if specdeck::backend::cuda::probe::CudaLibrary::Driver.is_present() {
        eprintln!("libcuda is present: the refusal of --device cuda without a driver is not checked here");
        return;
    }
    let cuda = specdeck(&["generate", "--model-path", path(&p.target), "--prompt", "w5", "--device", "cuda"]);
    assert_eq!(cuda.status.code(), Some(1));
    let err = String::from_utf8_lossy(&cuda.stderr);
    assert!(err.starts_with("error[cuda-unavailable] at preflight\n  --device cuda, but libcuda.so.1 was not found"), "{err}");
    assert!(err.contains("\n  fixes (specdeck generate --apply ID):\n    1. use-cpu-device [--device]\n"), "{err}");
}

#[test]
fn a_bad_checkpoint_exits_2_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    TinyLlama::new(Family::Llama, 3).write_edited(dir.path(), |t| drop(t.remove("model.norm.weight"))).unwrap();
    let out = specdeck(&["generate", "--model-path", path(dir.path()), "--prompt", "w5", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let dir = path(dir.path());
    let finding = format!("error[unreadable-input] at target-load\n  {dir}: no tensor named model.norm.weight\n\n    target {dir}\n");
    assert!(err.starts_with(&finding), "{err}");
}

#[test]
fn bench_aggregates_and_compares_with_target_only() {
    let p = pair();
    let prompts = p.dir.path().join("prompts.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"w5 w9 w11\"}\n\n{\"prompt\": \"w40 w41\", \"task_id\": \"x\"}\n").unwrap();
    let out = json_of(&specdeck(&[
        "bench",
        "--model-path",
        path(&p.target),
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        path(&p.eagle),
        "--prompts",
        path(&prompts),
        "--max-new-tokens",
        "16",
        "--compare-target-only",
        "--json",
    ]));
    assert_eq!(out["prompts"], 2);
    assert_eq!(out["identical"], true);
    assert_eq!(out["tokens"], out["target_only"]["tokens"]);
    assert_eq!(out["target_only"]["mean_accept_length"], 1.0);
    let steps = out["verify_steps"].as_u64().unwrap();
    let hist: u64 = ids(&out["accept_histogram"]).iter().sum();
    assert_eq!(hist, steps);
    // Target-only cycles draft nothing; speculative ones spend time on it.
    assert_eq!(out["target_only"]["draft_ms_per_cycle"], 0.0);
    assert!(out["draft_ms_per_cycle"].as_f64().unwrap() > 0.0);
    assert!(out["verify_ms_per_cycle"].as_f64().unwrap() > 0.0);
    // Both modes prefill every prompt before their first step.
    assert!(out["prefill_ms_median"].as_f64().unwrap() > 0.0);
    assert!(out["target_only"]["prefill_ms_median"].as_f64().unwrap() > 0.0);
    assert!(out["memory_bandwidth_gb_s"].as_f64().unwrap() > 0.1);
    assert!(out["target_weight_bytes"].as_u64().unwrap() > 0);

    std::fs::write(&prompts, "{\"text\": \"no prompt key\"}\n").unwrap();
    let bad = specdeck(&["bench", "--model-path", path(&p.target), "--prompts", path(&prompts)]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("prompts.jsonl: line 1: no \"prompt\" string"));
}

/// `generate` and `bench` run every preflight rule (as `check` and `launch` do) and stop at
/// the first error before anything loads: here the drafter reads target hidden states wider
/// than the target's, and the target's checkpoint lacks a tensor, which only its load would
/// find (exit 2 at target-load).
#[test]
fn generate_and_bench_stop_at_a_hidden_size_mismatch_before_anything_loads() {
    let dir = tempfile::tempdir().unwrap();
    let (target, eagle) = (dir.path().join("target"), dir.path().join("eagle"));
    let t = TinyLlama::new(Family::Qwen2, 31);
    let w = t.write_edited(&target, |t| drop(t.remove("model.norm.weight"))).unwrap();
    TinyEagle3::new(32).write(&eagle, &t, &w).unwrap();
    let config = eagle.join("config.json");
    let mut draft: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    draft["target_hidden_size"] = (t.hidden * 2).into();
    std::fs::write(&config, draft.to_string()).unwrap();
    let prompts = dir.path().join("prompts.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"w5 w9\"}\n").unwrap();

    let pair = ["--model-path", path(&target), "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", path(&eagle)];
    for command in [&["generate", "--prompt", "w5 w9", "--json"][..], &["bench", "--prompts", path(&prompts), "--json"]] {
        let out = specdeck(&[command, &pair[..]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {err}", command[0]);
        // --json: the findings as a JSON error object on stdout (tests/cli.rs has its shape).
        let error: Value = serde_json::from_slice::<Value>(&out.stdout).unwrap()["error"].clone();
        assert_eq!((&error["kind"], &error["findings"][0]["id"]), (&"preflight".into(), &"hidden-size-mismatch".into()), "{error}");
        let message = format!(
            "error[hidden-size-mismatch] at warmup\n  The drafter expects target hidden states of width {} (/target_hidden_size), but the",
            t.hidden * 2
        );
        assert!(err.starts_with(&message), "{}: {err}", command[0]);
        assert!(!err.contains("target-load") && !err.contains("model.norm.weight"), "{}: {err}", command[0]);
    }
}

#[test]
fn the_handle_runs_launch_generate_and_shutdown_as_events() {
    let p = pair();
    let (sink, mut rx) = EventSink::channel();
    let handle = EngineHandle::spawn(sink, Arc::new(|_: &LaunchSpec| Vec::new()));
    let spec = LaunchSpec {
        model_path: Some(path(&p.target).into()),
        draft_model_path: Some(path(&p.eagle).into()),
        speculative_algorithm: Some(Algorithm::Eagle3),
        ..LaunchSpec::default()
    };
    handle.send(EngineCommand::Launch(spec));
    handle.send(EngineCommand::Generate(GenerateRequest {
        prompt: "w5 w9 w17".into(),
        max_new_tokens: 10,
        chat: false,
        temperature: 0.0,
        seed: 0,
    }));
    handle.shutdown();
    let events: Vec<Event> = std::iter::from_fn(|| rx.try_recv().ok().map(|e| e.event)).collect();
    // `--device auto` first says which device it chose (here the CPU: no driver, or a GPU).
    assert!(matches!(&events[0], Event::Log { source, .. } if source == "cuda"), "{:?}", events[0]);
    assert!(matches!(events[1], Event::Launch { attempt: 1, .. }));
    let ready = events.iter().position(|e| matches!(e, Event::Ready { reused_target: false, .. })).unwrap();
    assert!(matches!(events[ready - 1], Event::Phase { phase: PhaseId::Ready, state: PhaseState::Done, .. }));
    let tokens: Vec<(Vec<u32>, bool)> = events[ready..]
        .iter()
        .filter_map(|e| match e {
            Event::Token { ids, drafted, .. } => Some((ids.clone(), *drafted)),
            _ => None,
        })
        .collect();
    let count: usize = tokens.iter().map(|(ids, _)| ids.len()).sum();
    let stats = events.iter().find_map(|e| match e {
        Event::Stats(s) => Some(s.clone()),
        _ => None,
    });
    let stats = stats.expect("a Stats event after generation");
    assert_eq!(stats.tokens, count);
    // Each verify step ends with the target's own token (not drafted), unless the token budget
    // cut the last one short.
    let own = tokens.iter().filter(|(_, d)| !d).count() as u64;
    let steps = stats.accept_histogram.iter().sum::<u64>();
    assert!(own == steps || own + 1 == steps, "{own} own tokens, {steps} steps");
    assert!(matches!(events.last(), Some(Event::Exit { code: 0, reason }) if reason == "shutdown"));
}

#[test]
fn apply_takes_a_remedy_from_the_preflight_finding() {
    let dir = tempfile::tempdir().unwrap();
    let (target, eagle) = (dir.path().join("t"), dir.path().join("d"));
    let t = TinyLlama::new(Family::Llama, 8);
    let w = t.write(&target).unwrap();
    TinyEagle3 { max_positions: 256, ..TinyEagle3::new(9) }.write(&eagle, &t, &w).unwrap();
    let mut args = vec!["generate", "--model-path", path(&target), "--speculative-algorithm", "EAGLE3"];
    args.extend(["--speculative-draft-model-path", path(&eagle), "--prompt", "w4 w5", "--max-new-tokens", "4", "--json"]);
    let refused = specdeck(&args);
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.starts_with("error[context-length-exceeds-draft] at drafter-init\n  The target's context length (512)"), "{err}");
    assert!(err.contains("\n  fixes (specdeck generate --apply ID):\n    1. clamp-context-length [--context-length]\n"), "{err}");
    args.extend(["--apply", "clamp-context-length"]);
    assert!(!ids(&json_of(&specdeck(&args))["tokens"]).is_empty());
}
