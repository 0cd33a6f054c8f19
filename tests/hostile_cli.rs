//! Hostile and unlucky command lines (issue 23, the commands layer): a stdout whose reader is
//! gone, signals during a generation, flags at the edges of their ranges. Each case must end
//! quickly, without a panic, with the status and message the issue names.

mod common;

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::tiny_pair::pair;
use specdeck::engine::handle::{EngineCommand, EngineHandle};
use specdeck::event::{Event, EventSink};
use specdeck::spec::LaunchSpec;

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn specdeck() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_specdeck"));
    c.env_clear().env("SPECDECK_NVML", "off");
    c
}

// ---- broken pipe ----

/// Runs with stdout a pipe whose read end is already closed, so the first write fails.
fn with_closed_stdout(args: &[&str], home: &Path) -> Output {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes; each is owned once.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    specdeck().args(args).env("HOME", home).stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).output().unwrap()
}

fn assert_ends_quietly(args: &[&str], home: &Path) {
    let out = with_closed_stdout(args, home);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert!(!stderr.contains("failed printing"), "{args:?}: {stderr}");
    let sigpipe = out.status.signal() == Some(libc::SIGPIPE) || out.status.code() == Some(141);
    assert!(sigpipe, "{args:?} ended with {:?}: {stderr}", out.status);
}

#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    let p = pair();
    let prompts = p.dir.path().join("prompts.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"w5 w9\"}\n").unwrap();
    let (target, eagle) = (path(&p.target), path(&p.eagle));
    let spec = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", eagle];
    let log = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/demo/recorded-run.jsonl");
    let mut cases: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["check", "--help"],
        vec!["--version"],
        vec!["replay", log],
        vec!["replay", "--json", log],
        vec!["generate", "--model-path", target, "--prompt", "w5 w9", "--max-new-tokens", "4"],
        vec!["generate", "--model-path", target, "--prompt", "w5 w9", "--max-new-tokens", "4", "--json"],
        vec!["bench", "--model-path", target, "--prompts", path(&prompts), "--max-new-tokens", "4"],
        vec!["bench", "--model-path", target, "--prompts", path(&prompts), "--max-new-tokens", "4", "--json"],
        vec!["--headless", "launch", "--model-path", target, "--prompt", "w5", "--max-new-tokens", "4"],
        // The demo, extracted into the pair's folder as HOME.
        vec!["--headless"],
        vec!["--headless", "--apply", "clamp-context-length"],
    ];
    for json in [false, true] {
        let mut check = vec!["check", "--model-path", target];
        check.extend(spec);
        if json {
            check.push("--json");
        }
        cases.push(check);
    }
    for case in &cases {
        assert_ends_quietly(case, p.dir.path());
    }
}

// ---- signals ----

/// Slack over the 1 s for a loaded 2-core CI machine would hide a regression to the
/// old behaviour only if the 4000 tokens took under this long, which they do not.
const TEARDOWN: Duration = Duration::from_secs(1);

/// A headless launch of the demo target, generating 4000 tokens; returns once it has printed
/// its first generated text, so the signal lands mid-generation.
fn generating_launch() -> std::process::Child {
    let target = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/demo/target");
    let mut child = specdeck()
        .args(["--headless", "launch", "--model-path", target, "--context-length", "8192"])
        .args(["--prompt", "ROMEO:", "--max-new-tokens", "4000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0; 4096];
    // The printer shows the prompt, then the text as it streams: wait for some text after it.
    let generating = |seen: &[u8]| seen.windows(6).position(|w| w == b"ROMEO:").is_some_and(|at| seen.len() > at + 64);
    while !generating(&seen) {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "the launch ended before generating: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    // Keep draining, so a full pipe never stalls the generation.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    child
}

fn wait_bounded(child: &mut std::process::Child, bound: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < bound {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn a_signal_cancels_a_headless_generation_within_a_second() {
    for (signal, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130), (libc::SIGHUP, 129)] {
        let mut child = generating_launch();
        // SAFETY: kill(2) on the child's own pid.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let sent = Instant::now();
        let status = wait_bounded(&mut child, TEARDOWN);
        let took = sent.elapsed();
        let Some(status) = status else {
            let _ = child.kill();
            panic!("signal {signal}: still running {took:?} after it");
        };
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        assert_eq!(status.code(), Some(code), "signal {signal}: {stderr}");
        assert!(stderr.contains(&format!("stopped by signal {signal} (exit {code})")), "{stderr}");
    }
}

#[test]
fn an_engine_panic_ends_with_exit_101_naming_it() {
    let (sink, mut rx) = EventSink::channel();
    let handle = EngineHandle::spawn(sink, Arc::new(|_: &LaunchSpec| panic!("a rule that cannot run")));
    let p = pair();
    handle.send(EngineCommand::Launch(LaunchSpec { model_path: Some(path(&p.target).into()), ..LaunchSpec::default() }));
    let start = Instant::now();
    let exit = loop {
        assert!(start.elapsed() < Duration::from_secs(20), "no Exit after the panic");
        match rx.try_recv() {
            Ok(ev) => {
                if let Event::Exit { code, reason } = ev.event {
                    break (code, reason);
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    assert_eq!(exit, (101, "the engine panicked: a rule that cannot run".to_string()));
    drop(handle);
}

// ---- validation ----

/// Generous for a debug build on a loaded 2-core machine: each case is refused before any
/// weights load.
const BOUND: Duration = Duration::from_secs(10);

/// Runs to the end within the bound; (exit code, stderr).
fn refused<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> (Option<i32>, String) {
    let start = Instant::now();
    let out = specdeck().args(args).stdin(Stdio::null()).output().unwrap();
    assert!(start.elapsed() < BOUND, "{args:?} took {:?}", start.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    (out.status.code(), stderr)
}

fn assert_refused<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S], says: &str) {
    let (code, stderr) = refused(args);
    assert_eq!(code, Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(says), "{args:?}: expected {says:?} in {stderr}");
}

#[test]
fn launch_flags_out_of_range_are_refused_naming_flag_and_range() {
    let p = pair();
    let target = path(&p.target);
    let positive = |flag: &str, v: &str| format!("{flag}: expected a positive integer, got \"{v}\"");
    for (flag, v) in [("--tp-size", "0"), ("--tp-size", "-3"), ("--context-length", "0"), ("--context-length", "18446744073709551616")] {
        assert_refused(&["check", "--model-path", target, &format!("{flag}={v}")], &positive(flag, v));
    }
    for v in ["0", "1.0001", "NaN", "inf", "-0.5", "1e-320"] {
        let says = format!("--mem-fraction-static: expected a fraction in (0, 1], such as 0.85, got \"{v}\"");
        assert_refused(&["check", "--model-path", target, &format!("--mem-fraction-static={v}")], &says);
    }
    for v in ["NaN", "inf", "-inf", "-1", "0"] {
        let says = format!("--gpu-memory-gib: expected a finite number of GiB above 0, got \"{v}\"");
        assert_refused(&["check", "--model-path", target, &format!("--gpu-memory-gib={v}")], &says);
    }
    // The accepted edges still pass.
    let (code, stderr) = refused(&["check", "--model-path", target, "--mem-fraction-static", "1", "--gpu-memory-gib", "0.5"]);
    assert!(matches!(code, Some(0 | 1)), "{stderr}");
    for v in ["-0.5", "NaN", "inf"] {
        let (code, stderr) = refused(&["generate", "--model-path", target, "--prompt", "w5", &format!("--temperature={v}")]);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains("--temperature") && stderr.contains("expected 0 (greedy) or a finite number above 0"), "{stderr}");
    }
}

#[test]
fn max_new_tokens_that_wrap_the_prompt_length_are_a_clear_error() {
    let p = pair();
    let (code, stderr) =
        refused(&["generate", "--model-path", path(&p.target), "--prompt", "w5 w9", "--max-new-tokens", &u64::MAX.to_string()]);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains(&format!("plus --max-new-tokens ({})", u64::MAX)), "{stderr}");
}

#[test]
fn replay_speeds_and_recorded_times_at_the_edges_end_quickly() {
    let log = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/demo/recorded-run.jsonl");
    for v in ["1e-300", "0.0009", "-1", "NaN", "inf"] {
        let says = format!("--speed: expected 0 (as fast as possible) or a finite number from 0.001 up, got {}", v.parse::<f64>().unwrap());
        assert_refused(&["replay", &format!("--speed={v}"), log], &says);
    }
    let dir = tempfile::tempdir().unwrap();
    let far = dir.path().join("far.jsonl");
    let text = std::fs::read_to_string(log).unwrap();
    let last = text.trim_end().rsplit_once('\n').unwrap();
    let exit = last.1.replacen("\"t\":0.417873367", "\"t\":1e20", 1);
    assert_ne!(exit, last.1);
    std::fs::write(&far, format!("{}\n{exit}\n", last.0)).unwrap();
    let (code, stderr) = refused(&["replay", "--speed", "1", path(&far)]);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn files_that_are_not_regular_are_refused_by_name() {
    let p = pair();
    let target = path(&p.target);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("events.fifo");
    let c = std::ffi::CString::new(path(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let launch = ["--headless", "launch", "--model-path", target, "--prompt", "w5", "--max-new-tokens", "2"];
    let with = |extra: &[&str]| -> Vec<String> { launch.iter().chain(extra).map(|s| s.to_string()).collect() };
    assert_refused(&with(&["--event-log", "/dev/full"]), "--event-log: /dev/full: is a character device, not a regular file");
    assert_refused(&with(&["--event-log", path(&fifo)]), &format!("{}: is a FIFO (named pipe), not a regular file", fifo.display()));
    assert_refused(&with(&["--keymap", "/dev/zero"]), "/dev/zero: cannot read: is a character device, not a regular file");
    assert_refused(&with(&["--layout", "/dev/zero"]), "is a character device, not a regular file");
    assert_refused(&["bench", "--model-path", target, "--prompts", "/dev/zero"], "/dev/zero: cannot read");
    // A new file and a regular one to replace are still what --event-log takes.
    let log = dir.path().join("events.jsonl");
    for _ in 0..2 {
        let (code, stderr) = refused(&with(&["--event-log", path(&log)]));
        assert_eq!(code, Some(0), "{stderr}");
        assert!(std::fs::read_to_string(&log).unwrap().contains("\"type\":\"exit\""));
    }
}

#[test]
fn an_empty_prompts_file_is_an_error_naming_it() {
    let p = pair();
    let prompts = p.dir.path().join("empty.jsonl");
    std::fs::write(&prompts, "\n  \n").unwrap();
    let says = format!("{}: no prompts", prompts.display());
    assert_refused(&["bench", "--model-path", path(&p.target), "--prompts", path(&prompts), "--json"], &says);
}

// ---- terminal safety ----

#[test]
fn control_characters_from_files_are_escaped_in_check_text() {
    let p = pair();
    let hostile = p.dir.path().join("m\x1b]0;owned\x07\x1b[2J");
    std::fs::rename(&p.target, &hostile).unwrap();
    let out = specdeck().args(["check", "--model-path", path(&hostile)]).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(!stdout.contains('\x1b') && !stdout.contains('\x07'), "{stdout:?}");
    assert!(stdout.contains("m\\u{1b}]0;owned\\u{7}\\u{1b}[2J"), "{stdout}");
}

// ---- every numeric flag at the edges ----

/// Numbers at the edges of every range, as a command line spells them (some are no number).
#[rustfmt::skip]
const EDGES: [&str; 24] = [
    // Integers around 0 and the widths of u32, i64, u64, and past them.
    "0", "1", "-1", "2147483648", "4294967295", "4294967296", "9223372036854775808", "18446744073709551615",
    "18446744073709551616", "1180591620717411303424",
    // Floats: the extremes, subnormals, a signed zero, fractions either side of 1.
    "1e308", "-1e308", "5e-324", "1e-320", "-0.0", "0.5", "1.0001",
    // No plain number: NaN, infinities, a sign, padding, hex, nothing.
    "NaN", "inf", "-inf", "+3", " 7 ", "0x10", "",
];

/// Every valued flag of `spec::FLAGS` at every edge: refused with an error that names the flag
/// and quotes the value, or taken and then judged by the preflight rules and the engine's
/// launch (which stops at their findings) within a bounded time, never a panic.
#[test]
fn every_launch_flag_at_the_edges_is_refused_by_name_or_judged() {
    use specdeck::backend::cpu::CpuBackend;
    use specdeck::engine::lifecycle::Engine;
    use specdeck::preflight::gpu::GpuInventory;
    use specdeck::preflight::{check_spec, check_with_gpus};
    use specdeck::spec::{Algorithm, FLAGS};

    let p = pair();
    let base = LaunchSpec {
        model_path: Some(path(&p.target).into()),
        draft_model_path: Some(path(&p.eagle).into()),
        speculative_algorithm: Some(Algorithm::Eagle3),
        device: specdeck::spec::Device::Cpu,
        ..LaunchSpec::default()
    };
    let gpus = GpuInventory { count: Some(8), memory_bytes: Some(80 << 30), source: "tests".into() };
    let (mut taken, mut refused_count) = (0, 0);
    for def in FLAGS.iter().filter(|d| !d.is_switch() && !matches!(d.value_name, "DIR" | "ALGO" | "DEVICE" | "DTYPE")) {
        for v in EDGES {
            let mut spec = base.clone();
            match spec.set_flag(def.name, v) {
                Err(e) => {
                    refused_count += 1;
                    let m = e.to_string();
                    assert!(m.starts_with(&format!("{}: expected ", def.name)) && m.ends_with(&format!("got {v:?}")), "{m}");
                }
                Ok(()) => {
                    taken += 1;
                    let start = Instant::now();
                    check_with_gpus(&spec, &gpus);
                    let (sink, _rx) = EventSink::channel();
                    let mut engine = Engine::new(CpuBackend, sink);
                    engine.launch(&spec, &check_spec);
                    assert!(start.elapsed() < BOUND, "{} {v:?} took {:?}", def.name, start.elapsed());
                }
            }
        }
    }
    // Each flag takes some edges (1 at least) and refuses others (NaN at least).
    assert!(taken > 20 && refused_count > 100, "taken {taken}, refused {refused_count}");
}

/// Every numeric option of the commands (not launch flags) at the edges, on the binary:
/// refused naming the option (exit 2), or run to an end within the bound, never a panic.
#[test]
fn every_numeric_command_option_at_the_edges_is_refused_by_name_or_runs() {
    let p = pair();
    let target = path(&p.target);
    let prompts = p.dir.path().join("prompts.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"w5 w9\"}\n").unwrap();
    let recording = p.dir.path().join("short.jsonl");
    std::fs::write(
        &recording,
        "{\"t\":0.0,\"type\":\"phase\",\"phase\":\"preflight\",\"state\":\"started\"}\n\
         {\"t\":0.001,\"type\":\"phase\",\"phase\":\"preflight\",\"state\":\"done\"}\n",
    )
    .unwrap();
    let generate = ["generate", "--model-path", target, "--prompt", "w5 w9", "--max-new-tokens", "2"];
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("--max-new-tokens", vec!["generate", "--model-path", target, "--prompt", "w5 w9"]),
        ("--temperature", generate.to_vec()),
        ("--seed", generate.to_vec()),
        ("--max-new-tokens", vec!["bench", "--model-path", target, "--prompts", path(&prompts)]),
        ("--max-new-tokens", vec!["--headless", "launch", "--model-path", target, "--prompt", "w5"]),
        ("--speed", vec!["replay", path(&recording)]),
    ];
    // A few of the edges run a whole generation each: those that a debug build does in time.
    for (option, args) in &cases {
        for v in EDGES {
            let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            all.push(format!("{option}={v}"));
            let (code, stderr) = refused(&all);
            match code {
                Some(2) => assert!(stderr.contains(option), "{all:?}: {stderr}"),
                Some(0 | 1 | 3) => {}
                other => panic!("{all:?} ended with {other:?}: {stderr}"),
            }
        }
    }
}

// ---- replay on hostile logs ----

#[test]
fn replay_refuses_devices_and_reads_a_fifo_without_a_writer_as_empty() {
    for args in [vec!["replay", "/dev/zero"], vec!["replay", "--json", "/dev/urandom"], vec!["replay", "--follow", "/dev/zero"]] {
        assert_refused(&args, &format!("{}: cannot open the log: is a character device, not a regular file", args.last().unwrap()));
    }
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("log.fifo");
    let c = std::ffi::CString::new(path(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (code, stderr) = refused(&["replay", path(&fifo)]);
    assert_eq!(code, Some(3), "an empty log is incomplete: {stderr}");
}

/// A recording of more findings than a report keeps: the first `MAX_FINDINGS` are listed,
/// the rest counted, in the JSON and the text summary.
#[test]
fn a_recording_of_endless_findings_is_summarised_within_the_cap() {
    use specdeck::replay::MAX_FINDINGS;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("findings.jsonl");
    let line = |i: usize| {
        format!(
            "{{\"t\":{i},\"type\":\"finding\",\"id\":\"f{i}\",\"severity\":\"warning\",\"phase\":\"preflight\",\"message\":\"m\",\
             \"evidence\":[{{\"side\":\"target\",\"file\":\"c\",\"key\":\"/k\",\"value\":0}}],\"remedies\":[]}}\n"
        )
    };
    std::fs::write(&log, (0..MAX_FINDINGS + 7).map(line).collect::<String>()).unwrap();
    let out = specdeck().args(["replay", "--json", path(&log)]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = report["findings"].as_array().unwrap();
    assert_eq!((findings.len(), &report["findings_left_out"]), (MAX_FINDINGS, &serde_json::json!(7)));
    assert_eq!(findings[0]["evidence"][0]["value"], serde_json::json!(0), "a 0 stays 0");
    let out = specdeck().args(["replay", path(&log)]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("f{} (warning), and 7 more, not kept\n", MAX_FINDINGS - 1)), "{}", &text[text.len() - 300..]);
}

/// Lines that nest JSON deeper than any parser should follow, a line of 4 MiB, and lines of
/// NUL bytes: warnings or plain log lines, never a stack overflow or a panic.
#[test]
fn replay_of_deeply_nested_huge_and_binary_lines_ends_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let deep = |n: usize| format!("{{\"t\":0,\"type\":\"log\",\"x\":{}{}}}\n", "[".repeat(n), "]".repeat(n));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("deep.jsonl", [deep(1), deep(100), deep(5000), deep(1 << 20)].concat().into_bytes()),
        ("long.log", [b"[2025-09-05 20:48:29 TP0] ".to_vec(), vec![b'x'; 4 << 20], b"\n".to_vec()].concat()),
        ("nul.log", [vec![0u8; 1 << 16], b"\n".to_vec(), vec![0u8; 300]].concat()),
        ("braces.jsonl", "{\"t\":0,\"type\":\"phase\"".repeat(20000).into_bytes()),
    ];
    for (name, bytes) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        for json in [false, true] {
            let mut args = vec!["replay", path(&file)];
            if json {
                args.push("--json");
            }
            let (code, stderr) = refused(&args);
            assert!(matches!(code, Some(0 | 1 | 3)), "{name}: {code:?} {stderr}");
        }
    }
}

#[test]
fn control_characters_in_error_messages_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = dir.path().join("log\x1b]0;owned\x07\x1b[2J.jsonl");
    let (code, stderr) = refused(&["replay", path(&hostile)]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(!stderr.contains('\x1b') && !stderr.contains('\x07'), "{stderr:?}");
    assert!(stderr.contains("log\\u{1b}]0;owned\\u{7}\\u{1b}[2J.jsonl: cannot open the log"), "{stderr}");
}

#[test]
fn an_error_that_quotes_its_cause_does_not_say_it_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = refused(&["convert", "gguf", "/dev/null", path(&dir.path().join("out"))]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.ends_with("\nspecdeck: /dev/null: cannot read: is a character device, not a regular file\n"), "{stderr:?}");
}
