//! A linear layer's weight as the device forward reads it (`device`): f32 values, or the
//! checkpoint's FP8 bytes with one scale-grid row per weight row, so that its rows can be
//! picked and re-laid (q's and `kv_a_proj_with_mqa`'s no-rope and rope parts) either way,
//! and the bytes reach a backend that multiplies by them (`Backend::load_stored`) as stored.

use std::borrow::Cow;
use std::ops::Range;

use crate::backend::latent::{fp8_row_scales, StoredFormat};
use crate::backend::{Backend, BackendError, StoredWeight};
use crate::engine::deepseek::host::{Linear, Staged};
use crate::engine::weights::Loader;
use crate::model::quantized::WeightFormats;

/// Values a scale may cover in a transposed FP8 weight (`Rows::heads_transposed`), widest
/// first: a 64-column step of kernels/gemv.cu's FP8 kernels (the tensor cores; DeepSeek-V3's
/// 128 key columns a head), else the 16 a lane of kernels/latent.cu's FP8 readers takes.
const TRANSPOSED_BLOCKS: [usize; 2] = [64, 16];

pub(crate) enum Rows<'a> {
    Values(Linear),
    /// `[rows, cols]` e4m3 bytes; `scales` holds `cols / block_cols` per row.
    Fp8 {
        bytes: Cow<'a, [u8]>,
        scales: Vec<f32>,
        rows: usize,
        cols: usize,
        block_cols: usize,
    },
}

impl<'a> Rows<'a> {
    /// The `[rows, cols]` weight `name`: as its FP8 bytes when `stored` and the checkpoint
    /// stores it so in blocks whose columns the kernels take whole (a multiple of 16 that
    /// divides `cols`), else as values, dequantized when the checkpoint quantizes it.
    pub(crate) fn read<B: Backend>(
        ld: &mut Loader<'a, B>,
        f: &WeightFormats,
        name: &str,
        [rows, cols]: [usize; 2],
        stored: bool,
    ) -> Result<Self, BackendError> {
        let block @ [_, bc] = f.fp8_block;
        if stored && bc % 16 == 0 && cols % bc == 0 {
            if let Some(w) = ld.host_fp8(name, [rows, cols], f)? {
                let scales = fp8_row_scales(&w.scales, rows, block, cols);
                return Ok(Rows::Fp8 { bytes: Cow::Borrowed(w.bytes), scales, rows, cols, block_cols: bc });
            }
        }
        Linear::load(ld, f, name, rows, cols).map(Rows::Values)
    }

    /// Only the rows `picked`, in that order.
    pub(crate) fn pick(&self, picked: impl Iterator<Item = usize> + Clone) -> Rows<'a> {
        match self {
            Rows::Values(l) => {
                let w: Vec<f32> = picked.flat_map(|r| l.row(r).iter().copied()).collect();
                Rows::Values(Linear { outputs: w.len() / l.inputs, w, inputs: l.inputs })
            }
            &Rows::Fp8 { ref bytes, ref scales, cols, block_cols, .. } => {
                let per_row = cols / block_cols;
                let bytes: Vec<u8> = picked.clone().flat_map(|r| bytes[r * cols..][..cols].iter().copied()).collect();
                let scales = picked.flat_map(|r| scales[r * per_row..][..per_row].iter().copied()).collect();
                Rows::Fp8 { rows: bytes.len() / cols, bytes: Cow::Owned(bytes), scales, cols, block_cols }
            }
        }
    }

    /// Only the outputs `rows` (a column-parallel shard).
    pub(crate) fn outputs_in(self, rows: Range<usize>) -> Rows<'a> {
        if rows == (0..self.shape()[0]) {
            return self;
        }
        self.pick(rows)
    }

    /// Only the inputs `cols` (a row-parallel shard), as values unless they are all of them.
    pub(crate) fn inputs_in(self, cols: Range<usize>) -> Rows<'a> {
        if cols == (0..self.shape()[1]) {
            return self;
        }
        Rows::Values(self.into_values().inputs_in(cols))
    }

    pub(crate) fn shape(&self) -> [usize; 2] {
        match self {
            Rows::Values(l) => [l.outputs, l.inputs],
            &Rows::Fp8 { rows, cols, .. } => [rows, cols],
        }
    }

    pub(crate) fn elements(&self) -> usize {
        let [rows, cols] = self.shape();
        rows * cols
    }

    fn format(block_cols: usize) -> StoredFormat {
        StoredFormat::Fp8 { block: [1, block_cols] }
    }

    /// The values, dequantized from the bytes if need be.
    pub(crate) fn into_values(self) -> Linear {
        match self {
            Rows::Values(l) => l,
            fp8 => fp8.dequantized(),
        }
    }

    fn dequantized(&self) -> Linear {
        match self {
            Rows::Values(l) => Linear { w: l.w.clone(), outputs: l.outputs, inputs: l.inputs },
            &Rows::Fp8 { ref bytes, ref scales, rows, cols, block_cols } => {
                Linear { w: Rows::format(block_cols).dequantize(bytes, scales, [rows, cols]), outputs: rows, inputs: cols }
            }
        }
    }

    /// Per head `h < heads`, the rows `part` of its group of `per_head` rows, transposed: row
    /// `h · cols + c` holds column `c` of those rows (`kv_b_proj`'s key half as the query
    /// absorbs it). FP8 bytes stay bytes with a scale per run of the widest of
    /// `TRANSPOSED_BLOCKS` values whose runs each come from rows of one scale (else the values).
    pub(crate) fn heads_transposed(&self, heads: usize, per_head: usize, part: Range<usize>) -> Rows<'a> {
        let cols = self.shape()[1];
        // The source rows of transposed row (h, c), each with its column c.
        let sources = |h: usize| part.clone().map(move |d| h * per_head + d);
        let (bytes, scales, block_cols) = match self {
            Rows::Values(l) => return Rows::Values(transposed_values(l, heads, per_head, part)),
            Rows::Fp8 { bytes, scales, block_cols, .. } => (bytes, scales, block_cols),
        };
        let scale = |r: usize, c: usize| scales[r * (cols / block_cols) + c / block_cols];
        // A run of `run` transposed values takes one scale where its source rows share one.
        let whole = |run: usize| {
            part.len() % run == 0
                && (0..heads).all(|h| {
                    (0..cols)
                        .step_by(*block_cols)
                        .all(|c| sources(h).step_by(run).all(|r0| (r0..r0 + run).all(|r| scale(r, c) == scale(r0, c))))
                })
        };
        let Some(run) = TRANSPOSED_BLOCKS.into_iter().find(|&run| whole(run)) else {
            return Rows::Values(transposed_values(&self.dequantized(), heads, per_head, part));
        };
        let bytes = (0..heads).flat_map(|h| (0..cols).flat_map(move |c| sources(h).map(move |r| bytes[r * cols + c])));
        let scales = (0..heads).flat_map(|h| (0..cols).flat_map(move |c| sources(h).step_by(run).map(move |r0| scale(r0, c))));
        Rows::Fp8 { bytes: Cow::Owned(bytes.collect()), scales: scales.collect(), rows: heads * cols, cols: part.len(), block_cols: run }
    }

    /// The weight on `b` (`name` is what errors call it).
    pub(crate) fn upload<B: Backend>(&self, b: &B, name: &str) -> Result<B::Weight, BackendError> {
        match self {
            Rows::Values(l) => Staged::new(b, l.inputs).push(&l.w).upload(b, name),
            &Rows::Fp8 { ref bytes, ref scales, rows, cols, block_cols } => {
                let format = Rows::format(block_cols);
                b.load_stored(&StoredWeight { name, bytes, scales, shape: [rows, cols], format })
            }
        }
    }
}

/// `Rows::heads_transposed` of values.
fn transposed_values(l: &Linear, heads: usize, per_head: usize, part: Range<usize>) -> Linear {
    let (cols, width) = (l.inputs, part.len());
    let sources = |h: usize, c: usize| part.clone().map(move |d| (h * per_head + d, c));
    let w = (0..heads).flat_map(|h| (0..cols).flat_map(move |c| sources(h, c))).map(|(r, c)| l.row(r)[c]);
    Linear { w: w.collect(), outputs: heads * cols, inputs: width }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scales in blocks of 2 rows × 16 columns over 3 rows of 32 columns: each row keeps
    /// its own block row's scales wherever it is picked to.
    #[test]
    fn picked_fp8_rows_keep_their_scales() {
        let (rows, cols) = (3, 32);
        let bytes: Vec<u8> = (0..rows * cols).map(|i| [0x38, 0x40, 0xb8][i / cols]).collect(); // 1, 2, -1
        let scales = fp8_row_scales(&[0.5, 4.0, 2.0, 8.0], rows, [2, 16], cols);
        assert_eq!(scales, [0.5, 4.0, 0.5, 4.0, 2.0, 8.0]);
        let w = Rows::Fp8 { bytes: Cow::Owned(bytes), scales, rows, cols, block_cols: 16 };
        let picked = w.pick([2, 0].into_iter()).into_values();
        assert_eq!((picked.outputs, picked.inputs), (2, 32));
        assert_eq!(&picked.w[14..18], &[-2.0, -2.0, -8.0, -8.0]);
        assert_eq!(&picked.w[46..50], &[0.5, 0.5, 4.0, 4.0]);
    }

    /// Two heads of 48 rows (32 keys, 16 values) over 32 columns in 16 × 16 blocks: the
    /// transposed keys keep the bytes, a scale per 16 of them, and the values they stand for.
    #[test]
    fn transposed_heads_keep_bytes_and_values() {
        let (rows, cols) = (96, 32);
        let bytes: Vec<u8> = (0..rows * cols).map(|i| [0x38, 0x40, 0xb8, 0x3c][(i / cols + i % cols) % 4]).collect();
        let grid: Vec<f32> = (0..6 * 2).map(|i| (i + 1) as f32).collect();
        let w = Rows::Fp8 { bytes: Cow::Owned(bytes), scales: fp8_row_scales(&grid, rows, [16, 16], cols), rows, cols, block_cols: 16 };
        let values = w.dequantized();
        let t = w.heads_transposed(2, 48, 0..32);
        let Rows::Fp8 { block_cols: 16, rows: 64, cols: 32, .. } = t else {
            panic!("the transposed keys are not FP8 rows of 16-value scales")
        };
        let t = t.into_values();
        for (h, c, d) in [(0, 0, 0), (0, 5, 17), (1, 31, 31), (1, 16, 3)] {
            assert_eq!(t.row(h * 32 + c)[d], values.row(h * 48 + d)[c], "head {h}, column {c}, key {d}");
        }
        // Runs of 16 that straddle two scales' rows fall back to values.
        let straddling = Rows::Fp8 {
            bytes: Cow::Owned(vec![0x38; rows * cols]),
            scales: fp8_row_scales(&grid, rows, [16, 16], cols),
            rows,
            cols,
            block_cols: 16,
        };
        assert!(matches!(straddling.heads_transposed(2, 48, 8..40), Rows::Values(_)));
    }

    /// DeepSeek-V3's layout in small: heads of 192 rows (128 keys, 64 values) in 128 × 128
    /// blocks. Head 1's keys straddle two blocks' rows at its 64th, so the transposed keys take
    /// a scale per 64 values (the tensor cores' step), and stand for the same values.
    #[test]
    fn transposed_heads_take_64_value_scales_where_the_runs_allow() {
        let (rows, cols) = (384, 128);
        let bytes: Vec<u8> = (0..rows * cols).map(|i| [0x38, 0x40, 0xb8, 0x3c, 0x30][(i / cols * 3 + i % cols) % 5]).collect();
        let grid = [0.5, 2.0, 8.0];
        let w = Rows::Fp8 { bytes: Cow::Owned(bytes), scales: fp8_row_scales(&grid, rows, [128, 128], cols), rows, cols, block_cols: 128 };
        let values = w.dequantized();
        let t = w.heads_transposed(2, 192, 0..128);
        let Rows::Fp8 { block_cols: 64, rows: 256, cols: 128, ref scales, .. } = t else {
            panic!("the transposed keys do not take 64-value scales")
        };
        // Head 1, column 0: keys 0..64 from rows 192..256 (scale 2), 64..128 from 256..320 (8).
        assert_eq!(&scales[2 * 128..2 * 128 + 2], &[2.0, 8.0]);
        let t = t.into_values();
        for (h, c, d) in [(0, 0, 0), (0, 77, 100), (1, 5, 63), (1, 127, 64), (1, 3, 127)] {
            assert_eq!(t.row(h * 128 + c)[d], values.row(h * 192 + d)[c], "head {h}, column {c}, key {d}");
        }
    }
}
