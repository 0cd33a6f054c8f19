//! A small GGUF writer for tests (v3, little-endian), plus block builders with exact values.
//! It writes real files that the reader under test opens; it shares no code with it.

#![allow(dead_code)] // each test crate that includes this uses a different part

use std::path::Path;

use specdeck::model::gguf::{GgmlType, Value};

pub struct Tensor {
    pub name: String,
    /// HF (row-major) shape; written reversed, as ggml dims.
    pub shape: Vec<u64>,
    pub type_id: u32,
    pub data: Vec<u8>,
}

pub struct Writer {
    pub version: u32,
    pub alignment: u64,
    pub kv: Vec<(String, Value)>,
    pub tensors: Vec<Tensor>,
}

impl Default for Writer {
    fn default() -> Self {
        Writer { version: 3, alignment: 32, kv: Vec::new(), tensors: Vec::new() }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(..) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend(x.to_le_bytes()),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(elem, items) => {
            out.extend(elem.id().to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
    }
}

impl Writer {
    pub fn kv(mut self, key: &str, v: Value) -> Self {
        self.kv.push((key.to_string(), v));
        self
    }

    pub fn tensor(mut self, name: &str, shape: &[u64], ty: GgmlType, data: Vec<u8>) -> Self {
        self.tensors.push(Tensor { name: name.to_string(), shape: shape.to_vec(), type_id: ty.id(), data });
        self
    }

    pub fn f32_tensor(self, name: &str, shape: &[u64], values: &[f32]) -> Self {
        self.tensor(name, shape, GgmlType::F32, f32_bytes(values))
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            put_str(&mut out, k);
            out.extend(type_id(v).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend((t.shape.len() as u32).to_le_bytes());
            for d in t.shape.iter().rev() {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.type_id.to_le_bytes());
            out.extend(offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.data.len() as u64).next_multiple_of(self.alignment);
        }
        let data_start = (out.len() as u64).next_multiple_of(self.alignment);
        out.resize(data_start as usize, 0);
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize((data_start + off) as usize, 0);
            out.extend(&t.data);
        }
        out
    }

    pub fn write(&self, path: &Path) {
        std::fs::write(path, self.to_bytes()).unwrap();
    }
}

pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn s(text: &str) -> Value {
    Value::String(text.to_string())
}

pub fn str_array(items: &[&str]) -> Value {
    Value::Array(specdeck::model::gguf::ValueType::String, items.iter().map(|t| s(t)).collect())
}

/// Q8_0 blocks for `values`, each block's scale the power of two that makes every value of
/// the block an exact multiple (the caller chooses values that are).
pub fn q8_0(values: &[f32], scale: f32) -> Vec<u8> {
    assert_eq!(values.len() % 32, 0);
    let mut out = Vec::new();
    for block in values.chunks(32) {
        out.extend(half::f16::from_f32(scale).to_le_bytes());
        for v in block {
            let q = v / scale;
            assert!(q.fract() == 0.0 && (-128.0..=127.0).contains(&q), "{v} is not a multiple of {scale}");
            out.push(q as i8 as u8);
        }
    }
    out
}

/// convert_hf_to_gguf's llama `permute`, over rows of `row_len`.
pub fn permute_rows(data: &[f32], row_len: usize, heads: usize) -> Vec<f32> {
    let head_dim = data.len() / row_len / heads;
    let half = head_dim / 2;
    let mut out = Vec::with_capacity(data.len());
    for h in 0..heads {
        for j in 0..half {
            for s in 0..2 {
                let r = h * head_dim + s * half + j;
                out.extend_from_slice(&data[r * row_len..(r + 1) * row_len]);
            }
        }
    }
    out
}
