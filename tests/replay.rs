//! `specdeck replay`: the real excerpts of testdata/real-logs, the catalogue logs of
//! testdata/logs (built by scripts/build_replay_logs.py from the engines' exact format
//! strings) in plain, prefixed and multi-rank variants, JSONL round trips, the command line,
//! follow mode, and property tests that no input panics.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde::Deserialize;
use serde_json::Value;

use specdeck::event::{Event, GenerationStats, LogLevel, PhaseState, ProgressUnit, TimedEvent};
use specdeck::finding::{Evidence, Finding, Remedy, Severity, Side};
use specdeck::phase::PhaseId;
use specdeck::replay::print::{render_event, render_summary};
use specdeck::replay::{replay_bytes, run, Format, Outcome, ReplayOptions, ReplayReport, Source, UNRECOGNIZED};
use specdeck::spec::{LaunchSpec, SpecChange};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> Vec<u8> {
    fs::read(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn replay_file(rel: &str) -> (Vec<(u64, TimedEvent)>, ReplayReport) {
    replay_bytes(rel, &read(rel))
}

fn phases(r: &ReplayReport) -> Vec<(PhaseId, PhaseState)> {
    r.phases.iter().map(|p| (p.phase, p.state)).collect()
}

fn only_finding(r: &ReplayReport) -> &Finding {
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
    &r.findings[0]
}

fn log_evidence(file: &str, line: u64, value: &str) -> Evidence {
    Evidence::new(Side::Log, file, format!("line {line}"), value)
}

// ---------------------------------------------------------------------------------------------
// Real excerpts (testdata/real-logs/MANIFEST.md)

/// testdata/real-logs/manifest.json, one entry per excerpt.
#[derive(Deserialize, Debug)]
struct ManifestEntry {
    #[serde(rename = "final")]
    outcome: String,
    /// The phase it failed in or the last one reached; `runtime` is our `serving`.
    phase: Option<String>,
    finding: Option<String>,
}

/// The phase a report places the run in: the phase that failed, else the last one reached.
fn reported_phase(r: &ReplayReport) -> Option<PhaseId> {
    let failed = r.phases.iter().rev().find(|p| p.state == PhaseState::Failed);
    failed.or(r.phases.last()).map(|p| p.phase)
}

/// Where an excerpt and its manifest disagree because the excerpt does not hold the evidence:
/// file, field, what replay says, and why it cannot say more.
const LOG_DOES_NOT_SHOW: &[(&str, &str, &str, &str)] = &[
    (
        "sglang_4092_deepseekv3_nextn_no_get_embed_and_head.log",
        "finding",
        "unrecognized-failure",
        "the excerpt ends at eagle_worker.py's frame; the missing attribute is named only in the thread's title",
    ),
    ("vllm_5342_v0_ray_exceed_draft_context.log", "phase", "none", "three NCCL IB warnings, no line of start-up or serving"),
];

#[test]
fn every_real_log_gives_the_manifests_outcome_phase_and_finding() {
    let manifest: BTreeMap<String, ManifestEntry> = serde_json::from_slice(&read("testdata/real-logs/manifest.json")).unwrap();
    let on_disk = fs::read_dir(root().join("testdata/real-logs"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "log"))
        .count();
    assert_eq!((manifest.len(), on_disk), (31, 31), "every excerpt has its manifest entry");
    let mut wrong = Vec::new();
    for (file, want) in &manifest {
        let (_, r) = replay_file(&format!("testdata/real-logs/{file}"));
        let phase = reported_phase(&r);
        let ids: Vec<&str> = r.findings.iter().map(|f| f.id.as_str()).collect();
        let mut check = |field: &str, ok: bool, got: String| {
            let excused = LOG_DOES_NOT_SHOW.iter().any(|&(f, fld, g, _)| f == file.as_str() && fld == field && g == got);
            if ok == excused {
                wrong.push(format!("{file}: {field} {got}{}", if excused { " (listed as a miss, now right)" } else { "" }));
            }
        };
        check("final", r.outcome.name() == want.outcome, r.outcome.name().to_string());
        let want_phase = want.phase.as_deref().map(|p| if p == "runtime" { "serving" } else { p });
        let got_phase = phase.map_or("none", PhaseId::name);
        match want_phase {
            Some(p) => check("phase", got_phase == p, got_phase.to_string()),
            // The manifest cannot tell: replay must not claim a config error either.
            None => check("phase", phase != Some(PhaseId::Preflight), got_phase.to_string()),
        }
        let errors: Vec<&str> = r.findings.iter().filter(|f| f.severity == Severity::Error).map(|f| f.id.as_str()).collect();
        match &want.finding {
            Some(id) => check("finding", ids.contains(&id.as_str()), ids.join(",")),
            // No cause in the log: no confident fix, only `unrecognized-failure`.
            None => check("finding", errors.iter().all(|&id| id == UNRECOGNIZED), errors.join(",")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A paste whose newlines became spaces (a GitHub comment outside a code block) reads as the
/// log it came from.
#[test]
fn a_log_collapsed_onto_one_line_is_split_at_its_records() {
    for file in [
        "sglang_8336_eagle3_draft_graph_capture_startup.log",
        "sglang_28521_step37_draft_init_cuda_graphs.log",
        "sglang_3582_nextn_draft_worker_init.log",
    ] {
        let rel = format!("testdata/real-logs/{file}");
        let text = String::from_utf8(read(&rel)).unwrap();
        let one_line = text.lines().map(str::trim_start).collect::<Vec<_>>().join(" ");
        let (_, lines) = replay_bytes(&rel, text.as_bytes());
        let (_, collapsed) = replay_bytes(&rel, one_line.as_bytes());
        assert_eq!(collapsed.lines, 1);
        assert_eq!((collapsed.outcome, phases(&collapsed)), (lines.outcome, phases(&lines)), "{file}");
        let ids = |r: &ReplayReport| r.findings.iter().map(|f| (f.id.clone(), f.phase)).collect::<Vec<_>>();
        assert_eq!(ids(&collapsed), ids(&lines), "{file}");
    }
}

#[test]
fn ktransformers_2007_fails_in_target_graph_capture_unresolved() {
    let file = "testdata/real-logs/ktransformers_2007_kimi_k25_eagle_capture_crash.log";
    let (_, r) = replay_file(file);
    assert_eq!(r.format, Format::Sglang);
    assert_eq!(r.engine_version_guess.as_deref(), Some("sglang 0.5.9 wording"));
    assert_eq!(
        phases(&r),
        [(PhaseId::TargetLoad, PhaseState::Done), (PhaseId::KvAlloc, PhaseState::Done), (PhaseId::TargetGraphCapture, PhaseState::Failed)]
    );
    // MANIFEST: root cause unresolved, and the excerpt stops inside the traceback.
    let f = only_finding(&r);
    assert_eq!((f.id.as_str(), f.phase), (UNRECOGNIZED, PhaseId::TargetGraphCapture));
    assert!(f.message.contains("cut short"), "{}", f.message);
    assert!(f.remedies.is_empty());
    let frame =
        "  File \"/home/kt-test/.venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py\", line 521, in init_tp_model_worker";
    assert_eq!(
        f.evidence,
        [
            log_evidence(file, 15, frame),
            log_evidence(file, 7, "[2026-05-15 19:00:54] Scheduler hit an exception: Traceback (most recent call last):")
        ]
    );
    assert_eq!(r.outcome, Outcome::Failed);
}

#[test]
fn sglang_10088_shows_both_captures_ending() {
    let (events, r) = replay_file("testdata/real-logs/sglang_10088_target_and_draft_graph_capture_end_success.log");
    assert_eq!(phases(&r), [(PhaseId::TargetGraphCapture, PhaseState::Done), (PhaseId::DraftGraphCapture, PhaseState::Done)]);
    assert!(r.findings.is_empty());
    assert_eq!(r.outcome, Outcome::Incomplete);
    // 20:48:29 → 20:50:29: the draft capture ends two minutes after the target's.
    assert_eq!(r.phases[1].end_time, Some(120.0));
    let ranks: Vec<&str> = events
        .iter()
        .filter_map(|(_, e)| match &e.event {
            Event::Log { source, .. } => Some(source.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ranks, ["sglang TP0", "sglang TP6"]);
}

#[test]
fn sglang_4092_fails_in_draft_init_and_the_cut_traceback_is_not_guessed() {
    let file = "testdata/real-logs/sglang_4092_deepseekv3_nextn_no_get_embed_and_head.log";
    let (_, r) = replay_file(file);
    assert_eq!(phases(&r), [(PhaseId::DrafterInit, PhaseState::Failed)]);
    // The excerpt stops at the frame `eagle_worker.py line 68 in __init__`, before the error
    // line: the phase is certain, the cause is not in the excerpt.
    let f = only_finding(&r);
    assert_eq!((f.id.as_str(), f.phase), (UNRECOGNIZED, PhaseId::DrafterInit));
    assert!(f.message.contains("sglang/srt/speculative/eagle_worker.py in __init__"), "{}", f.message);

    // With the error line the title quotes, the MANIFEST's root cause.
    let mut full = read(file);
    full.extend_from_slice(b"    embed, head = self.target_worker.model_runner.model.get_embed_and_head()\n");
    full.extend_from_slice(b"AttributeError: 'DeepseekV3ForCausalLM' object has no attribute 'get_embed_and_head'\n");
    let (_, r) = replay_bytes(file, &full);
    let f = only_finding(&r);
    assert_eq!((f.id.as_str(), f.severity, f.phase), ("target-no-capture-support", Severity::Error, PhaseId::DrafterInit));
    assert!(f.message.contains("DeepseekV3ForCausalLM has no get_embed_and_head"), "{}", f.message);
    assert_eq!(f.evidence[0].key, "line 8");
}

#[test]
fn jpezzulli_warning_is_the_override_form_not_a_failure() {
    let file = "testdata/real-logs/sglang_fork_jpezzulli19_draft_ctx_override_warning.log";
    let (_, r) = replay_file(file);
    let f = only_finding(&r);
    assert_eq!((f.id.as_str(), f.severity, f.phase), ("context-length-exceeds-draft", Severity::Warning, PhaseId::DrafterInit));
    assert!(f.message.contains("(524288)") && f.message.contains("(262144)"), "{}", f.message);
    let line = String::from_utf8(read(file)).unwrap();
    assert_eq!(f.evidence, [log_evidence(file, 1, line.trim_end())]);
    assert_eq!(
        f.remedies,
        [Remedy::new(
            "clamp-context-length",
            "--context-length",
            "Run the target at the drafter's context length: --context-length 262144.",
            vec![SpecChange::SetFlag { flag: "--context-length".into(), value: "262144".into() }]
        )]
    );
    assert_eq!(r.outcome, Outcome::Incomplete);
}

#[test]
fn vllm_22152_fails_config_validation_on_the_target_allow_list() {
    let (_, r) = replay_file("testdata/real-logs/vllm_22152_eagle3_only_llama_qwen3.log");
    assert_eq!(r.format, Format::Vllm);
    let f = only_finding(&r);
    assert_eq!((f.id.as_str(), f.phase), ("target-no-capture-support", PhaseId::Preflight));
    assert!(f.message.contains("only for Llama targets") && f.message.contains("'qwen3'"), "{}", f.message);
    assert_eq!(phases(&r), [(PhaseId::Preflight, PhaseState::Failed)]);
    assert_eq!(r.outcome, Outcome::Failed);
}

#[test]
fn vllm_pr34022_reaches_ready() {
    let (events, r) = replay_file("testdata/real-logs/vllm_pr34022_eagle3_llama31_app_startup_complete.log");
    assert_eq!(r.format, Format::Vllm);
    assert_eq!(r.outcome, Outcome::Ready);
    assert!(r.findings.is_empty());
    assert!(events.iter().any(|(l, e)| *l == 3 && matches!(e.event, Event::Ready { .. })));
}

#[test]
fn headless_output_of_a_real_excerpt() {
    let file = "testdata/real-logs/ktransformers_2007_kimi_k25_eagle_capture_crash.log";
    let (events, r) = replay_file(file);
    let mut out: Vec<String> = events.iter().filter_map(|(l, e)| render_event(*l, e)).collect();
    out.push(render_summary(&r));
    insta::assert_snapshot!(out.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Catalogue logs (testdata/logs/cases.json)

#[derive(Deserialize)]
struct Case {
    log: String,
    format: String,
    version_guess: String,
    findings: Vec<ExpectedFinding>,
    #[serde(rename = "final")]
    outcome: String,
}

#[derive(Deserialize, Debug)]
struct ExpectedFinding {
    id: String,
    severity: String,
    phase: String,
    remedies: Vec<ExpectedRemedy>,
}

#[derive(Deserialize, Debug)]
struct ExpectedRemedy {
    id: String,
    changes: Vec<String>,
}

fn cases() -> Vec<Case> {
    serde_json::from_slice(&read("testdata/logs/cases.json")).expect("cases.json parses")
}

/// Variants of a log as shippers deliver it. Each keeps line numbers.
fn variants(text: &str, format: &str) -> Vec<(&'static str, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let prefixed =
        |prefix: &dyn Fn(usize) -> String| lines.iter().enumerate().map(|(i, l)| format!("{}{l}\n", prefix(i))).collect::<String>();
    let mut out = vec![
        ("plain", text.to_string()),
        ("docker compose", prefixed(&|_| "llm0-1  | ".to_string())),
        (
            "kubernetes stamps + ANSI",
            lines
                .iter()
                .enumerate()
                .map(|(i, l)| format!("2026-03-02T09:{:02}:{:02}.{:09}Z \x1b[32m{l}\x1b[0m\n", i / 60 % 60, i % 60, i * 7919))
                .collect(),
        ),
        ("CRLF", lines.iter().map(|l| format!("{l}\r\n")).collect()),
    ];
    if format == "sglang" {
        out.push(("ray", prefixed(&|_| "(SGLangEngine pid=4242) ".to_string())));
    }
    out
}

/// The text at line `n` as replay cites it: CR and ANSI gone, the last tqdm state.
fn cited_line(text: &str, n: u64) -> String {
    let line = text.split('\n').nth(n as usize - 1).unwrap_or("");
    let line = line.strip_suffix('\r').unwrap_or(line);
    let stripped = String::from_utf8(strip_ansi_escapes::strip(line.as_bytes())).unwrap();
    stripped.rsplit('\r').next().unwrap_or("").to_string()
}

fn check_case(case: &Case, variant: &str, text: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let (_, r) = replay_bytes(&case.log, text.as_bytes());
    let mut fail = |what: String| errors.push(format!("{} [{variant}]: {what}", case.log));
    if r.format.name() != case.format {
        fail(format!("format {:?}", r.format));
    }
    if r.engine_version_guess.as_deref() != Some(case.version_guess.as_str()) {
        fail(format!("version guess {:?}", r.engine_version_guess));
    }
    if r.outcome.name() != case.outcome {
        fail(format!("final {:?}", r.outcome));
    }
    let got: Vec<(String, String, String)> =
        r.findings.iter().map(|f| (f.id.clone(), f.severity.name().to_string(), f.phase.name().to_string())).collect();
    let want: Vec<(String, String, String)> = case.findings.iter().map(|f| (f.id.clone(), f.severity.clone(), f.phase.clone())).collect();
    if got != want {
        fail(format!("findings {got:?}, want {want:?}"));
        return errors;
    }
    for (f, w) in r.findings.iter().zip(&case.findings) {
        let remedies: Vec<(String, Vec<String>)> =
            f.remedies.iter().map(|r| (r.id.clone(), r.changes.iter().map(SpecChange::describe).collect())).collect();
        let wanted: Vec<(String, Vec<String>)> = w.remedies.iter().map(|r| (r.id.clone(), r.changes.clone())).collect();
        if remedies != wanted {
            fail(format!("{} remedies {remedies:?}, want {wanted:?}", f.id));
        }
        if f.evidence.is_empty() {
            fail(format!("{} has no evidence", f.id));
        }
        for e in &f.evidence {
            let n: u64 = e.key.strip_prefix("line ").and_then(|n| n.parse().ok()).unwrap_or(0);
            let ok = e.side == Side::Log && e.file == case.log && n > 0 && e.value == cited_line(text, n);
            if !ok {
                fail(format!("{} evidence {e:?} is not line {n} of the input", f.id));
            }
        }
    }
    errors
}

#[test]
fn every_catalogue_log_gives_its_findings_in_every_variant() {
    let cases = cases();
    assert!(cases.len() >= 300, "cases.json lists {} logs; run scripts/build_replay_logs.py", cases.len());
    let mut errors = Vec::new();
    let mut checked = 0;
    for case in &cases {
        let text = String::from_utf8(read(&format!("testdata/logs/{}", case.log))).unwrap();
        for (variant, body) in variants(&text, &case.format) {
            errors.extend(check_case(case, variant, &body));
            checked += 1;
        }
    }
    assert!(errors.is_empty(), "{} of {checked} replays wrong:\n{}", errors.len(), errors.join("\n"));
}

/// testdata/logs/messages.txt: catalogue messages without a whole scenario, each replayed as
/// a one-line log of its engine.
#[test]
fn every_catalogue_message_alone_gives_its_finding() {
    let text = String::from_utf8(read("testdata/logs/messages.txt")).unwrap();
    let mut errors = Vec::new();
    for line in text.lines() {
        let [engine, expect, message] = line.splitn(3, '\t').collect::<Vec<_>>()[..] else { panic!("bad line {line:?}") };
        let log = match engine {
            "sglang" => format!("[2026-03-02 10:00:00 TP0] {message}\n"),
            "llama.cpp" => format!("0.00.000.000 I {message}\n"),
            _ => format!("(EngineCore_DP0 pid=200) ERROR 03-02 10:00:00 [core.py:718] {message}\n"),
        };
        let (_, r) = replay_bytes("one.log", log.as_bytes());
        let got: Vec<&str> = r.findings.iter().map(|f| f.id.as_str()).collect();
        let want: Vec<&str> = if expect == "-" { vec![] } else { vec![expect] };
        if got != want || r.format.name() != engine {
            errors.push(format!("{message:?}: findings {got:?} in a {:?} log, want {want:?}", r.format));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn the_catalogue_covers_every_wording_with_both_rank_layouts() {
    let cases = cases();
    let mut by_case: BTreeMap<(String, String), Vec<bool>> = BTreeMap::new();
    for c in &cases {
        let dir = c.log.split('/').next().unwrap().to_string();
        let name = c.log.rsplit('/').next().unwrap().split('.').next().unwrap().to_string();
        by_case.entry((dir, name)).or_default().push(c.log.contains(".tp4."));
    }
    for ((dir, name), layouts) in &by_case {
        assert!(layouts.contains(&true) && layouts.contains(&false), "{dir}/{name}: needs a 1-rank and a 4-rank log");
    }
    for dir in ["sglang-classic", "sglang-mid", "sglang-new", "vllm-0.10", "vllm-0.33"] {
        let n = by_case.keys().filter(|(d, _)| d == dir).count();
        assert!(n >= 6, "{dir}: only {n} cases");
    }
}

#[test]
fn capture_bars_become_batch_size_progress_and_times_follow_the_stamps() {
    let (events, r) = replay_file("testdata/logs/sglang-classic/success.log");
    let labels: Vec<(PhaseId, String, u64, u64)> = events
        .iter()
        .filter_map(|(_, e)| match &e.event {
            Event::Progress { phase, unit: ProgressUnit::BatchSize, label, done, total, .. } => {
                Some((*phase, label.clone(), *done, *total))
            }
            _ => None,
        })
        .take(5)
        .collect();
    let want: Vec<(PhaseId, String, u64, u64)> = [("8", 0), ("4", 1), ("2", 2), ("1", 3), ("1", 4)]
        .iter()
        .map(|(bs, done)| (PhaseId::TargetGraphCapture, bs.to_string(), *done, 4))
        .collect();
    assert_eq!(labels, want);
    let shards = events.iter().find_map(|(_, e)| match &e.event {
        Event::Progress { phase, unit: ProgressUnit::Items, label, total, .. } => Some((*phase, label.clone(), *total)),
        _ => None,
    });
    assert_eq!(shards, Some((PhaseId::TargetLoad, "checkpoint shards".to_string(), 4)));
    // The log starts at 10:00:00; the ready line is stamped 10:01:22.
    let ready = events.iter().find(|(_, e)| matches!(e.event, Event::Ready { .. })).unwrap();
    assert_eq!(ready.1.t, 82.0);
    assert_eq!(r.accept_len, Some(2.85));
}

#[test]
fn warning_level_logs_are_timed_from_tqdm_bars_alone() {
    // `--log-level warning` prints no phase marker: only bars, warnings and errors.
    let text = String::from_utf8(read("testdata/logs/sglang-classic/success.log")).unwrap();
    let bars: String = text.lines().filter(|l| !l.starts_with('[') && !l.starts_with("INFO:")).map(|l| format!("{l}\n")).collect();
    let (_, r) = replay_bytes("bars.log", bars.as_bytes());
    assert_eq!(
        phases(&r),
        [
            (PhaseId::TargetLoad, PhaseState::Done),
            (PhaseId::TargetGraphCapture, PhaseState::Done),
            (PhaseId::DrafterLoad, PhaseState::Done),
            (PhaseId::DraftGraphCapture, PhaseState::Done)
        ]
    );
    assert_eq!(r.outcome, Outcome::Incomplete);
}

#[test]
fn a_chained_vllm_traceback_is_one_failure_with_its_recognised_cause() {
    let h = "(EngineCore_DP0 pid=200) ERROR 03-02 10:00:34 [core.py:718]";
    let log = [
        "EngineCore failed to start.",
        "Traceback (most recent call last):",
        "  File \"/usr/lib/python3/dist-packages/vllm/v1/worker/gpu_model_runner.py\", line 3000, in profile_run",
        "torch.AcceleratorError: CUDA error: out of resources",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        "  File \"/usr/lib/python3/dist-packages/vllm/v1/worker/gpu_worker.py\", line 250, in determine_available_memory",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
    ]
    .iter()
    .map(|m| if m.is_empty() { format!("{h}\n") } else { format!("{h} {m}\n") })
    .collect::<String>();
    let (_, r) = replay_bytes("chain.log", log.as_bytes());
    let f = only_finding(&r);
    assert_eq!((f.id.as_str(), f.phase), ("memory-budget", PhaseId::KvAlloc));
    assert_eq!(f.evidence[0].key, "line 10");
    assert_eq!(r.outcome, Outcome::Failed);
}

#[test]
fn a_second_server_start_in_the_same_file_is_a_new_launch() {
    let first = read("testdata/logs/sglang-new/kv-not-enough-memory.log");
    let second = read("testdata/logs/sglang-new/success.log");
    let (events, r) = replay_bytes("two.log", &[first, second].concat());
    let attempts: Vec<u32> = events
        .iter()
        .filter_map(|(_, e)| match e.event {
            Event::Launch { attempt, .. } => Some(attempt),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, [1, 2]);
    assert_eq!(r.outcome, Outcome::Ready);
    assert_eq!(r.findings.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(), ["memory-budget"]);
}

// ---------------------------------------------------------------------------------------------
// JSONL

fn demo_events() -> Vec<TimedEvent> {
    let spec = LaunchSpec::from_command_line("x --model-path t --speculative-draft-model-path d --speculative-algorithm EAGLE3").unwrap();
    let finding = Finding::new("context-length-exceeds-draft", Severity::Error, PhaseId::DrafterInit, "too long")
        .with_evidence(Evidence::new(Side::Target, "t/config.json", "/max_position_embeddings", 4096))
        .with_remedy(Remedy::new(
            "clamp-context-length",
            "--context-length",
            "clamp",
            vec![SpecChange::SetFlag { flag: "--context-length".into(), value: "2048".into() }],
        ));
    let phase = |phase, state| Event::Phase { phase, state, detail: None };
    let events = vec![
        Event::Launch { attempt: 1, spec: spec.clone() },
        phase(PhaseId::Preflight, PhaseState::Started),
        Event::Finding(finding),
        phase(PhaseId::Preflight, PhaseState::Failed),
        Event::RemedyApplied {
            id: "clamp-context-length".into(),
            changes: vec![SpecChange::SetFlag { flag: "--context-length".into(), value: "2048".into() }],
        },
        Event::Launch { attempt: 2, spec },
        phase(PhaseId::Preflight, PhaseState::Started),
        phase(PhaseId::Preflight, PhaseState::Done),
        phase(PhaseId::KernelCompile, PhaseState::Skipped),
        phase(PhaseId::TargetLoad, PhaseState::Started),
        Event::Progress {
            phase: PhaseId::TargetLoad,
            unit: ProgressUnit::Bytes,
            gpu: None,
            label: "model.safetensors".into(),
            done: 1 << 20,
            total: 1 << 20,
        },
        phase(PhaseId::TargetLoad, PhaseState::Done),
        Event::Log { level: LogLevel::Info, source: "engine".into(), line: "backend: cpu".into() },
        phase(PhaseId::Ready, PhaseState::Done),
        Event::Ready { elapsed_s: 0.25, reused_target: false },
        Event::Token { ids: vec![9906, 11], text: "Hello,".into(), drafted: true },
        Event::Stats(GenerationStats { tokens: 2, tokens_per_s: 40.0, mean_accept_length: 2.0, accept_histogram: vec![0, 0, 1] }),
        Event::Exit { code: 0, reason: "shutdown".into() },
    ];
    events.into_iter().enumerate().map(|(i, event)| TimedEvent { t: i as f64 * 0.125, event }).collect()
}

#[test]
fn jsonl_replays_events_exactly() {
    let events = demo_events();
    let jsonl: String = events.iter().map(|e| e.to_json_line() + "\n").collect();
    let (got, r) = replay_bytes("demo.jsonl", jsonl.as_bytes());
    let got: Vec<TimedEvent> = got.into_iter().map(|(_, e)| e).collect();
    assert_eq!(got, events);
    assert_eq!(r.format, Format::Jsonl);
    assert_eq!(r.outcome, Outcome::Ready);
    assert_eq!(r.accept_len, Some(2.0));
    assert_eq!(r.findings.len(), 1);
    // The relaunch's timeline: the first attempt's failed preflight is not in it.
    assert_eq!(phases(&r)[0], (PhaseId::Preflight, PhaseState::Done));
    assert_eq!(r.phases[0].start_line, 7);
}

#[test]
fn a_text_replay_recorded_as_jsonl_replays_to_the_same_events() {
    let (events, report) = replay_file("testdata/logs/sglang-mid/graph-capture-oom.tp4.log");
    let jsonl: String = events.iter().map(|(_, e)| e.to_json_line() + "\n").collect();
    let (again, report2) = replay_bytes("rec.jsonl", jsonl.as_bytes());
    let again: Vec<TimedEvent> = again.into_iter().map(|(_, e)| e).collect();
    assert_eq!(again, events.into_iter().map(|(_, e)| e).collect::<Vec<_>>());
    assert_eq!((report2.outcome, report2.findings), (report.outcome, report.findings));
}

#[test]
fn a_bad_jsonl_line_is_named_and_skipped() {
    let events = demo_events();
    let jsonl = format!("{}\n{{\"t\": oops\n{}\n", events[0].to_json_line(), events[1].to_json_line());
    let (got, _) = replay_bytes("demo.jsonl", jsonl.as_bytes());
    assert_eq!(got.len(), 3);
    assert!(matches!(&got[1].1.event, Event::Log { line, .. } if line.starts_with("demo.jsonl:2: not a specdeck event")));
    assert_eq!(got[2].1, events[1]);
}

// ---------------------------------------------------------------------------------------------
// Robustness

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let (_, r) = replay_bytes("fuzz.log", &bytes);
        prop_assert!(matches!(r.outcome, Outcome::Ready | Outcome::Failed | Outcome::Incomplete));
    }

    /// Cut anywhere, fed in any chunks: no panic, and the chunking never changes the events.
    #[test]
    fn truncated_logs_in_any_chunks_replay_the_same(case in 0usize..304, cut in 0.0f64..1.0, splits in proptest::collection::vec(1usize..512, 1..40)) {
        let cases = cases();
        let log = format!("testdata/logs/{}", cases[case % cases.len()].log);
        let bytes = read(&log);
        let bytes = &bytes[..(bytes.len() as f64 * cut) as usize];
        let (whole, _) = replay_bytes(&log, bytes);
        let mut replayer = specdeck::replay::Replayer::new(&log, true);
        let mut chunked = Vec::new();
        let mut at = 0;
        for n in splits.iter().cycle() {
            if at >= bytes.len() { break; }
            let end = (at + n).min(bytes.len());
            replayer.feed(&bytes[at..end], &mut |l, e| chunked.push((l, e)));
            at = end;
        }
        replayer.finish(&mut |l, e| chunked.push((l, e)));
        prop_assert_eq!(chunked, whole);
    }

    /// Garbage spliced into a real log (binary noise, broken UTF-8, stray escapes) never panics.
    #[test]
    fn noise_in_a_log_never_panics(at in 0.0f64..1.0, noise in proptest::collection::vec(any::<u8>(), 1..256)) {
        let mut bytes = read("testdata/logs/sglang-new/graph-capture-oom.tp4.log");
        let pos = (bytes.len() as f64 * at) as usize;
        bytes.splice(pos..pos, noise);
        let _ = replay_bytes("noisy.log", &bytes);
    }
}

#[test]
fn a_huge_line_without_newlines_is_bounded() {
    let mut bytes = b"[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=1.00 GB\n".to_vec();
    bytes.extend(std::iter::repeat_n(b'x', 8 << 20));
    bytes.extend_from_slice(b"\n[2026-01-01 00:00:09 TP0] Memory pool end. avail mem=1.00 GB\n");
    let (events, r) = replay_bytes("huge.log", &bytes);
    assert_eq!(r.lines, 3);
    let longest = events
        .iter()
        .filter_map(|(_, e)| match &e.event {
            Event::Log { line, .. } => Some(line.len()),
            _ => None,
        })
        .max();
    assert_eq!(longest, Some(specdeck::replay::lines::MAX_LINE_BYTES));
    assert_eq!(r.phases.last().map(|p| (p.phase, p.end_time)), Some((PhaseId::KvAlloc, Some(9.0))));
}

// ---------------------------------------------------------------------------------------------
// The command line

fn specdeck(args: &[&str], stdin: Option<&[u8]>) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_specdeck"))
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = stdin.unwrap_or_default().to_vec();
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || pipe.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn json_output_and_exit_codes() {
    let (code, out, _) = specdeck(&["replay", "--json", "testdata/logs/sglang-classic/context-draft-error.log"], None);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["format"], "sglang");
    assert_eq!(v["engine_version_guess"], "sglang 0.4.10–0.5.2 wording");
    assert_eq!(v["final"], "failed");
    assert_eq!(v["findings"][0]["id"], "context-length-exceeds-draft");
    assert_eq!(v["findings"][0]["evidence"][0]["side"], "log");
    assert_eq!(v["findings"][0]["remedies"][1]["changes"][0]["name"], "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN");
    let last = v["phases"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["phase"], "drafter-init");
    for key in ["start_line", "end_line", "start_time", "end_time"] {
        assert!(last[key].is_number(), "{key}: {last}");
    }
    assert!(v["accept_len"].is_null());

    let (code, out, _) = specdeck(&["replay", "--json", "testdata/logs/vllm-0.33/success.log"], None);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["final"].as_str(), v["accept_len"].as_f64()), (Some("ready"), Some(2.77)));

    let (code, _, _) =
        specdeck(&["replay", "--json", "testdata/real-logs/sglang_10088_target_and_draft_graph_capture_end_success.log"], None);
    assert_eq!(code, 3);
}

#[test]
fn stdin_and_headless_output() {
    let log = read("testdata/logs/sglang-new/draft-tokens-steps.log");
    let (code, out, _) = specdeck(&["replay", "-", "--headless"], Some(&log));
    assert_eq!(code, 1);
    assert!(out.contains("  line 15    error[speculative-args] at preflight\n"), "{out}");
    let fixes = [
        "  fixes (--apply ID):",
        "    1. draft-tokens-steps-plus-1 [--speculative-num-draft-tokens]",
        "       With topk 1, draft tokens = steps + 1: --speculative-num-draft-tokens 6.",
        "         --speculative-num-draft-tokens 6",
    ];
    assert!(out.contains(&fixes.map(|l| format!("{}{l}\n", " ".repeat(20))).concat()), "{out}");
    assert!(out.contains("replay of <stdin>: sglang (sglang 0.5.23 wording)"), "{out}");
    assert!(out.contains("final: failed (exit 1)"), "{out}");
}

#[test]
fn follow_json_answers_once_the_launch_is_decided() {
    // With --follow --json the command waits for ready or a failure, then prints the report.
    let mut child = Command::new(env!("CARGO_BIN_EXE_specdeck"))
        .args(["replay", "--follow", "--json", "testdata/logs/vllm-0.33/kv-cache-too-small.log"])
        .current_dir(root())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("replay --follow --json did not end after the failure");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["final"].as_str(), v["findings"][0]["id"].as_str()), (Some("failed"), Some("memory-budget")));
}

#[test]
fn unreadable_input_names_the_file() {
    let (code, _, err) = specdeck(&["replay", "no/such.log"], None);
    assert_eq!(code, 2);
    assert!(err.contains("no/such.log: cannot open the log"), "{err}");
    let (code, _, err) = specdeck(&["replay", "--speed=-1", "testdata/logs/vllm-0.33/success.log"], None);
    assert_eq!(code, 2);
    assert!(err.contains("--speed"), "{err}");
}

#[test]
fn speed_paces_by_recorded_time() {
    // The demo events span 2.125 s of recorded time: at 8x the replay takes at least 1/8 of
    // that; at 0 (no pacing) it does not sleep.
    let events = demo_events();
    let jsonl: String = events.iter().map(|e| e.to_json_line() + "\n").collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.jsonl");
    fs::write(&path, jsonl).unwrap();
    let source = Source::Path(path);
    let span = events.last().unwrap().t;
    let time = |speed: f64| {
        let start = Instant::now();
        run(&source, &ReplayOptions { speed, ..Default::default() }, &mut |_, _| {}, &mut |_| false).unwrap();
        start.elapsed()
    };
    assert!(time(8.0) >= Duration::from_secs_f64(span / 8.0));
    assert!(time(0.0) < Duration::from_secs_f64(span / 8.0));
}

// ---------------------------------------------------------------------------------------------
// Follow mode

struct Follower {
    events: mpsc::Receiver<(Instant, TimedEvent)>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<ReplayReport>>,
}

impl Follower {
    fn start(path: &Path) -> Follower {
        let (tx, events) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let source = Source::Path(path.to_path_buf());
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let opts = ReplayOptions { follow: true, ..Default::default() };
            run(&source, &opts, &mut |_, e| tx.send((Instant::now(), e)).unwrap(), &mut |_| flag.load(Ordering::SeqCst)).unwrap()
        });
        Follower { events, stop, thread: Some(thread) }
    }

    /// Waits (up to 5 s) for an event that `pred` accepts; returns when it arrived.
    fn wait_for(&self, what: &str, pred: impl Fn(&Event) -> bool) -> Instant {
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.events.recv_timeout(left) {
                Ok((at, e)) if pred(&e.event) => return at,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("follow: no {what} within 5 s");
    }

    fn finish(mut self) -> ReplayReport {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new().append(true).create(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

fn is_phase(e: &Event, p: PhaseId, s: PhaseState) -> bool {
    matches!(e, Event::Phase { phase, state, .. } if *phase == p && *state == s)
}

#[test]
fn follow_tails_a_growing_log_and_diagnoses_fast() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.log");
    let text = String::from_utf8(read("testdata/logs/sglang-classic/context-draft-error.log")).unwrap();
    let (head, tail) = text.split_at(text.find("Scheduler hit an exception").unwrap() - 26);
    fs::write(&path, head).unwrap();
    let f = Follower::start(&path);
    f.wait_for("target capture end", |e| is_phase(e, PhaseId::TargetGraphCapture, PhaseState::Done));
    let written = Instant::now();
    append(&path, tail.as_bytes());
    let seen = f.wait_for("the diagnosis", |e| matches!(e, Event::Finding(f) if f.id == "context-length-exceeds-draft"));
    let latency = seen.duration_since(written);
    assert!(latency < Duration::from_millis(1000), "diagnosed {latency:?} after the error was written");
    let r = f.finish();
    assert_eq!(r.outcome, Outcome::Failed);
}

#[test]
fn follow_reads_a_last_line_before_its_newline_and_only_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.log");
    let text = String::from_utf8(read("testdata/logs/sglang-classic/success.log")).unwrap();
    let marker = "The server is fired up and ready to roll!";
    let at = text.find(marker).unwrap();
    let line_start = text[..at].rfind('\n').unwrap() + 1;
    let ready_line = text[..line_start].matches('\n').count() as u64 + 1;
    fs::write(&path, &text[..line_start]).unwrap();
    let f = Follower::start(&path);
    f.wait_for("the warm-up", |e| is_phase(e, PhaseId::Warmup, PhaseState::Started));
    // The server writes its ready line, and its newline only later: the writer is still there.
    let mut writer = fs::OpenOptions::new().append(true).open(&path).unwrap();
    writer.write_all(&text.as_bytes()[line_start..at + marker.len()]).unwrap();
    let written = Instant::now();
    let seen = f.wait_for("ready from the line without its newline", |e| matches!(e, Event::Ready { .. }));
    assert!(seen.duration_since(written) < Duration::from_millis(1500), "{:?}", seen.duration_since(written));
    writer.write_all(b"\n[2026-03-02 10:01:23 TP0] Decode batch. #running-req: 4, #token: 1200, token usage: 0.01, accept len: 2.83, cuda graph: True, gen throughput (token/s): 250.00, #queue-req: 0\n").unwrap();
    f.wait_for("the decode stats after it", |e| matches!(e, Event::Stats(_)));
    let r = f.finish();
    // The ready line was read once, under its own number; the decode line is the next.
    assert_eq!(r.lines, ready_line + 1);
    let ready = r.phases.iter().find(|p| p.phase == PhaseId::Ready).unwrap();
    assert_eq!((ready.start_line, ready.end_line), (ready_line, Some(ready_line)));
    assert_eq!(r.outcome, Outcome::Ready);
}

#[test]
fn follow_survives_truncation_and_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.log");
    let failing = read("testdata/logs/sglang-new/kv-not-enough-memory.log");
    let ok = read("testdata/logs/sglang-new/success.log");
    fs::write(&path, &failing).unwrap();
    let f = Follower::start(&path);
    f.wait_for("the first diagnosis", |e| matches!(e, Event::Finding(f) if f.id == "memory-budget"));

    // Truncation in place (copytruncate, `> log`), then a new run written. Its first part is
    // shorter than the old file, so the truncation shows even if no event woke the follower.
    fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let first = 1000;
    assert!(first < failing.len());
    append(&path, &ok[..first]);
    f.wait_for("the restarted target load", |e| is_phase(e, PhaseId::TargetLoad, PhaseState::Started));
    append(&path, &ok[first..]);
    f.wait_for("ready after truncation", |e| matches!(e, Event::Ready { .. }));

    // Rotation: the log is renamed away and a new file takes its path.
    fs::rename(&path, dir.path().join("server.log.1")).unwrap();
    fs::write(&path, &failing).unwrap();
    f.wait_for("the rotated file's diagnosis", |e| matches!(e, Event::Finding(f) if f.id == "memory-budget"));
    let r = f.finish();
    assert_eq!(r.outcome, Outcome::Failed);
}

#[test]
fn follow_waits_for_a_log_that_does_not_exist_yet() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("later.log");
    let f = Follower::start(&path);
    std::thread::sleep(Duration::from_millis(200));
    fs::write(&path, read("testdata/logs/vllm-0.10/success.log")).unwrap();
    f.wait_for("ready", |e| matches!(e, Event::Ready { .. }));
    assert_eq!(f.finish().outcome, Outcome::Ready);
}
