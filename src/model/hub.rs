//! Hugging Face repo ids (`org/name`) found in the local hub cache, laid out as the
//! huggingface_hub client writes it: `models--org--name/refs/<ref>` holds a commit hash,
//! `models--org--name/snapshots/<commit>/` the files (links into `blobs/`). The cache is read,
//! never written.

use std::path::{Path, PathBuf};

/// A repo's snapshot folder, and how to show it.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub dir: PathBuf,
    pub repo: String,
    pub commit: String,
}

impl Snapshot {
    /// `org/name (snapshot 0e9e39f)`: the repo id first, the commit shortened as git does.
    pub fn label(&self) -> String {
        format!("{} (snapshot {})", self.repo, &self.commit[..self.commit.len().min(7)])
    }
}

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum HubError {
    #[error("{repo}: not a folder, and not in the Hugging Face cache (searched {})", searched_text(searched))]
    NotCached { repo: String, searched: Vec<PathBuf> },
    #[error("{repo}: revision {revision} is not in the Hugging Face cache at {}", repo_dir.display())]
    NoRevision { repo: String, revision: String, repo_dir: PathBuf },
}

fn searched_text(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        return "nothing: HF_HUB_CACHE, HF_HOME and HOME are unset".to_string();
    }
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// The folder a model flag names: the path as given when it is one here (or is no repo id),
/// else the repo's snapshot in the cache this process's environment points at.
pub fn local_folder(given: &str, revision: Option<&str>) -> Result<(PathBuf, Option<Snapshot>), HubError> {
    let path = Path::new(given);
    if crate::model::open::exists_in_any_form(path) || !is_repo_id(given) {
        return Ok((path.to_path_buf(), None));
    }
    let snapshot = resolve(given, revision, &cache_dirs(|k| std::env::var(k).ok()))?;
    Ok((snapshot.dir.clone(), Some(snapshot)))
}

/// `org/name`: two non-empty parts, neither a path word (`.`, `..`, `~`).
pub fn is_repo_id(s: &str) -> bool {
    let mut parts = s.split('/');
    let (Some(org), Some(name), None) = (parts.next(), parts.next(), parts.next()) else { return false };
    let plain = |p: &str| !p.is_empty() && !matches!(p, "." | "..") && !p.starts_with('~') && !p.contains('\\');
    plain(org) && plain(name)
}

/// The caches to search, in order: `HF_HUB_CACHE`, `HF_HOME/hub`, `~/.cache/huggingface/hub`.
pub fn cache_dirs(var: impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = var("HF_HUB_CACHE") {
        dirs.push(PathBuf::from(d));
    }
    if let Some(d) = var("HF_HOME") {
        dirs.push(Path::new(&d).join("hub"));
    }
    if let Some(home) = var("HOME") {
        dirs.push(Path::new(&home).join(".cache/huggingface/hub"));
    }
    dirs.dedup();
    dirs
}

/// A commit hash as the hub writes it (40 hex digits).
fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// The snapshot of `repo` at `revision` (a ref such as `main`, or a commit hash; `main` when
/// `None`), in the first cache that holds the repo.
pub fn resolve(repo: &str, revision: Option<&str>, caches: &[PathBuf]) -> Result<Snapshot, HubError> {
    let folder = format!("models--{}", repo.replace('/', "--"));
    let Some(repo_dir) = caches.iter().map(|c| c.join(&folder)).find(|d| d.is_dir()) else {
        return Err(HubError::NotCached { repo: repo.to_string(), searched: caches.to_vec() });
    };
    let revision = revision.unwrap_or("main");
    let from_ref = std::fs::read_to_string(repo_dir.join("refs").join(revision)).ok().map(|s| s.trim().to_string());
    let commit = from_ref.or_else(|| is_commit(revision).then(|| revision.to_string()));
    match commit {
        Some(commit) if !commit.contains(['/', '\\']) && repo_dir.join("snapshots").join(&commit).is_dir() => {
            Ok(Snapshot { dir: repo_dir.join("snapshots").join(&commit), repo: repo.to_string(), commit })
        }
        _ => Err(HubError::NoRevision { repo: repo.to_string(), revision: revision.to_string(), repo_dir }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "0e9e39f249a16976918f6564b8830bc894c89659";

    /// A cache as huggingface_hub writes one: the file in blobs/, the snapshot a relative link.
    fn cache() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("models--meta-llama--Llama-3.1-8B-Instruct");
        std::fs::create_dir_all(repo.join("blobs")).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots").join(COMMIT)).unwrap();
        std::fs::write(repo.join("blobs/abc"), "{}").unwrap();
        std::os::unix::fs::symlink("../../blobs/abc", repo.join("snapshots").join(COMMIT).join("config.json")).unwrap();
        std::fs::write(repo.join("refs/main"), COMMIT).unwrap();
        root
    }

    #[test]
    fn repo_ids_are_two_plain_parts() {
        assert!(is_repo_id("meta-llama/Llama-3.1-8B-Instruct"));
        for not in ["/abs/path", "./m", "m", "a/b/c", "~/m", "../m", "org/"] {
            assert!(!is_repo_id(not), "{not}");
        }
    }

    #[test]
    fn main_a_ref_or_a_commit_resolve_to_the_snapshot() {
        let root = cache();
        let caches = vec![PathBuf::from("/nonexistent"), root.path().to_path_buf()];
        let snap = resolve("meta-llama/Llama-3.1-8B-Instruct", None, &caches).unwrap();
        assert_eq!(snap.label(), "meta-llama/Llama-3.1-8B-Instruct (snapshot 0e9e39f)");
        assert!(snap.dir.join("config.json").is_file());
        assert_eq!(resolve("meta-llama/Llama-3.1-8B-Instruct", Some(COMMIT), &caches).unwrap(), snap);
        let err = resolve("meta-llama/Llama-3.1-8B-Instruct", Some("v2"), &caches).unwrap_err();
        assert!(matches!(err, HubError::NoRevision { ref revision, .. } if revision == "v2"), "{err}");
        let err = resolve("org/absent", None, &caches).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("org/absent: not a folder, and not in the Hugging Face cache (searched /nonexistent, {})", root.path().display())
        );
    }

    #[test]
    fn caches_are_searched_in_the_clients_order() {
        let vars = |k: &str| match k {
            "HF_HUB_CACHE" => Some("/c".to_string()),
            "HF_HOME" => Some("/h".to_string()),
            "HOME" => Some("/u".to_string()),
            _ => None,
        };
        assert_eq!(cache_dirs(vars), [PathBuf::from("/c"), PathBuf::from("/h/hub"), PathBuf::from("/u/.cache/huggingface/hub")]);
    }
}
