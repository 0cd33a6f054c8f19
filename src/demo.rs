//! The embedded demo pair, the seed's story in miniature: a tiny Kimi-K2.5-architecture target
//! (`KimiK25ForConditionalGeneration`: MLA, routed experts in INT4, yarn to context 262144) and
//! its Llama-architecture EAGLE-3 drafter (max_position_embeddings 131072), built into the
//! binary and extracted once to a cache folder named by the content hash, so `specdeck` works
//! from any directory.

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::spec::{Algorithm, LaunchSpec};

include!(concat!(env!("OUT_DIR"), "/demo_files.rs"));

/// The prompt the demo generates from once the engine is ready (the pair was trained on
/// Shakespeare's plays).
pub const DEFAULT_PROMPT: &str = "HAMLET.\nTo be, or not to be, that is the question:\n";

/// Where the extracted pair lives.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoPair {
    pub target: PathBuf,
    pub draft: PathBuf,
}

impl DemoPair {
    /// The demo's launch: EAGLE-3 with the embedded drafter, the flags left as a user would.
    pub fn spec(&self) -> LaunchSpec {
        LaunchSpec {
            model_path: Some(self.target.display().to_string()),
            draft_model_path: Some(self.draft.display().to_string()),
            speculative_algorithm: Some(Algorithm::Eagle3),
            ..LaunchSpec::default()
        }
    }
}

/// Whether this build embedded the pair.
pub fn is_embedded() -> bool {
    !DEMO_FILES.is_empty()
}

/// A short hash of the embedded files, names and bytes, naming the cache folder.
fn content_hash(files: &[(&str, &[u8])]) -> String {
    let mut h = Sha256::new();
    for (name, bytes) in files {
        h.update(name.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Extract the embedded pair under the user's cache folder (`$XDG_CACHE_HOME/specdeck`),
/// or the temp folder when there is none.
pub fn extract() -> anyhow::Result<DemoPair> {
    anyhow::ensure!(
        is_embedded(),
        "this build has no embedded demo pair (testdata/demo/ was absent when it was built); \
         use `specdeck launch --model-path … --speculative-draft-model-path …`"
    );
    let base = dirs::cache_dir().unwrap_or_else(std::env::temp_dir).join("specdeck");
    extract_to(&base, DEMO_FILES).map_err(|e| anyhow::anyhow!("extracting the demo pair under {}: {e}", base.display()))
}

/// Write `files` to `<base>/demo-<hash>/` unless a complete copy is already there. The copy
/// is written to a private folder first and renamed into place, so a concurrent run or an
/// interrupted one never leaves a half-written pair behind.
pub fn extract_to(base: &Path, files: &[(&str, &[u8])]) -> io::Result<DemoPair> {
    let dir = base.join(format!("demo-{}", content_hash(files)));
    let pair = DemoPair { target: dir.join("target"), draft: dir.join("draft") };
    let complete = |d: &Path| files.iter().all(|(name, bytes)| d.join(name).metadata().is_ok_and(|m| m.len() == bytes.len() as u64));
    if complete(&dir) {
        return Ok(pair);
    }
    std::fs::create_dir_all(base)?;
    let staging = base.join(format!(".demo-{}-{}", content_hash(files), std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    for (name, bytes) in files {
        let path = staging.join(name);
        std::fs::create_dir_all(path.parent().expect("names are relative file paths"))?;
        std::fs::write(&path, bytes)?;
    }
    if dir.exists() {
        // An incomplete copy (an older crash or a disk-full run): replace it.
        std::fs::remove_dir_all(&dir)?;
    }
    match std::fs::rename(&staging, &dir) {
        Ok(()) => Ok(pair),
        // Another run finished first; use its copy.
        Err(_) if complete(&dir) => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(pair)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILES: &[(&str, &[u8])] = &[("target/config.json", b"{\"a\": 1}"), ("draft/config.json", b"{\"b\": 2}")];

    #[test]
    fn extraction_is_keyed_by_content_and_reused() {
        let base = tempfile::tempdir().unwrap();
        let pair = extract_to(base.path(), FILES).unwrap();
        assert_eq!(std::fs::read(pair.target.join("config.json")).unwrap(), b"{\"a\": 1}");
        assert_eq!(std::fs::read(pair.draft.join("config.json")).unwrap(), b"{\"b\": 2}");
        assert_eq!(extract_to(base.path(), FILES).unwrap(), pair);
        let other: &[(&str, &[u8])] = &[("target/config.json", b"{}"), ("draft/config.json", b"{}")];
        assert_ne!(extract_to(base.path(), other).unwrap(), pair);
        // No staging folders are left behind.
        let names: Vec<String> =
            std::fs::read_dir(base.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(names.iter().all(|n| n.starts_with("demo-")), "{names:?}");
    }

    #[test]
    fn a_damaged_copy_is_replaced() {
        let base = tempfile::tempdir().unwrap();
        let pair = extract_to(base.path(), FILES).unwrap();
        std::fs::write(pair.draft.join("config.json"), b"x").unwrap();
        extract_to(base.path(), FILES).unwrap();
        assert_eq!(std::fs::read(pair.draft.join("config.json")).unwrap(), b"{\"b\": 2}");
    }

    #[test]
    fn the_embedded_pair_reproduces_the_story_when_present() {
        if !is_embedded() {
            eprintln!("SKIPPED LOUDLY: this build has no embedded demo pair (testdata/demo/ absent at build time)");
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let pair = extract_to(base.path(), DEMO_FILES).unwrap();
        let target = crate::model::config::ModelConfig::load_dir(&pair.target).unwrap();
        let draft = crate::model::config::ModelConfig::load_dir(&pair.draft).unwrap();
        let finding = crate::engine::context::check(&target, &draft, &pair.spec()).unwrap().unwrap();
        assert_eq!(finding.id, "context-length-exceeds-draft");
        assert_eq!(finding.evidence[0].value, 262144);
        assert_eq!(finding.evidence[1].value, 131072);
    }
}
