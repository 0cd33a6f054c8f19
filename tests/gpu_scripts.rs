//! The GPU machine's scripts, checked here without a GPU: the closing table of a run
//! (`scripts/gpu/summarize.py`, against the real outputs of run 1 and edited copies of
//! them) and the shell syntax of `run.sh` and `stage.sh`.

use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn summarize_py_reads_real_run_outputs() {
    if !have("python3") {
        eprintln!("SKIPPED: python3 is not installed; scripts/gpu/test_summarize.py was NOT run");
        return;
    }
    let out = Command::new("python3").args(["-m", "unittest", "-v", "scripts/gpu/test_summarize.py"]).current_dir(repo()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Ran 5 tests"), "{text}");
}

#[test]
fn gpu_shell_scripts_parse() {
    for script in ["scripts/gpu/run.sh", "scripts/gpu/stage.sh"] {
        let out = Command::new("bash").args(["-n", script]).current_dir(repo()).output().unwrap();
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    }
}
