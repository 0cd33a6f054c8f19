//! Parsing a GGUF header (v2/v3, little-endian) from bytes: metadata, tensor infos and the
//! data section's layout. Every count and length is checked against the bytes that remain
//! before anything is allocated, so a corrupt or hostile file gives an error, never a panic
//! or a huge allocation.

use std::collections::HashSet;
use std::path::Path;

use super::types::GgmlType;
use super::value::{Value, ValueType};
use super::GgufError;

pub const MAGIC: &[u8; 4] = b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: u32 = 4;
/// Arrays of arrays are legal; a deeper nesting than this is only seen in corrupt files.
const MAX_ARRAY_DEPTH: usize = 4;
/// The most array elements the metadata may hold in all. A parsed value takes 32 bytes
/// where a u8 element took 1 in the file, so this bounds the header's memory (256 MiB) by
/// more than the file size alone does; a 262144-token vocabulary (tokens, scores, types
/// and merges) needs about 1.1 million.
pub const MAX_METADATA_ELEMENTS: usize = 1 << 23;

/// One tensor's description from the header.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the contiguous (fastest) dimension.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    pub n_elements: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    /// The shape in row-major (PyTorch) order: the ggml dims reversed.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

#[derive(Clone, Debug)]
pub struct Header {
    pub version: u32,
    /// In file order.
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_start: u64,
}

struct Cursor<'a> {
    file: &'a Path,
    bytes: &'a [u8],
    pos: usize,
    /// Array elements still allowed (`MAX_METADATA_ELEMENTS` in all).
    elements_left: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GgufError> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.bytes.len()).ok_or_else(|| GgufError::Truncated {
            file: self.file.to_path_buf(),
            what: what.to_string(),
            offset: self.pos as u64,
            needed: n as u64,
            len: self.bytes.len() as u64,
        })?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        Ok(self.take(N, what)?.try_into().expect("take returned N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn invalid(&self, what: &str, reason: String) -> GgufError {
        GgufError::Invalid { file: self.file.to_path_buf(), what: what.to_string(), reason }
    }

    /// A count of items of at least `min_size` bytes each: rejected when the items could not
    /// fit in what remains of the file.
    fn count(&mut self, min_size: usize, what: &str) -> Result<usize, GgufError> {
        let at = self.pos as u64;
        let n = self.u64(what)?;
        let fits = usize::try_from(n).ok().and_then(|n| n.checked_mul(min_size)).is_some_and(|b| b <= self.remaining());
        if !fits {
            return Err(GgufError::Truncated {
                file: self.file.to_path_buf(),
                what: format!("{what} ({n} items)"),
                offset: at,
                needed: n.saturating_mul(min_size as u64),
                len: self.bytes.len() as u64,
            });
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        // take() checks the length against the bytes left before anything is copied.
        let len = usize::try_from(self.u64(what)?).unwrap_or(usize::MAX);
        let at = self.pos;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec()).map_err(|e| self.invalid(what, format!("string at offset {at} is not UTF-8 ({e})")))
    }

    fn value(&mut self, ty: ValueType, what: &str, depth: usize) -> Result<Value, GgufError> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(what)?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(what)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            ValueType::U32 => Value::U32(self.u32(what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            ValueType::U64 => Value::U64(self.u64(what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            ValueType::Bool => match self.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(self.invalid(what, format!("bool byte is {b}, not 0 or 1"))),
            },
            ValueType::String => Value::String(self.string(what)?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.invalid(what, format!("arrays nested deeper than {MAX_ARRAY_DEPTH}")));
                }
                let elem = self.value_type(what)?;
                let n = self.count(elem.min_size(), what)?;
                self.elements_left = self.elements_left.checked_sub(n).ok_or_else(|| {
                    self.invalid(
                        what,
                        format!("an array of {n} elements takes the metadata past {MAX_METADATA_ELEMENTS} array elements in all"),
                    )
                })?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(elem, what, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }

    fn value_type(&mut self, what: &str) -> Result<ValueType, GgufError> {
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or_else(|| self.invalid(what, format!("unknown value type {id}")))
    }
}

/// Parse the header of a GGUF file whose whole contents are `bytes`; `file` names it in
/// errors. Tensor data is bounds-checked but not read.
pub fn parse_header(file: &Path, bytes: &[u8]) -> Result<Header, GgufError> {
    let mut c = Cursor { file, bytes, pos: 0, elements_left: MAX_METADATA_ELEMENTS };
    let magic = c.array::<4>("the magic number")?;
    if &magic != MAGIC {
        return Err(GgufError::BadMagic { file: file.to_path_buf(), found: magic });
    }
    let version = c.u32("the version")?;
    if version != 2 && version != 3 {
        return Err(GgufError::Version { file: file.to_path_buf(), version });
    }
    // Minimum sizes: a tensor info is name(8) + n_dims(4) + type(4) + offset(8); a key/value
    // is key(8) + type(4) + one byte of value.
    let n_tensors = c.count(24, "the tensor count")?;
    let n_kv = c.count(13, "the metadata count")?;

    let mut metadata = Vec::with_capacity(n_kv);
    let mut keys = HashSet::with_capacity(n_kv);
    for i in 0..n_kv {
        let key = c.string(&format!("metadata key #{i}"))?;
        let what = format!("metadata key {key:?}");
        let ty = c.value_type(&what)?;
        let value = c.value(ty, &what, 0)?;
        if !keys.insert(key.clone()) {
            return Err(c.invalid(&what, "the key appears twice".into()));
        }
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) if a.is_power_of_two() => u64::from(*a),
        Some((_, v)) => return Err(c.invalid("metadata key \"general.alignment\"", format!("{} is not a power-of-two u32", v.summary()))),
    };

    let mut tensors = Vec::with_capacity(n_tensors);
    let mut names = HashSet::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let name = c.string(&format!("tensor #{i}'s name"))?;
        let what = format!("tensor {name:?}");
        let info = tensor_info(&mut c, name, &what)?;
        if !names.insert(info.name.clone()) {
            return Err(c.invalid(&what, "the name appears twice".into()));
        }
        tensors.push(info);
    }

    let data_start = (c.pos as u64).next_multiple_of(alignment);
    for t in &tensors {
        let what = format!("tensor {:?}", t.name);
        if t.offset % alignment != 0 {
            return Err(c.invalid(&what, format!("data offset {} is not a multiple of the alignment {alignment}", t.offset)));
        }
        let end = data_start.checked_add(t.offset).and_then(|s| s.checked_add(t.n_bytes));
        if end.is_none_or(|end| end > bytes.len() as u64) {
            return Err(GgufError::Truncated {
                file: file.to_path_buf(),
                what: format!("{what} data ({} {} bytes)", t.ggml_type, t.n_bytes),
                offset: data_start.saturating_add(t.offset),
                needed: t.n_bytes,
                len: bytes.len() as u64,
            });
        }
    }
    Ok(Header { version, metadata, tensors, alignment, data_start })
}

fn tensor_info(c: &mut Cursor, name: String, what: &str) -> Result<TensorInfo, GgufError> {
    let n_dims = c.u32(what)?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(c.invalid(what, format!("{n_dims} dimensions (1 to {MAX_DIMS} allowed)")));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(c.u64(what)?);
    }
    let type_id = c.u32(what)?;
    let offset = c.u64(what)?;
    let ggml_type =
        GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownType { file: c.file.to_path_buf(), tensor: name.clone(), type_id })?;
    // ggml caps a tensor's element count at i64::MAX.
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| c.invalid(what, format!("dimensions {dims:?} overflow")))?;
    if dims[0] % ggml_type.block_elems() != 0 {
        return Err(
            c.invalid(what, format!("row length {} is not a multiple of {}'s block of {}", dims[0], ggml_type, ggml_type.block_elems()))
        );
    }
    let n_bytes = (n_elements / ggml_type.block_elems())
        .checked_mul(ggml_type.block_bytes())
        .ok_or_else(|| c.invalid(what, format!("dimensions {dims:?} overflow")))?;
    Ok(TensorInfo { name, dims, ggml_type, offset, n_elements, n_bytes })
}
