//! Linear weights as their producers quantize them, read back to f32: FP8 e4m3 with block
//! scales (`weight_scale_inv`, DeepSeek-V3 and Kimi-K2) and compressed-tensors pack-quantized
//! INT4 (`weight_packed`, `weight_scale`, `weight_shape`: Kimi-K2.5's routed experts).
//!
//! Which way one layer is stored is what its tensors say, since a checkpoint quantizes some
//! layers and leaves others (Kimi-K2.5's attention and shared experts stay bf16); the config's
//! `quantization_config` gives the block and group sizes.

use rayon::prelude::*;
use safetensors::tensor::Dtype;
use serde_json::Value;

use crate::model::checkpoint::{Checkpoint, CheckpointError, TensorView};
use crate::model::config::{ConfigError, ModelConfig};

/// DeepSeek-V3's `weight_block_size`, for an fp8 config that gives none.
const FP8_BLOCK: [usize; 2] = [128, 128];
/// Kimi-K2.5's group size, for a compressed-tensors config that gives none.
const INT4_GROUP: usize = 32;
/// Signed 4-bit values are stored with this offset (compressed-tensors packs `q + 8`).
const INT4_OFFSET: i32 = 8;

/// How a checkpoint's quantized linear weights are laid out.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightFormats {
    /// Weight `[rows, cols]` per FP8 `weight_scale_inv` entry.
    pub fp8_block: [usize; 2],
    /// Weights of a row per INT4 `weight_scale` entry.
    pub int4_group: usize,
}

impl Default for WeightFormats {
    fn default() -> Self {
        WeightFormats { fp8_block: FP8_BLOCK, int4_group: INT4_GROUP }
    }
}

impl WeightFormats {
    /// The formats `quantization_config` declares; a method or scheme this engine cannot read
    /// is an error that names its key.
    pub fn from_config(cfg: &ModelConfig) -> Result<WeightFormats, ConfigError> {
        let mut formats = WeightFormats::default();
        let Some(method) = cfg.quant_method()? else { return Ok(formats) };
        let root = method.pointer.trim_end_matches("/quant_method").to_string();
        match method.value.to_ascii_lowercase().replace('_', "-").as_str() {
            "fp8" => {
                let pointer = format!("{root}/weight_block_size");
                if let Some(v) = cfg.at(&pointer) {
                    formats.fp8_block = positive_pair(v).ok_or_else(|| cfg.wrong_type(&pointer, v, "two positive integers"))?;
                }
            }
            "compressed-tensors" => formats.int4_group = int4_group(cfg, &root)?,
            _ => {
                return Err(cfg.wrong_type(
                    &method.pointer,
                    &Value::from(method.value),
                    "fp8 or compressed-tensors (the quantized formats this engine reads)",
                ))
            }
        }
        Ok(formats)
    }
}

fn positive_pair(v: &Value) -> Option<[usize; 2]> {
    match v.as_array()?.as_slice() {
        [a, b] => Some([a.as_u64().filter(|&a| a > 0)? as usize, b.as_u64().filter(|&b| b > 0)? as usize]),
        _ => None,
    }
}

/// The group size of a compressed-tensors config whose every group is what Kimi-K2.5 ships:
/// pack-quantized symmetric 4-bit integers in groups along a row.
fn int4_group(cfg: &ModelConfig, root: &str) -> Result<usize, ConfigError> {
    let expect = |pointer: String, ok: &dyn Fn(&Value) -> bool, expected: &'static str| match cfg.at(&pointer) {
        Some(v) if ok(v) => Ok(()),
        v => Err(cfg.wrong_type(&pointer, v.unwrap_or(&Value::Null), expected)),
    };
    expect(format!("{root}/format"), &|v| v == "pack-quantized", "pack-quantized")?;
    let groups_at = format!("{root}/config_groups");
    let Some(groups) = cfg.at(&groups_at).and_then(Value::as_object) else {
        return Err(cfg.wrong_type(&groups_at, cfg.at(&groups_at).unwrap_or(&Value::Null), "an object of quantization groups"));
    };
    let mut size = None;
    for name in groups.keys() {
        let w = format!("{groups_at}/{name}/weights");
        expect(format!("{w}/num_bits"), &|v| v == 4, "4")?;
        expect(format!("{w}/type"), &|v| v == "int", "int")?;
        expect(format!("{w}/symmetric"), &|v| v == true, "true")?;
        expect(format!("{w}/strategy"), &|v| v == "group", "group")?;
        let at = format!("{w}/group_size");
        let g = cfg.at(&at).and_then(Value::as_u64).filter(|&g| g > 0 && size.is_none_or(|s| s == g));
        size = Some(g.ok_or_else(|| cfg.wrong_type(&at, cfg.at(&at).unwrap_or(&Value::Null), "a positive integer, one for every group"))?);
    }
    Ok(size.map_or(INT4_GROUP, |g| g as usize))
}

/// The value of a float8_e4m3fn byte (bias 7, no infinities; `None` for its NaN).
pub fn e4m3_to_f32(byte: u8) -> Option<f32> {
    let (exponent, mantissa) = ((byte >> 3) & 0xf, (byte & 7) as f32);
    let magnitude = match exponent {
        0xf if byte & 7 == 7 => return None,
        0 => mantissa / 8.0 * (-6f32).exp2(),
        e => (1.0 + mantissa / 8.0) * (e as f32 - 7.0).exp2(),
    };
    Some(if byte & 0x80 != 0 { -magnitude } else { magnitude })
}

impl Checkpoint {
    /// The `[rows, cols]` weight of the linear layer `base` (its name without `.weight`) in
    /// f32, however it is stored: `base.weight` in F32, F16 or BF16; FP8 e4m3 with
    /// `base.weight_scale_inv`; or `base.weight_packed` INT4 with `weight_scale` and
    /// `weight_shape`. Also returns the tensors it read.
    pub fn linear_f32(&self, base: &str, rows: usize, cols: usize, f: &WeightFormats) -> Result<(Vec<f32>, Vec<String>), CheckpointError> {
        let weight = format!("{base}.weight");
        if let Some((w, read)) = self.linear_int4(base, rows, cols, f)? {
            return Ok((w.dequantized(), read));
        }
        let view = self.view(&weight)?;
        view.expect_shape(&[rows, cols])?;
        if view.dtype != Dtype::F8_E4M3 {
            return Ok((view.to_f32()?, vec![weight]));
        }
        let scale = format!("{base}.weight_scale_inv");
        let w = fp8_blocks(&view, &self.view(&scale)?, [rows, cols], f.fp8_block)?;
        Ok((w, vec![weight, scale]))
    }
}

/// An FP8 linear layer as its file holds it: the e4m3 bytes, `[rows, cols]`, and the f32
/// dequantization scale of each `block` (the grid rounded up).
pub struct Fp8Linear<'a> {
    /// The file's bytes, borrowed from the checkpoint (copied once, where they are stacked).
    pub bytes: &'a [u8],
    pub scales: Vec<f32>,
    pub block: [usize; 2],
}

impl Checkpoint {
    /// The `[rows, cols]` weight of the linear layer `base` as FP8 bytes and block scales,
    /// when it is stored so (`None` otherwise), with the tensors it read; a NaN byte is an
    /// error as in `linear_f32`.
    pub fn linear_fp8(
        &self,
        base: &str,
        rows: usize,
        cols: usize,
        f: &WeightFormats,
    ) -> Result<Option<(Fp8Linear<'_>, Vec<String>)>, CheckpointError> {
        let weight = format!("{base}.weight");
        if !self.contains(&weight) {
            return Ok(None);
        }
        let view = self.view(&weight)?;
        if view.dtype != Dtype::F8_E4M3 {
            return Ok(None);
        }
        view.expect_shape(&[rows, cols])?;
        let scale = format!("{base}.weight_scale_inv");
        let scales = fp8_scales(&view, &self.view(&scale)?, [rows, cols], f.fp8_block)?;
        Ok(Some((Fp8Linear { bytes: view.data, scales, block: f.fp8_block }, vec![weight, scale])))
    }
}

/// The weight's scale grid, checked: its shape, and no NaN byte in the weight (the first one,
/// in row order, is the error).
fn fp8_scales(w: &TensorView<'_>, s: &TensorView<'_>, [rows, cols]: [usize; 2], [br, bc]: [usize; 2]) -> Result<Vec<f32>, CheckpointError> {
    s.expect_shape(&[rows.div_ceil(br), cols.div_ceil(bc)])?;
    let nan = w.data.par_chunks_exact(cols).enumerate().find_first(|(_, row)| row.iter().any(|&b| b & 0x7f == 0x7f));
    if let Some((r, row)) = nan {
        let c = row.iter().position(|&b| b & 0x7f == 0x7f).unwrap_or(0);
        return Err(bad_values(w, format!("holds an FP8 NaN (byte {:#04x}) at row {r}, column {c}", row[c])));
    }
    s.to_f32()
}

fn bad_values(view: &TensorView<'_>, reason: String) -> CheckpointError {
    CheckpointError::BadValues { file: view.file.to_path_buf(), name: view.name.to_string(), reason }
}

/// `w · scale_inv` of the weight's block, the scale grid rounded up as DeepSeek's files
/// round it (576 rows of kv_a_proj_with_mqa over 128-row blocks make 5).
fn fp8_blocks(
    w: &TensorView<'_>,
    s: &TensorView<'_>,
    shape @ [_, cols]: [usize; 2],
    block @ [br, bc]: [usize; 2],
) -> Result<Vec<f32>, CheckpointError> {
    let scales = fp8_scales(w, s, shape, block)?;
    let grid_cols = cols.div_ceil(bc);
    // fp8_scales found no NaN byte, so every byte has a value.
    let values: Vec<f32> = (0..=255u8).map(|b| e4m3_to_f32(b).unwrap_or(f32::NAN)).collect();
    let mut out = vec![0.0; w.data.len()];
    // Row-parallel: an FP8-shaped layer is tens of millions of bytes, and every one is dequantized here.
    out.par_chunks_mut(cols).zip(w.data.par_chunks_exact(cols)).enumerate().for_each(|(r, (dst, row))| {
        let row_scales = &scales[(r / br) * grid_cols..][..grid_cols];
        for (c, (d, &byte)) in dst.iter_mut().zip(row).enumerate() {
            *d = values[byte as usize] * row_scales[c / bc];
        }
    });
    Ok(out)
}

/// An INT4 linear layer as compressed-tensors' pack-quantized files hold it: element `c` of a
/// row sits in bits `4c..4c+4` of the row's little-endian int32 words (so the low nibble of
/// byte `c / 2` for even `c`), as `q + 8`; its value is `q · scales[row, c / group]`, rounded
/// to the scales' dtype as compressed-tensors' own dequantizer gives it back.
pub struct Int4Linear<'a> {
    /// `[rows, words · 4]` bytes, borrowed from the checkpoint's file.
    pub packed: &'a [u8],
    /// `[rows, ceil(cols / group)]`, exact in f32.
    pub scales: Vec<f32>,
    pub group: usize,
    pub scale_dtype: Dtype,
    pub shape: [usize; 2],
}

impl Int4Linear<'_> {
    /// The `[rows, cols]` values in f32.
    pub fn dequantized(&self) -> Vec<f32> {
        let [rows, cols] = self.shape;
        let (words, groups) = ((cols * 4).div_ceil(32), cols.div_ceil(self.group));
        let in_scale_dtype: fn(f32) -> f32 = match self.scale_dtype {
            Dtype::BF16 => |x| half::bf16::from_f32(x).to_f32(),
            Dtype::F16 => |x| half::f16::from_f32(x).to_f32(),
            _ => |x| x,
        };
        let mut out = Vec::with_capacity(rows * cols);
        for (row, row_scales) in self.packed.chunks_exact(words * 4).zip(self.scales.chunks_exact(groups)) {
            for c in 0..cols {
                let byte = row[c / 2];
                let nibble = if c % 2 == 0 { byte & 0xf } else { byte >> 4 };
                out.push(in_scale_dtype((nibble as i32 - INT4_OFFSET) as f32 * row_scales[c / self.group]));
            }
        }
        out
    }
}

impl Checkpoint {
    /// The `[rows, cols]` weight of the linear layer `base` as pack-quantized INT4, as its
    /// file holds it, when it is stored so (`None` otherwise), with the tensors it read.
    pub fn linear_int4(
        &self,
        base: &str,
        rows: usize,
        cols: usize,
        f: &WeightFormats,
    ) -> Result<Option<(Int4Linear<'_>, Vec<String>)>, CheckpointError> {
        let (weight, packed) = (format!("{base}.weight"), format!("{base}.weight_packed"));
        if self.contains(&weight) || !self.contains(&packed) {
            return Ok(None);
        }
        let (scale, shape) = (format!("{base}.weight_scale"), format!("{base}.weight_shape"));
        let (packed_view, scale_view, shape_view) = (self.view(&packed)?, self.view(&scale)?, self.view(&shape)?);
        let declared = shape_view.to_i64()?;
        if declared != [rows as i64, cols as i64] {
            return Err(bad_values(&shape_view, format!("holds {declared:?}, but the config makes the weight [{rows}, {cols}]")));
        }
        if packed_view.dtype != Dtype::I32 {
            return Err(packed_view.wrong_dtype("I32 (compressed-tensors packs eight 4-bit values per int32)"));
        }
        packed_view.expect_shape(&[rows, (cols * 4).div_ceil(32)])?;
        scale_view.expect_shape(&[rows, cols.div_ceil(f.int4_group)])?;
        let w = Int4Linear {
            packed: packed_view.data,
            scales: scale_view.to_f32()?,
            group: f.int4_group,
            scale_dtype: scale_view.dtype,
            shape: [rows, cols],
        };
        Ok(Some((w, vec![packed, scale, shape])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView as StView;
    use serde_json::json;

    /// A checkpoint folder of one file holding `tensors`.
    fn checkpoint(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> (tempfile::TempDir, Checkpoint) {
        let dir = tempfile::tempdir().unwrap();
        let views: Vec<(String, StView)> =
            tensors.iter().map(|(n, d, s, b)| (n.to_string(), StView::new(*d, s.clone(), b).unwrap())).collect();
        safetensors::serialize_to_file(views, None, &dir.path().join("model.safetensors")).unwrap();
        let ck = Checkpoint::open(dir.path()).unwrap();
        (dir, ck)
    }

    fn bytes<T: Copy, const N: usize>(xs: &[T], to: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        xs.iter().flat_map(|&x| to(x)).collect()
    }

    /// One row of 8 values in groups of 4, packed by hand as compressed-tensors packs them:
    /// element c in bits 4c..4c+4 of the little-endian word, as q + 8.
    #[test]
    fn int4_elements_unpack_in_compressed_tensors_bit_order() {
        let q: [i32; 8] = [-8, -1, 0, 1, 7, 3, -5, 2];
        let word = q.iter().enumerate().fold(0u32, |w, (c, &v)| w | (((v + 8) as u32) << (4 * c)));
        let scales = [0.5f32, 2.0];
        let (_dir, ck) = checkpoint(&[
            ("l.weight_packed", Dtype::I32, vec![1, 1], word.to_le_bytes().to_vec()),
            ("l.weight_scale", Dtype::F32, vec![1, 2], bytes(&scales, f32::to_le_bytes)),
            ("l.weight_shape", Dtype::I64, vec![2], bytes(&[1i64, 8], i64::to_le_bytes)),
        ]);
        let formats = WeightFormats { int4_group: 4, ..WeightFormats::default() };
        let (w, read) = ck.linear_f32("l", 1, 8, &formats).unwrap();
        assert_eq!(w, [-4.0, -0.5, 0.0, 0.5, 14.0, 6.0, -10.0, 4.0]);
        assert_eq!(read, ["l.weight_packed", "l.weight_scale", "l.weight_shape"]);
    }

    /// FP8 blocks rounded up: a 3 × 2 weight over 2 × 1 blocks has a 2 × 2 scale grid.
    #[test]
    fn fp8_blocks_scale_their_own_rows_and_columns() {
        // 1.0, 2.0, 1.5 and -1.0 in e4m3.
        let weight = [0x38u8, 0x40, 0x3c, 0xb8, 0x38, 0x38];
        let scales = [1.0f32, 10.0, 100.0, 1000.0];
        let (_dir, ck) = checkpoint(&[
            ("l.weight", Dtype::F8_E4M3, vec![3, 2], weight.to_vec()),
            ("l.weight_scale_inv", Dtype::F32, vec![2, 2], bytes(&scales, f32::to_le_bytes)),
        ]);
        let formats = WeightFormats { fp8_block: [2, 1], ..WeightFormats::default() };
        let (w, _) = ck.linear_f32("l", 3, 2, &formats).unwrap();
        assert_eq!(w, [1.0, 20.0, 1.5, -10.0, 100.0, 1000.0]);
    }

    /// Hostile quantized tensors are errors that name the file and the tensor.
    #[test]
    fn bad_quantized_tensors_name_the_tensor() {
        let scale = bytes(&[1.0f32], f32::to_le_bytes);
        let (dir, ck) = checkpoint(&[
            ("l.weight", Dtype::F8_E4M3, vec![1, 2], vec![0x38, 0x7f]),
            ("l.weight_scale_inv", Dtype::F32, vec![1, 1], scale),
        ]);
        let file = dir.path().join("model.safetensors").display().to_string();
        let err = ck.linear_f32("l", 1, 2, &WeightFormats::default()).unwrap_err().to_string();
        assert_eq!(err, format!("{file}: tensor l.weight holds an FP8 NaN (byte 0x7f) at row 0, column 1"));

        let (dir, ck) = checkpoint(&[
            ("l.weight_packed", Dtype::I64, vec![1, 1], vec![0; 8]),
            ("l.weight_scale", Dtype::F32, vec![1, 1], bytes(&[1.0f32], f32::to_le_bytes)),
            ("l.weight_shape", Dtype::I64, vec![2], bytes(&[1i64, 8], i64::to_le_bytes)),
        ]);
        let file = dir.path().join("model.safetensors").display().to_string();
        let err = ck.linear_f32("l", 1, 8, &WeightFormats::default()).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("{file}: tensor l.weight_packed has dtype I64, expected I32 (compressed-tensors packs eight 4-bit values per int32)")
        );
        let err = ck.linear_f32("l", 2, 8, &WeightFormats::default()).unwrap_err().to_string();
        assert_eq!(err, format!("{file}: tensor l.weight_shape holds [1, 8], but the config makes the weight [2, 8]"));
    }

    #[test]
    fn e4m3_bytes_decode_as_torch_float8_e4m3fn() {
        // Values torch gives for these bytes: normals, the largest finite, a subnormal, signs.
        let cases =
            [(0x00, 0.0), (0x38, 1.0), (0x40, 2.0), (0x3c, 1.5), (0x7e, 448.0), (0xfe, -448.0), (0x01, 2f32.powi(-9)), (0xb8, -1.0)];
        for (byte, want) in cases {
            assert_eq!(e4m3_to_f32(byte), Some(want), "byte {byte:#04x}");
        }
        assert_eq!(e4m3_to_f32(0x7f), None);
        assert_eq!(e4m3_to_f32(0xff), None);
    }

    fn cfg(v: Value) -> ModelConfig {
        ModelConfig::from_value("config.json", v)
    }

    #[test]
    fn formats_come_from_the_quantization_config_and_name_what_they_cannot_read() {
        assert_eq!(WeightFormats::from_config(&cfg(json!({}))).unwrap(), WeightFormats::default());
        let fp8 = cfg(json!({"quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 32]}}));
        assert_eq!(WeightFormats::from_config(&fp8).unwrap().fp8_block, [64, 32]);
        let int4 = |weights: Value| {
            cfg(json!({"text_config": {"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}}}}}))
        };
        let kimi = json!({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 16});
        assert_eq!(WeightFormats::from_config(&int4(kimi.clone())).unwrap().int4_group, 16);
        let mut eight = kimi;
        eight["num_bits"] = json!(8);
        let err = WeightFormats::from_config(&int4(eight)).unwrap_err().to_string();
        assert_eq!(err, "config.json: /text_config/quantization_config/config_groups/group_0/weights/num_bits = 8 is not 4");
        let awq = cfg(json!({"quantization_config": {"quant_method": "awq"}}));
        let err = WeightFormats::from_config(&awq).unwrap_err().to_string();
        assert!(err.starts_with("config.json: /quantization_config/quant_method = \"awq\" is not fp8 or compressed-tensors"), "{err}");
        let bad_block = cfg(json!({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}}));
        let err = WeightFormats::from_config(&bad_block).unwrap_err().to_string();
        assert_eq!(err, "config.json: /quantization_config/weight_block_size = [128] is not two positive integers");
    }
}
