//! `specdeck convert gguf IN.gguf OUT_DIR`: a GGUF (llama or qwen2) becomes an HF folder —
//! `config.json`, `generation_config.json`, `model.safetensors` (bf16 by default),
//! `tokenizer.json` and `tokenizer_config.json`.
//!
//! The input is only read (memory-mapped). Everything is written into a hidden sibling
//! folder that is renamed to OUT_DIR once complete, so a failed or interrupted conversion
//! leaves no half-written folder behind.

mod hparams;
mod tensors;
mod tokenizer;

use std::path::{Path, PathBuf};
use std::time::Instant;

pub use hparams::{Arch, Hparams, OutDtype};
pub use tensors::{plan, Planned, Progress};
pub use tokenizer::{build as build_tokenizer, GgufTokenizer};

use crate::model::gguf::{GgufError, GgufFile};

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{file}: {key} = {value}: {reason}")]
    Unsupported { file: PathBuf, key: String, value: String, reason: String },
    #[error("{file}: tensor {tensor:?} {reason}")]
    Tensor { file: PathBuf, tensor: String, reason: String },
    #[error("{file}: tensor {tensor:?} is missing")]
    MissingTensor { file: PathBuf, tensor: String },
    #[error("{file}: tokenizer: {reason}")]
    Tokenizer { file: PathBuf, reason: String },
    #[error("{path}: cannot write: {source}")]
    Output { path: PathBuf, source: std::io::Error },
    #[error("{path}: already exists and is not an empty folder; convert into a new folder")]
    OutputExists { path: PathBuf },
}

/// What a finished conversion produced.
#[derive(Clone, Debug)]
pub struct Converted {
    pub out_dir: PathBuf,
    pub hparams: Hparams,
    pub tensors: usize,
    pub safetensors_bytes: u64,
}

/// Convert `input` into a new folder `out_dir`, reporting each written tensor.
pub fn convert_gguf(input: &Path, out_dir: &Path, dtype: OutDtype, progress: &mut dyn FnMut(&Progress)) -> Result<Converted, ConvertError> {
    check_output_free(out_dir)?;
    let g = GgufFile::open(input)?;
    let hp = Hparams::read(&g)?;
    let planned = plan(&g, &hp)?;
    let tok = build_tokenizer(&g)?;

    let staging = Staging::create(out_dir)?;
    let dir = staging.path.as_path();
    write_json(&dir.join("config.json"), &hp.config_json(dtype))?;
    write_json(&dir.join("generation_config.json"), &hp.generation_config_json())?;
    write_json(&dir.join("tokenizer_config.json"), &tokenizer::tokenizer_config_json(&g, &tok, hp.context)?)?;
    let tokenizer_path = dir.join("tokenizer.json");
    tok.tokenizer
        .save(&tokenizer_path, false)
        .map_err(|e| ConvertError::Output { path: tokenizer_path.clone(), source: std::io::Error::other(e.to_string()) })?;
    let safetensors_bytes = tensors::write_safetensors(&g, &planned, dtype, &dir.join("model.safetensors"), progress)?;
    staging.commit(out_dir)?;
    Ok(Converted { out_dir: out_dir.to_path_buf(), hparams: hp, tensors: planned.len(), safetensors_bytes })
}

/// `convert gguf` from the command line: progress lines on stderr, a summary at the end.
pub fn run_cli(input: &Path, out_dir: &Path, dtype: &str) -> anyhow::Result<i32> {
    let dtype = OutDtype::parse(dtype).ok_or_else(|| anyhow::anyhow!("--dtype {dtype}: expected bf16 or f32"))?;
    let start = Instant::now();
    let mut next_report = 0.0;
    eprintln!("convert: {} -> {} ({})", input.display(), out_dir.display(), dtype.torch_name());
    let done = convert_gguf(input, out_dir, dtype, &mut |p| {
        // A line per tenth of the bytes, so a 300-tensor model prints about ten lines.
        let fraction = p.bytes_written as f64 / p.bytes_total.max(1) as f64;
        if fraction >= next_report || p.done == p.total {
            next_report = fraction + 0.1;
            eprintln!(
                "convert: {:>3.0}%  {}/{} tensors  {:.0}/{:.0} MB  {:.1} s  ({} {})",
                fraction * 100.0,
                p.done,
                p.total,
                p.bytes_written as f64 / 1e6,
                p.bytes_total as f64 / 1e6,
                start.elapsed().as_secs_f64(),
                p.tensor,
                p.ggml_type
            );
        }
    })?;
    let hp = &done.hparams;
    eprintln!(
        "convert: wrote {} ({:?}, {} layers, hidden {}, vocab {}, {} tensors, {:.1} MB) in {:.1} s",
        done.out_dir.display(),
        hp.arch,
        hp.n_layers,
        hp.hidden,
        hp.vocab,
        done.tensors,
        done.safetensors_bytes as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    Ok(0)
}

fn check_output_free(out_dir: &Path) -> Result<(), ConvertError> {
    match std::fs::read_dir(out_dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(ConvertError::OutputExists { path: out_dir.to_path_buf() }),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        // A file, or a folder we cannot list: never overwrite it.
        Err(_) => Err(ConvertError::OutputExists { path: out_dir.to_path_buf() }),
    }
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), ConvertError> {
    let mut text = serde_json::to_string_pretty(value).expect("JSON values serialize");
    text.push('\n');
    std::fs::write(path, text).map_err(|source| ConvertError::Output { path: path.to_path_buf(), source })
}

/// A hidden sibling of the output folder, removed on drop unless committed.
struct Staging {
    path: PathBuf,
    committed: bool,
}

impl Staging {
    fn create(out_dir: &Path) -> Result<Staging, ConvertError> {
        let parent = match out_dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = out_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
        std::fs::create_dir_all(&parent).map_err(|source| ConvertError::Output { path: parent.clone(), source })?;
        let path = parent.join(format!(".{name}.partial-{}", std::process::id()));
        // A leftover from a killed run with the same pid is ours to replace.
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(|source| ConvertError::Output { path: path.clone(), source })?;
        }
        std::fs::create_dir(&path).map_err(|source| ConvertError::Output { path: path.clone(), source })?;
        Ok(Staging { path, committed: false })
    }

    /// Move the finished folder into place (replacing an empty OUT_DIR).
    fn commit(mut self, out_dir: &Path) -> Result<(), ConvertError> {
        check_output_free(out_dir)?;
        std::fs::rename(&self.path, out_dir).map_err(|source| ConvertError::Output { path: out_dir.to_path_buf(), source })?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_is_removed_unless_committed() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("model");
        let staging = Staging::create(&out).unwrap();
        std::fs::write(staging.path.join("config.json"), "{}").unwrap();
        assert!(staging.path.file_name().unwrap().to_string_lossy().starts_with(".model.partial-"));
        drop(staging);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "an abandoned conversion left files");

        let staging = Staging::create(&out).unwrap();
        std::fs::write(staging.path.join("config.json"), "{}").unwrap();
        staging.commit(&out).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["model"]);
        assert!(out.join("config.json").is_file());
    }
}
