//! The input loader: each model folder's `config.json`, its safetensors headers (never the
//! tensor data) and the paths of its tokenizer files. Everything the rules read comes from
//! here, and every way an input can be unreadable becomes one `InputError` naming the file.

use std::path::{Path, PathBuf};

use crate::finding::Side;
use safetensors::Dtype;

use crate::model::checkpoint::{Checkpoint, CheckpointError};
use crate::model::config::{ConfigError, ModelConfig};
use crate::model::hub::{self, HubError};
use crate::model::open;
use crate::spec::LaunchSpec;

/// Why an input could not be read. Each variant names the file (or flag) and the reason.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{flag} is required: it names the {what} folder")]
    MissingFlag { flag: &'static str, what: &'static str },
    #[error("{dir}: no such folder")]
    NoFolder { dir: PathBuf },
    #[error("{dir}: is a file, not a model folder (pass the folder that holds config.json)")]
    NotAFolder { dir: PathBuf },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("{file}: invalid JSON at line {line}, column {column}: {message}")]
    Json { file: PathBuf, line: usize, column: usize, message: String },
    #[error("{file}: cannot read: {source}")]
    Io { file: PathBuf, source: std::io::Error },
    /// A repo id the Hugging Face cache does not hold; `fetch` says how to get the config
    /// files `check` reads.
    #[error("{source}. check reads only the config.json of the target and of the drafter: fetch {fetch}")]
    Hub { repo: String, source: HubError, fetch: String },
}

impl InputError {
    /// The file (or folder, or flag) the error is about.
    pub fn subject(&self) -> String {
        let path = match self {
            InputError::MissingFlag { flag, .. } => return flag.to_string(),
            InputError::Hub { repo, .. } => return repo.clone(),
            InputError::NoFolder { dir } | InputError::NotAFolder { dir } => dir,
            InputError::Config(e) => e.file(),
            InputError::Checkpoint(e) => match e {
                CheckpointError::Io { file, .. }
                | CheckpointError::BadHeader { file, .. }
                | CheckpointError::BadIndex { file, .. }
                | CheckpointError::WrongDtype { file, .. }
                | CheckpointError::WrongShape { file, .. }
                | CheckpointError::BadValues { file, .. } => file,
                CheckpointError::MissingTensor { dir, .. } | CheckpointError::ExceedsCheckpoint { dir, .. } => dir,
            },
            InputError::Json { file, .. } | InputError::Io { file, .. } => file,
        };
        path.display().to_string()
    }

    /// The JSON pointer or tensor name at fault; empty when the whole file is.
    pub fn key(&self) -> String {
        match self {
            InputError::Config(
                ConfigError::Missing { key, .. } | ConfigError::WrongType { key, .. } | ConfigError::OutOfRange { key, .. },
            ) => key.clone(),
            InputError::Checkpoint(
                CheckpointError::MissingTensor { name, .. }
                | CheckpointError::WrongDtype { name, .. }
                | CheckpointError::WrongShape { name, .. }
                | CheckpointError::BadValues { name, .. },
            ) => name.clone(),
            _ => String::new(),
        }
    }

    /// The offending value, when the error is about one.
    pub fn value(&self) -> serde_json::Value {
        match self {
            InputError::Config(e) => e.value(),
            _ => serde_json::Value::Null,
        }
    }

    /// True when the error is about weight files rather than configs.
    pub fn is_weights(&self) -> bool {
        matches!(self, InputError::Checkpoint(_))
    }
}

/// Parse a JSON file (a regular file within `limit` bytes), with line and column on error.
pub fn read_json<T: serde::de::DeserializeOwned>(file: &Path, limit: u64) -> Result<T, InputError> {
    let bytes = open::read_capped(file, limit).map_err(|source| InputError::Io { file: file.to_path_buf(), source })?;
    serde_json::from_slice(&bytes).map_err(|e| InputError::Json {
        file: file.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })
}

/// The optional tokenizer files of a model folder (paths only: parsed by the rule that
/// compares them, and only when both sides have them).
#[derive(Clone, Debug, Default)]
pub struct TokenizerPaths {
    pub tokenizer_json: Option<PathBuf>,
    pub tokenizer_config: Option<PathBuf>,
    pub generation_config: Option<PathBuf>,
}

impl TokenizerPaths {
    /// The tokenizer files present; one that is there but is not a regular file (a FIFO, a
    /// folder, a dangling link) is an error naming it, not a file silently left out.
    fn find(dir: &Path) -> Result<TokenizerPaths, InputError> {
        let existing = |name: &str| -> Result<Option<PathBuf>, InputError> {
            let path = dir.join(name);
            if !open::exists_in_any_form(&path) {
                return Ok(None);
            }
            open::check_regular(&path).map_err(|source| InputError::Io { file: path.clone(), source })?;
            Ok(Some(path))
        };
        Ok(TokenizerPaths {
            tokenizer_json: existing("tokenizer.json")?,
            tokenizer_config: existing("tokenizer_config.json")?,
            generation_config: existing("generation_config.json")?,
        })
    }
}

/// Names a drafter's own embedding table can have in its checkpoint.
pub const DRAFT_EMBED_NAMES: &[&str] = &["embed_tokens.weight", "model.embed_tokens.weight"];

/// A tensor as its safetensors header describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub shape: Vec<usize>,
    pub dtype: Dtype,
    pub file: String,
}

/// One model folder as preflight sees it.
pub struct ModelFiles {
    pub side: Side,
    pub dir: PathBuf,
    /// `config.json` as on disk.
    pub config: ModelConfig,
    /// Safetensors headers, when the folder has weights.
    pub checkpoint: Option<Checkpoint>,
    pub tokenizer: TokenizerPaths,
}

impl ModelFiles {
    /// Load the folder a model flag names: the path as given, or, for a repo id that is no
    /// path here, its snapshot in the Hugging Face cache (shown by the repo id).
    pub fn locate(side: Side, given: &str, revision: Option<&str>, fetch: &str) -> Result<ModelFiles, InputError> {
        let (dir, snapshot) = hub::local_folder(given, revision).map_err(|source| InputError::Hub {
            repo: given.to_string(),
            source,
            fetch: fetch.to_string(),
        })?;
        let mut files = ModelFiles::load(side, &dir)?;
        if let Some(snapshot) = snapshot {
            files.config = files.config.shown_as(snapshot.label());
        }
        Ok(files)
    }

    pub fn load(side: Side, dir: &Path) -> Result<ModelFiles, InputError> {
        if !dir.exists() {
            return Err(InputError::NoFolder { dir: dir.to_path_buf() });
        }
        if !dir.is_dir() {
            return Err(InputError::NotAFolder { dir: dir.to_path_buf() });
        }
        let config = ModelConfig::load_dir(dir)?;
        let checkpoint = if Checkpoint::present(dir) { Some(Checkpoint::open(dir)?) } else { None };
        Ok(ModelFiles { side, dir: dir.to_path_buf(), config, checkpoint, tokenizer: TokenizerPaths::find(dir)? })
    }

    /// A tensor's header entry and the file holding it.
    pub fn tensor(&self, name: &str) -> Option<TensorInfo> {
        let ck = self.checkpoint.as_ref()?;
        let meta = ck.meta(name)?;
        Some(TensorInfo { shape: meta.shape.clone(), dtype: meta.dtype, file: ck.files[meta.file_index].path.display().to_string() })
    }

    /// Bytes of tensor data, summed from the headers.
    pub fn weight_bytes(&self) -> Option<u64> {
        let ck = self.checkpoint.as_ref()?;
        Some(ck.tensors.values().map(|m| (m.end - m.start) as u64).sum())
    }
}

/// `huggingface-cli download ID config.json` for each model flag that is a repo id.
fn fetch_commands(spec: &LaunchSpec) -> String {
    let sides = [(&spec.model_path, &spec.revision), (&spec.draft_model_path, &spec.draft_revision)];
    let commands: Vec<String> = sides
        .into_iter()
        .filter_map(|(path, revision)| {
            let id = path.as_deref().filter(|p| hub::is_repo_id(p))?;
            let revision = revision.as_deref().map(|r| format!(" --revision {r}")).unwrap_or_default();
            Some(format!("`huggingface-cli download {id} config.json{revision}`"))
        })
        .collect();
    commands.join(" and ")
}

/// The drafter: its files as on disk and its config with the launch's in-memory overrides.
pub struct Draft {
    pub files: ModelFiles,
    /// `config.json` with `LaunchSpec::draft_overrides` applied (what a launch would use).
    pub effective: ModelConfig,
}

/// Everything a launch reads, loaded.
pub struct Inputs {
    pub target: ModelFiles,
    pub draft: Option<Draft>,
}

impl Inputs {
    /// Load the target and (when given) the drafter. On failure, every unreadable input is
    /// returned with its side, so one run reports them all.
    pub fn load(spec: &LaunchSpec) -> Result<Inputs, Vec<(Side, InputError)>> {
        let fetch = fetch_commands(spec);
        let target = match &spec.model_path {
            Some(p) => ModelFiles::locate(Side::Target, p, spec.revision.as_deref(), &fetch),
            None => Err(InputError::MissingFlag { flag: "--model-path", what: "target model" }),
        };
        let draft = spec.draft_model_path.as_ref().map(|p| ModelFiles::locate(Side::Draft, p, spec.draft_revision.as_deref(), &fetch));
        match (target, draft) {
            (Ok(target), None) => Ok(Inputs { target, draft: None }),
            (Ok(target), Some(Ok(files))) => {
                let effective = files.config.with_overrides(&spec.draft_overrides);
                Ok(Inputs { target, draft: Some(Draft { files, effective }) })
            }
            (target, draft) => {
                let mut errors = Vec::new();
                if let Err(e) = target {
                    errors.push((Side::Target, e));
                }
                if let Some(Err(e)) = draft {
                    errors.push((Side::Draft, e));
                }
                Err(errors)
            }
        }
    }

    /// Which side a file belongs to (for errors raised while a rule reads a config).
    pub fn side_of(&self, subject: &str) -> Side {
        // The deeper folder wins, so a drafter kept inside the target's folder is still found.
        let depth = |dir: &Path| Path::new(subject).starts_with(dir).then(|| dir.components().count());
        match &self.draft {
            Some(d) if depth(&d.files.dir) > depth(&self.target.dir) => Side::Draft,
            _ => Side::Target,
        }
    }
}
