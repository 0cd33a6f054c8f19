//! Hostile and unlucky command lines (issue 23, the commands layer): a stdout whose reader is
//! gone, signals during a generation, flags at the edges of their ranges. Each case must end
//! quickly, without a panic, with the status and message the issue names.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use specdeck::engine::llama::Family;
use specdeck::testkit::{TinyEagle3, TinyLlama};

struct Pair {
    dir: tempfile::TempDir,
    target: PathBuf,
    eagle: PathBuf,
}

fn pair() -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let (target, eagle) = (dir.path().join("target"), dir.path().join("eagle"));
    let t = TinyLlama::new(Family::Qwen2, 31);
    let w = t.write(&target).unwrap();
    TinyEagle3::new(32).write(&eagle, &t, &w).unwrap();
    Pair { dir, target, eagle }
}

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
fn with_closed_stdout(args: &[&str]) -> Output {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes; each is owned once.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    specdeck().args(args).stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).output().unwrap()
}

fn assert_ends_quietly(args: &[&str]) {
    let out = with_closed_stdout(args);
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
        assert_ends_quietly(case);
    }
}
