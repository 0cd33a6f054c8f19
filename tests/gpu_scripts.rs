//! The GPU machine's scripts, checked here without a GPU: the closing table of a run
//! (`scripts/gpu/summarize.py`, against the real outputs of run 1 and edited copies of
//! them) and a call's bench lines (`bench_lines.py`, against run 38's), the shell syntax of
//! the scripts there, and (ignored: slow, needs g++) the kernels on the CPU emulation.

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
    assert!(text.contains("Ran 12 tests"), "{text}");
}

#[test]
fn gpu_shell_scripts_parse() {
    for script in [
        "scripts/gpu/run.sh",
        "scripts/gpu/stage.sh",
        "scripts/gpu/diag.sh",
        "scripts/gpu/profile.sh",
        "scripts/gpu/ablate.sh",
        "scripts/gpu/random_model.sh",
        "scripts/gpu/ab.sh",
        "scripts/gpu/qwen_ab.sh",
        "scripts/gpu/qwen_join.sh",
    ] {
        let out = Command::new("bash").args(["-n", script]).current_dir(repo()).output().unwrap();
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    }
}
