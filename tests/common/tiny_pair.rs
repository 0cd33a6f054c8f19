//! A tiny real target + EAGLE-3 drafter pair written by `specdeck::testkit` into a temporary
//! folder, for the tests that run the binary on checkpoints.

use std::path::PathBuf;

use specdeck::engine::llama::Family;
use specdeck::testkit::{TinyEagle3, TinyLlama};

pub struct Pair {
    pub dir: tempfile::TempDir,
    pub target: PathBuf,
    pub eagle: PathBuf,
}

pub fn pair() -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let (target, eagle) = (dir.path().join("target"), dir.path().join("eagle"));
    let t = TinyLlama::new(Family::Qwen2, 31);
    let w = t.write(&target).unwrap();
    TinyEagle3::new(32).write(&eagle, &t, &w).unwrap();
    Pair { dir, target, eagle }
}
