//! Safetensors checkpoints: single-file or sharded (`model.safetensors.index.json`),
//! memory-mapped. Opening reads and validates headers only; tensor data pages are touched
//! only when a tensor's bytes are read.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use rayon::prelude::*;
use safetensors::tensor::{Dtype, Metadata, SafeTensors};

use crate::model::open;

pub const INDEX_FILE: &str = "model.safetensors.index.json";

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{file}: cannot read: {source}")]
    Io { file: PathBuf, source: std::io::Error },
    #[error("{file}: invalid safetensors header: {reason}")]
    BadHeader { file: PathBuf, reason: String },
    #[error("{file}: invalid index: {reason}")]
    BadIndex { file: PathBuf, reason: String },
    #[error("{dir}: no tensor named {name}")]
    MissingTensor { dir: PathBuf, name: String },
    #[error("{file}: tensor {name} has dtype {dtype}, expected {expected}")]
    WrongDtype { file: PathBuf, name: String, dtype: String, expected: &'static str },
    #[error("{file}: tensor {name} has shape {actual:?}, expected {expected:?}")]
    WrongShape { file: PathBuf, name: String, actual: Vec<usize>, expected: Vec<usize> },
    /// Values a tensor's format forbids, or that contradict the config.
    #[error("{file}: tensor {name} {reason}")]
    BadValues { file: PathBuf, name: String, reason: String },
    /// A config size that asks for more than the checkpoint has (checked before anything
    /// is allocated from it).
    #[error("{dir}: {key} {value} exceeds what this engine loads (the checkpoint holds {holds})")]
    ExceedsCheckpoint { dir: PathBuf, key: String, value: u64, holds: String },
}

/// Where a tensor lives and what it is.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorMeta {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// Index into `Checkpoint::files`.
    pub file_index: usize,
    /// Byte range of the data inside the file (absolute offsets).
    pub start: usize,
    pub end: usize,
}

/// One memory-mapped `.safetensors` file with its validated header.
pub struct SafetensorsFile {
    pub path: PathBuf,
    pub len: u64,
    mmap: Mmap,
    header_len: usize,
    metadata: Metadata,
}

impl SafetensorsFile {
    pub fn open(path: &Path) -> Result<SafetensorsFile, CheckpointError> {
        let io = |source| CheckpointError::Io { file: path.to_path_buf(), source };
        let file: File = open::open_regular(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        // SAFETY: the map is read-only and the model files are never written by us; a file
        // changed underneath a running engine is the same hazard every mmap loader accepts.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        let (header_len, metadata) = SafeTensors::read_metadata(&mmap)
            .map_err(|e| CheckpointError::BadHeader { file: path.to_path_buf(), reason: describe_st_error(&e, &mmap) })?;
        Ok(SafetensorsFile { path: path.to_path_buf(), len, mmap, header_len, metadata })
    }

    /// Tensor names with their metadata (absolute byte offsets), sorted by name.
    pub fn tensors(&self, file_index: usize) -> BTreeMap<String, TensorMeta> {
        let base = 8 + self.header_len;
        self.metadata
            .tensors()
            .into_iter()
            .map(|(name, info)| {
                let meta = TensorMeta {
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    file_index,
                    start: base + info.data_offsets.0,
                    end: base + info.data_offsets.1,
                };
                (name, meta)
            })
            .collect()
    }

    fn bytes(&self, start: usize, end: usize) -> &[u8] {
        &self.mmap[start..end]
    }
}

fn describe_st_error(e: &safetensors::SafeTensorError, bytes: &[u8]) -> String {
    use safetensors::SafeTensorError as E;
    let file_len = bytes.len();
    match e {
        E::HeaderTooSmall => format!("file is {file_len} bytes, too short for a header"),
        E::InvalidHeaderLength => "the header length runs past the end of the file (truncated?)".into(),
        E::MetadataIncompleteBuffer => {
            let length = "tensor data does not match the file length (truncated or padded file)";
            match tensor_at_fault(bytes) {
                Some(why) => format!("{length}: {why}"),
                None => length.into(),
            }
        }
        E::InvalidOffset(_) | E::TensorInvalidInfo | E::ValidationOverflow | E::MisalignedSlice => {
            tensor_at_fault(bytes).unwrap_or_else(|| e.to_string())
        }
        other => other.to_string(),
    }
}

/// Which tensor's entry in a (length-checked, JSON-valid) header is wrong, and how: the
/// safetensors crate reports most layout errors without the name.
fn tensor_at_fault(bytes: &[u8]) -> Option<String> {
    let n = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
    let data_len = bytes.len().checked_sub(8)?.checked_sub(n)? as u128;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(bytes.get(8..8 + n)?).ok()?;
    let mut entries = Vec::new();
    for (name, info) in header.iter().filter(|(k, _)| *k != "__metadata__") {
        let offsets = info.get("data_offsets")?.as_array()?;
        let (start, end) = (offsets.first()?.as_u64()? as u128, offsets.get(1)?.as_u64()? as u128);
        let numel = info.get("shape")?.as_array()?.iter().try_fold(1u128, |acc, d| acc.checked_mul(u128::from(d.as_u64()?)))?;
        let dtype: Dtype = serde_json::from_value(info.get("dtype")?.clone()).ok()?;
        entries.push((name, start, end, numel.checked_mul(dtype.bitsize() as u128)?, dtype));
    }
    entries.sort_by_key(|e| (e.1, e.2));
    let mut expected_start = 0u128;
    for (name, start, end, bits, dtype) in entries {
        let why = if end < start {
            format!("data_offsets [{start}, {end}] end before they start")
        } else if end > data_len {
            format!("data_offsets [{start}, {end}] run past the {data_len} bytes of tensor data (truncated file?)")
        } else if start != expected_start {
            format!("data_offsets [{start}, {end}] start at {start}, not at {expected_start} where the previous tensor ends (a gap or an overlap)")
        } else if bits % 8 != 0 || bits / 8 != end - start {
            format!("{dtype:?} of its shape needs {bits} bits, but data_offsets [{start}, {end}] hold {} bytes", end - start)
        } else {
            expected_start = end;
            continue;
        };
        return Some(format!("tensor {name}: {why}"));
    }
    (expected_start != data_len).then(|| format!("the tensors end at byte {expected_start} of the {data_len} bytes of data (padded file?)"))
}

/// A model folder's safetensors weights (all shards).
pub struct Checkpoint {
    pub dir: PathBuf,
    pub files: Vec<SafetensorsFile>,
    pub tensors: BTreeMap<String, TensorMeta>,
}

/// A borrowed view of one tensor's bytes.
pub struct TensorView<'a> {
    pub name: &'a str,
    pub file: &'a Path,
    pub dtype: Dtype,
    pub shape: &'a [usize],
    pub data: &'a [u8],
}

impl Checkpoint {
    /// True when the folder has any safetensors weights.
    /// Anything named like a weight file counts, even a folder or a dangling link: opening it
    /// then says what is wrong with it, rather than the folder seeming to have no weights.
    pub fn present(dir: &Path) -> bool {
        open::exists_in_any_form(&dir.join(INDEX_FILE)) || !safetensors_files(dir).unwrap_or_default().is_empty()
    }

    /// Open every shard of a folder (via the index when there is one). Headers only.
    pub fn open(dir: &Path) -> Result<Checkpoint, CheckpointError> {
        let index_path = dir.join(INDEX_FILE);
        let (paths, weight_map) = if open::exists_in_any_form(&index_path) {
            let (paths, map) = read_index(dir, &index_path)?;
            (paths, Some(map))
        } else {
            (safetensors_files(dir).map_err(|source| CheckpointError::Io { file: dir.to_path_buf(), source })?, None)
        };
        let mut files = Vec::with_capacity(paths.len());
        let mut tensors = BTreeMap::new();
        for (i, path) in paths.iter().enumerate() {
            let f = SafetensorsFile::open(path)?;
            tensors.extend(f.tensors(i));
            files.push(f);
        }
        if let Some(map) = weight_map {
            for (name, file) in map {
                match tensors.get(&name) {
                    Some(meta) if files[meta.file_index].path.file_name() == Some(file.as_os_str()) => {}
                    Some(meta) => {
                        return Err(CheckpointError::BadIndex {
                            file: index_path.clone(),
                            reason: format!(
                                "{name} is mapped to {} but found in {}",
                                file.display(),
                                files[meta.file_index].path.display()
                            ),
                        })
                    }
                    None => {
                        return Err(CheckpointError::BadIndex {
                            file: index_path.clone(),
                            reason: format!("{name} is mapped to {} but that file has no such tensor", file.display()),
                        })
                    }
                }
            }
        }
        Ok(Checkpoint { dir: dir.to_path_buf(), files, tensors })
    }

    /// The stacks of numbered layers the tensors hold: for each prefix ending in `layers.`
    /// (`model.layers.`, `language_model.model.layers.`), how many distinct `N` follow it.
    pub fn layer_stacks(&self) -> BTreeMap<String, usize> {
        let mut stacks: BTreeMap<String, std::collections::BTreeSet<u64>> = BTreeMap::new();
        for name in self.tensors.keys() {
            let parts: Vec<&str> = name.split('.').collect();
            for (i, pair) in parts.windows(2).enumerate() {
                if let ("layers", Ok(n)) = (pair[0], pair[1].parse::<u64>()) {
                    stacks.entry(format!("{}.", parts[..=i].join("."))).or_default().insert(n);
                    break;
                }
            }
        }
        stacks.into_iter().map(|(prefix, ids)| (prefix, ids.len())).collect()
    }

    /// Refuse a config's layer count the tensors cannot back (before any allocation it sizes).
    pub fn check_layers(&self, prefix: &str, key: &str, layers: u64) -> Result<(), CheckpointError> {
        let holds = self.layer_stacks().get(prefix).copied().unwrap_or(0);
        if layers > holds as u64 {
            return Err(CheckpointError::ExceedsCheckpoint {
                dir: self.dir.clone(),
                key: key.to_string(),
                value: layers,
                holds: format!("{holds} layers under {prefix}"),
            });
        }
        Ok(())
    }

    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.len).sum()
    }

    pub fn meta(&self, name: &str) -> Option<&TensorMeta> {
        self.tensors.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn file_of(&self, name: &str) -> Option<&Path> {
        self.meta(name).map(|m| self.files[m.file_index].path.as_path())
    }

    /// The tensor `name`, borrowed from the checkpoint alone (its name is the index's), so
    /// that its bytes outlive the name asked with.
    pub fn view(&self, name: &str) -> Result<TensorView<'_>, CheckpointError> {
        let (name, meta) = self
            .tensors
            .get_key_value(name)
            .ok_or_else(|| CheckpointError::MissingTensor { dir: self.dir.clone(), name: name.to_string() })?;
        let file = &self.files[meta.file_index];
        Ok(TensorView { name, file: &file.path, dtype: meta.dtype, shape: &meta.shape, data: file.bytes(meta.start, meta.end) })
    }

    /// A tensor converted to f32, with its shape checked when `expected` is given.
    pub fn f32(&self, name: &str, expected: Option<&[usize]>) -> Result<Vec<f32>, CheckpointError> {
        let v = self.view(name)?;
        if let Some(want) = expected {
            v.expect_shape(want)?;
        }
        v.to_f32()
    }

    pub fn i64(&self, name: &str) -> Result<Vec<i64>, CheckpointError> {
        self.view(name)?.to_i64()
    }
}

impl TensorView<'_> {
    pub fn expect_shape(&self, expected: &[usize]) -> Result<(), CheckpointError> {
        if self.shape != expected {
            return Err(CheckpointError::WrongShape {
                file: self.file.to_path_buf(),
                name: self.name.to_string(),
                actual: self.shape.to_vec(),
                expected: expected.to_vec(),
            });
        }
        Ok(())
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub(crate) fn wrong_dtype(&self, expected: &'static str) -> CheckpointError {
        CheckpointError::WrongDtype {
            file: self.file.to_path_buf(),
            name: self.name.to_string(),
            dtype: format!("{:?}", self.dtype),
            expected,
        }
    }

    /// Convert F32/F16/BF16 data to f32 (the data may be unaligned in the file).
    pub fn to_f32(&self) -> Result<Vec<f32>, CheckpointError> {
        let d = self.data;
        Ok(match self.dtype {
            Dtype::F32 => d.par_chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            Dtype::F16 => d.par_chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::BF16 => d.par_chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            _ => return Err(self.wrong_dtype("F32, F16 or BF16")),
        })
    }

    /// Convert BF16/F16/F32 data to bf16 bits (for GPU upload without an f32 detour).
    pub fn to_bf16(&self) -> Result<Vec<half::bf16>, CheckpointError> {
        let d = self.data;
        Ok(match self.dtype {
            Dtype::BF16 => d.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]])).collect(),
            Dtype::F16 => d.chunks_exact(2).map(|c| half::bf16::from_f32(half::f16::from_le_bytes([c[0], c[1]]).to_f32())).collect(),
            Dtype::F32 => d.chunks_exact(4).map(|c| half::bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
            _ => return Err(self.wrong_dtype("F32, F16 or BF16")),
        })
    }

    pub fn to_i64(&self) -> Result<Vec<i64>, CheckpointError> {
        let d = self.data;
        Ok(match self.dtype {
            Dtype::I64 => d.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("chunk of 8"))).collect(),
            Dtype::I32 => d.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().expect("chunk of 4")) as i64).collect(),
            _ => return Err(self.wrong_dtype("I64 or I32")),
        })
    }
}

/// `*.safetensors` entries of a folder, sorted by name (whatever they are: `open` refuses
/// the ones that are not regular files, by name).
fn safetensors_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    out.sort();
    Ok(out)
}

/// Parse `model.safetensors.index.json`: the shard files (sorted, unique) and the name map.
fn read_index(dir: &Path, index_path: &Path) -> Result<(Vec<PathBuf>, BTreeMap<String, PathBuf>), CheckpointError> {
    let bad = |reason: String| CheckpointError::BadIndex { file: index_path.to_path_buf(), reason };
    let text = open::read_text_capped(index_path, open::JSON_LIMIT)
        .map_err(|source| CheckpointError::Io { file: index_path.to_path_buf(), source })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let map = v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| bad("no \"weight_map\" object".into()))?;
    let mut names = BTreeMap::new();
    for (name, file) in map {
        let file = file.as_str().ok_or_else(|| bad(format!("weight_map[{name}] is not a file name")))?;
        if file.contains('/') || file.contains("..") {
            return Err(bad(format!("weight_map[{name}] = {file:?} points outside the folder")));
        }
        names.insert(name.clone(), PathBuf::from(file));
    }
    let mut paths: Vec<PathBuf> = names.values().map(|f| dir.join(f)).collect();
    paths.sort();
    paths.dedup();
    Ok((paths, names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView as StView;

    fn write_st(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
        let views: Vec<(String, StView)> =
            tensors.iter().map(|(n, d, s, b)| (n.to_string(), StView::new(*d, s.clone(), b).unwrap())).collect();
        safetensors::serialize_to_file(views, None, path).unwrap();
    }

    fn bf16_bytes(xs: &[f32]) -> Vec<u8> {
        xs.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect()
    }

    #[test]
    fn reads_sharded_and_converts() {
        let dir = tempfile::tempdir().unwrap();
        write_st(&dir.path().join("a.safetensors"), &[("w", Dtype::BF16, vec![2, 2], bf16_bytes(&[1.0, -2.0, 0.5, 3.0]))]);
        let d2t: Vec<u8> = [0i64, 5, 7].iter().flat_map(|x| x.to_le_bytes()).collect();
        write_st(&dir.path().join("b.safetensors"), &[("d2t", Dtype::I64, vec![3], d2t)]);
        std::fs::write(dir.path().join(INDEX_FILE), r#"{"weight_map": {"w": "a.safetensors", "d2t": "b.safetensors"}}"#).unwrap();
        let ck = Checkpoint::open(dir.path()).unwrap();
        assert_eq!(ck.files.len(), 2);
        assert_eq!(ck.f32("w", Some(&[2, 2])).unwrap(), vec![1.0, -2.0, 0.5, 3.0]);
        assert_eq!(ck.i64("d2t").unwrap(), vec![0, 5, 7]);
        let e = ck.f32("w", Some(&[4])).unwrap_err().to_string();
        assert!(e.ends_with("tensor w has shape [2, 2], expected [4]"), "{e}");
        let e = ck.f32("nope", None).unwrap_err().to_string();
        assert!(e.ends_with("no tensor named nope"), "{e}");
    }

    #[test]
    fn truncated_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        write_st(&p, &[("w", Dtype::F32, vec![4], vec![0u8; 16])]);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 5]).unwrap();
        let e = Checkpoint::open(dir.path()).err().unwrap().to_string();
        assert!(e.contains("model.safetensors: invalid safetensors header"), "{e}");
        assert!(e.contains("truncated"), "{e}");
        std::fs::write(&p, [1u8, 2, 3]).unwrap();
        let e = Checkpoint::open(dir.path()).err().unwrap().to_string();
        assert!(e.contains("too short for a header"), "{e}");
    }

    #[test]
    fn index_pointing_at_a_missing_tensor_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write_st(&dir.path().join("a.safetensors"), &[("w", Dtype::F32, vec![1], vec![0u8; 4])]);
        std::fs::write(dir.path().join(INDEX_FILE), r#"{"weight_map": {"w": "a.safetensors", "v": "a.safetensors"}}"#).unwrap();
        let e = Checkpoint::open(dir.path()).err().unwrap().to_string();
        assert!(e.contains("v is mapped to a.safetensors but that file has no such tensor"), "{e}");
    }
}
