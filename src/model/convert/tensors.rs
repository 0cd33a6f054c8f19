//! GGUF tensors → HF names and shapes (checked against the hyperparameters), and the
//! streaming writer of `model.safetensors`: one tensor is dequantized at a time, so memory
//! stays at the largest tensor rather than the whole model.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;

use half::{bf16, slice::HalfFloatSliceExt};
use rayon::prelude::*;
use safetensors::tensor::{Dtype, Metadata, TensorInfo as StInfo};

use super::hparams::{Hparams, OutDtype};
use super::ConvertError;
use crate::model::gguf::{dequantize, is_supported, unpermute_rows, GgmlType, GgufError, GgufFile, TensorInfo};

/// One output tensor.
#[derive(Clone, Debug)]
pub struct Planned<'a> {
    pub hf_name: String,
    pub source: &'a TensorInfo,
    /// HF (row-major) shape.
    pub shape: Vec<usize>,
    /// Heads to undo llama.cpp's Q/K row permutation over.
    pub unpermute_heads: Option<usize>,
}

#[derive(Clone, Copy)]
enum Dim {
    Hidden,
    /// heads × head_dim
    Q,
    /// kv_heads × head_dim
    Kv,
    Ffn,
}

/// Which heads llama.cpp permuted a tensor's rows over (llama only).
#[derive(Clone, Copy, PartialEq)]
enum Permuted {
    No,
    OverHeads,
    OverKvHeads,
}

#[derive(Clone, Copy, PartialEq)]
enum Needed {
    Always,
    /// Required for qwen2, and for a llama whose layer 0 has `attn_q.bias`.
    WithQkvBias,
    Optional,
}

struct LayerTensor {
    gguf: &'static str,
    hf: &'static str,
    dims: &'static [Dim],
    permuted: Permuted,
    needed: Needed,
}

const fn lt(gguf: &'static str, hf: &'static str, dims: &'static [Dim], permuted: Permuted, needed: Needed) -> LayerTensor {
    LayerTensor { gguf, hf, dims, permuted, needed }
}

const LAYER_TENSORS: [LayerTensor; 13] = {
    use Dim::*;
    use Needed::*;
    use Permuted::*;
    [
        lt("attn_norm.weight", "input_layernorm.weight", &[Hidden], No, Always),
        lt("ffn_norm.weight", "post_attention_layernorm.weight", &[Hidden], No, Always),
        lt("attn_q.weight", "self_attn.q_proj.weight", &[Q, Hidden], OverHeads, Always),
        lt("attn_k.weight", "self_attn.k_proj.weight", &[Kv, Hidden], OverKvHeads, Always),
        lt("attn_v.weight", "self_attn.v_proj.weight", &[Kv, Hidden], No, Always),
        lt("attn_output.weight", "self_attn.o_proj.weight", &[Hidden, Q], No, Always),
        lt("attn_q.bias", "self_attn.q_proj.bias", &[Q], OverHeads, WithQkvBias),
        lt("attn_k.bias", "self_attn.k_proj.bias", &[Kv], OverKvHeads, WithQkvBias),
        lt("attn_v.bias", "self_attn.v_proj.bias", &[Kv], No, WithQkvBias),
        lt("attn_output.bias", "self_attn.o_proj.bias", &[Hidden], No, Optional),
        lt("ffn_gate.weight", "mlp.gate_proj.weight", &[Ffn, Hidden], No, Always),
        lt("ffn_up.weight", "mlp.up_proj.weight", &[Ffn, Hidden], No, Always),
        lt("ffn_down.weight", "mlp.down_proj.weight", &[Hidden, Ffn], No, Always),
    ]
};

impl Hparams {
    fn size(&self, d: Dim) -> usize {
        match d {
            Dim::Hidden => self.hidden,
            Dim::Q => self.heads * self.head_dim,
            Dim::Kv => self.kv_heads * self.head_dim,
            Dim::Ffn => self.ffn,
        }
    }

    fn unpermute_heads(&self, p: Permuted) -> Option<usize> {
        match p {
            _ if !self.arch.qk_permuted() => None,
            Permuted::No => None,
            Permuted::OverHeads => Some(self.heads),
            Permuted::OverKvHeads => Some(self.kv_heads),
        }
    }

    fn needs(&self, n: Needed) -> bool {
        match n {
            Needed::Always => true,
            Needed::WithQkvBias => self.arch.requires_qkv_bias() || self.qkv_bias,
            Needed::Optional => false,
        }
    }
}

/// Map every GGUF tensor to its HF name and check its shape and type; name any tensor that
/// is missing, unknown, misshapen or of a type we cannot dequantize.
pub fn plan<'a>(g: &'a GgufFile, hp: &Hparams) -> Result<Vec<Planned<'a>>, ConvertError> {
    let tensor_err = |t: &str, reason: String| ConvertError::Tensor { file: g.path.clone(), tensor: t.into(), reason };
    let mut out = Vec::with_capacity(g.tensors().len());
    let mut seen = HashSet::new();
    for t in g.tensors() {
        let (hf_name, shape, unpermute_heads) = match t.name.as_str() {
            "token_embd.weight" => ("model.embed_tokens.weight".to_string(), vec![hp.vocab, hp.hidden], None),
            "output.weight" => ("lm_head.weight".to_string(), vec![hp.vocab, hp.hidden], None),
            "output_norm.weight" => ("model.norm.weight".to_string(), vec![hp.hidden], None),
            name => {
                let (layer, suffix) =
                    split_layer(name).ok_or_else(|| tensor_err(name, "has no HF equivalent for this converter".into()))?;
                if layer >= hp.n_layers {
                    return Err(tensor_err(name, format!("layer {layer} is past the block count {}", hp.n_layers)));
                }
                let lt = LAYER_TENSORS
                    .iter()
                    .find(|lt| lt.gguf == suffix)
                    .ok_or_else(|| tensor_err(name, "has no HF equivalent for this converter".into()))?;
                let shape = lt.dims.iter().map(|&d| hp.size(d)).collect();
                (format!("model.layers.{layer}.{}", lt.hf), shape, hp.unpermute_heads(lt.permuted))
            }
        };
        if t.shape() != shape {
            return Err(tensor_err(&t.name, format!("has shape {:?}, but the metadata sizes give {shape:?} for {hf_name}", t.shape())));
        }
        if !is_supported(t.ggml_type) {
            return Err(tensor_err(&t.name, format!("type {} cannot be dequantized", t.ggml_type)));
        }
        seen.insert(t.name.as_str());
        out.push(Planned { hf_name, source: t, shape, unpermute_heads });
    }
    // Walked lazily: the first absent name stops the walk, whatever block_count claims.
    let global = ["token_embd.weight", "output_norm.weight"].map(String::from).into_iter();
    let per_layer = (0..hp.n_layers)
        .flat_map(|layer| LAYER_TENSORS.iter().filter(|lt| hp.needs(lt.needed)).map(move |lt| format!("blk.{layer}.{}", lt.gguf)));
    if let Some(missing) = global.chain(per_layer).find(|n| !seen.contains(n.as_str())) {
        return Err(ConvertError::MissingTensor { file: g.path.clone(), tensor: missing });
    }
    out.sort_by(|a, b| a.hf_name.cmp(&b.hf_name));
    Ok(out)
}

/// `blk.12.attn_q.weight` → (12, "attn_q.weight").
fn split_layer(name: &str) -> Option<(usize, &str)> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, suffix) = rest.split_once('.')?;
    Some((layer.parse().ok()?, suffix))
}

/// What the writer reports after each tensor.
#[derive(Clone, Debug)]
pub struct Progress<'a> {
    pub done: usize,
    pub total: usize,
    pub tensor: &'a str,
    pub ggml_type: GgmlType,
    pub bytes_written: u64,
    pub bytes_total: u64,
}

/// Write `model.safetensors` (tensors sorted by name, `format: pt` metadata).
pub fn write_safetensors(
    g: &GgufFile,
    planned: &[Planned],
    dtype: OutDtype,
    path: &Path,
    progress: &mut dyn FnMut(&Progress),
) -> Result<u64, ConvertError> {
    let st_dtype = match dtype {
        OutDtype::Bf16 => Dtype::BF16,
        OutDtype::F32 => Dtype::F32,
    };
    let mut infos = Vec::with_capacity(planned.len());
    let mut offset = 0usize;
    for p in planned {
        let overflow = || ConvertError::Tensor {
            file: g.path.clone(),
            tensor: p.source.name.clone(),
            reason: format!("of {} elements is past the {} bytes an output file can address", p.source.n_elements, usize::MAX),
        };
        let len = usize::try_from(p.source.n_elements).ok().and_then(|n| n.checked_mul(dtype.size() as usize)).ok_or_else(overflow)?;
        let end = offset.checked_add(len).ok_or_else(overflow)?;
        infos.push((p.hf_name.clone(), StInfo { dtype: st_dtype, shape: p.shape.clone(), data_offsets: (offset, end) }));
        offset = end;
    }
    let format = HashMap::from([("format".to_string(), "pt".to_string())]);
    let metadata = Metadata::new(Some(format), infos).map_err(|e| ConvertError::Tensor {
        file: g.path.clone(),
        tensor: "(safetensors header)".into(),
        reason: e.to_string(),
    })?;
    let mut header = serde_json::to_string(&metadata).expect("a safetensors header serializes");
    // safetensors pads the header with spaces to a multiple of 8 so the data is aligned.
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let write_err = |source| ConvertError::Output { path: path.to_path_buf(), source };
    let file = std::fs::File::create(path).map_err(write_err)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    w.write_all(&(header.len() as u64).to_le_bytes()).map_err(write_err)?;
    w.write_all(header.as_bytes()).map_err(write_err)?;
    let bytes_total = offset as u64;
    let mut bytes_written = 0u64;
    // Buffers reused across chunks and tensors: fresh ones would be page-faulted in again
    // each time, and chunks small enough to stay in cache make the copy into the page cache
    // cheap (whole-tensor buffers cost more system time than the dequantization itself).
    let (mut values, mut halves) = (Vec::new(), Vec::new());
    for (i, p) in planned.iter().enumerate() {
        stream_values(g, p, &mut values, &mut |chunk| {
            let bytes: &[u8] = match dtype {
                OutDtype::F32 => bytemuck::cast_slice(chunk),
                OutDtype::Bf16 => {
                    to_bf16(chunk, &mut halves);
                    bytemuck::cast_slice(&halves)
                }
            };
            bytes_written += bytes.len() as u64;
            w.write_all(bytes).map_err(write_err)
        })?;
        progress(&Progress {
            done: i + 1,
            total: planned.len(),
            tensor: &p.source.name,
            ggml_type: p.source.ggml_type,
            bytes_written,
            bytes_total,
        });
    }
    w.flush().map_err(write_err)?;
    w.into_inner().map_err(|e| write_err(e.into_error()))?.sync_all().map_err(write_err)?;
    Ok(bytes_total)
}

/// Elements per chunk when streaming a tensor (4 MB of f32).
const CHUNK_ELEMS: usize = 1 << 20;

/// Feed a tensor's values in HF layout to `emit`, whole rows at a time; a tensor whose rows
/// must be un-permuted (q/k projections, small) goes in one piece.
fn stream_values(
    g: &GgufFile,
    p: &Planned,
    buf: &mut Vec<f32>,
    emit: &mut dyn FnMut(&[f32]) -> Result<(), ConvertError>,
) -> Result<(), ConvertError> {
    let t = p.source;
    let data = g.tensor_bytes(t);
    if p.unpermute_heads.is_some() || data.is_empty() {
        tensor_values(g, p, buf)?;
        return emit(buf);
    }
    let row_len = t.dims[0] as usize;
    let row_bytes = row_len / t.ggml_type.block_elems() as usize * t.ggml_type.block_bytes() as usize;
    let rows_per_chunk = (CHUNK_ELEMS / row_len).max(1);
    for chunk in data.chunks(rows_per_chunk * row_bytes) {
        buf.resize(chunk.len() / row_bytes * row_len, 0.0);
        dequantize(t.ggml_type, chunk, buf)
            .map_err(|source| ConvertError::Gguf(GgufError::Dequant { file: g.path.clone(), tensor: t.name.clone(), source }))?;
        emit(buf)?;
    }
    Ok(())
}

/// One tensor as f32 in HF layout, into `out`: dequantized, and un-permuted where
/// llama.cpp permuted it.
fn tensor_values(g: &GgufFile, p: &Planned, out: &mut Vec<f32>) -> Result<(), ConvertError> {
    out.resize(p.source.n_elements as usize, 0.0);
    g.dequantize_into(p.source, out)?;
    if let Some(heads) = p.unpermute_heads {
        let row_len = if p.shape.len() == 2 { p.shape[1] } else { 1 };
        *out = unpermute_rows(out, row_len, heads).map_err(|e| ConvertError::Tensor {
            file: g.path.clone(),
            tensor: p.source.name.clone(),
            reason: e.to_string(),
        })?;
    }
    Ok(())
}

/// Round to bf16 (nearest even, NaN kept), in parallel.
fn to_bf16(values: &[f32], out: &mut Vec<bf16>) {
    out.resize(values.len(), bf16::ZERO);
    out.par_chunks_mut(1 << 16).zip(values.par_chunks(1 << 16)).for_each(|(o, v)| o.convert_from_f32_slice(v));
}

// The tensors are written as their in-memory bytes; safetensors is little-endian.
#[cfg(not(target_endian = "little"))]
compile_error!("model.safetensors output assumes a little-endian host");
