//! GGUF files (llama.cpp's model format), v2 and v3: metadata, tensor infos, and tensor
//! data dequantized to f32. The file is memory-mapped read-only; only the header is parsed
//! at open, and a tensor's pages are touched when it is dequantized.

mod dequant;
mod parse;
mod permute;
mod types;
mod value;

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::model::open;

pub use dequant::{dequantize, is_supported, DequantError, SUPPORTED};
pub use parse::{parse_header, Header, TensorInfo, DEFAULT_ALIGNMENT, MAGIC, MAX_METADATA_ELEMENTS};
pub use permute::{unpermute_rows, PermuteError};
pub use types::GgmlType;
pub use value::{Value, ValueType};

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{file}: cannot read: {source}")]
    Io { file: PathBuf, source: std::io::Error },
    #[error("{file}: not a GGUF file (starts with {found:?}, expected \"GGUF\")", found = String::from_utf8_lossy(found))]
    BadMagic { file: PathBuf, found: [u8; 4] },
    #[error("{file}: GGUF version {version} is not supported (2 and 3 are{hint})",
        hint = if version.swap_bytes() <= 3 { "; this looks like a big-endian file" } else { "" })]
    Version { file: PathBuf, version: u32 },
    #[error("{file}: truncated: {what} needs {needed} bytes at offset {offset}, but the file has {len}")]
    Truncated { file: PathBuf, what: String, offset: u64, needed: u64, len: u64 },
    #[error("{file}: {what}: {reason}")]
    Invalid { file: PathBuf, what: String, reason: String },
    #[error("{file}: tensor {tensor:?} has unknown ggml type {type_id}")]
    UnknownType { file: PathBuf, tensor: String, type_id: u32 },
    #[error("{file}: tensor {tensor:?}: {source}")]
    Dequant { file: PathBuf, tensor: String, source: DequantError },
    #[error("{file}: metadata key {key:?} is missing")]
    MissingKey { file: PathBuf, key: String },
    #[error("{file}: metadata key {key:?} = {value} is not {expected}")]
    WrongKeyType { file: PathBuf, key: String, value: String, expected: &'static str },
}

/// An open GGUF file.
pub struct GgufFile {
    pub path: PathBuf,
    pub header: Header,
    mmap: Mmap,
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let io = |source| GgufError::Io { file: path.to_path_buf(), source };
        let file: File = open::open_regular(path).map_err(io)?;
        // SAFETY: read-only map of a file we never write; a file changed underneath us while
        // converting is the hazard every mmap loader accepts.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = parse_header(path, &mmap)?;
        Ok(GgufFile { path: path.to_path_buf(), header, mmap })
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.header.tensors.iter().find(|t| t.name == name)
    }

    /// The raw (still quantized) bytes of a tensor; bounds were checked at open.
    pub fn tensor_bytes(&self, t: &TensorInfo) -> &[u8] {
        let start = (self.header.data_start + t.offset) as usize;
        &self.mmap[start..start + t.n_bytes as usize]
    }

    /// A tensor dequantized to f32, in ggml order (row-major over `t.shape()`).
    pub fn dequantize(&self, t: &TensorInfo) -> Result<Vec<f32>, GgufError> {
        let mut out = vec![0.0f32; t.n_elements as usize];
        self.dequantize_into(t, &mut out)?;
        Ok(out)
    }

    pub fn dequantize_into(&self, t: &TensorInfo, out: &mut [f32]) -> Result<(), GgufError> {
        dequantize(t.ggml_type, self.tensor_bytes(t), out).map_err(|source| GgufError::Dequant {
            file: self.path.clone(),
            tensor: t.name.clone(),
            source,
        })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.header.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn missing(&self, key: &str) -> GgufError {
        GgufError::MissingKey { file: self.path.clone(), key: key.to_string() }
    }

    fn wrong(&self, key: &str, value: &Value, expected: &'static str) -> GgufError {
        GgufError::WrongKeyType { file: self.path.clone(), key: key.to_string(), value: value.summary(), expected }
    }

    /// A typed optional key: absent is `Ok(None)`, present with the wrong type is an error.
    fn typed<'a, T>(&'a self, key: &str, expected: &'static str, read: impl Fn(&'a Value) -> Option<T>) -> Result<Option<T>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => read(v).map(Some).ok_or_else(|| self.wrong(key, v, expected)),
        }
    }

    pub fn u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.typed(key, "a non-negative integer", Value::as_u64)
    }

    pub fn f64(&self, key: &str) -> Result<Option<f64>, GgufError> {
        self.typed(key, "a number", Value::as_f64)
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.typed(key, "a bool", Value::as_bool)
    }

    pub fn str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.typed(key, "a string", Value::as_str)
    }

    pub fn require_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.u64(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn require_f64(&self, key: &str) -> Result<f64, GgufError> {
        self.f64(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn require_str(&self, key: &str) -> Result<&str, GgufError> {
        self.str(key)?.ok_or_else(|| self.missing(key))
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn str_array(&self, key: &str) -> Result<Option<Vec<&str>>, GgufError> {
        self.typed(key, "an array of strings", |v| v.as_array()?.iter().map(Value::as_str).collect())
    }

    pub fn require_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        self.str_array(key)?.ok_or_else(|| self.missing(key))
    }

    /// An array of integers (e.g. `tokenizer.ggml.token_type`).
    pub fn i64_array(&self, key: &str) -> Result<Option<Vec<i64>>, GgufError> {
        self.typed(key, "an array of integers", |v| v.as_array()?.iter().map(Value::as_i64).collect())
    }
}
