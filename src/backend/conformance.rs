//! Op-by-op comparison of two backends on the same random inputs: every op of the seam,
//! at decode, verify and prefill sizes, reported as a relative error (float outputs) or an
//! exact match (ids). The GPU self-test runs it with the CPU reference against CUDA; CI
//! runs it CPU against CPU, which must agree exactly.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use safetensors::tensor::Dtype;

use crate::backend::latent::StoredFormat;
use crate::backend::{
    kv_tensor_from, AttnGeometry, AttnWindow, Backend, BackendError, BatchSeq, KvDtype, KvStore, Mask, PagedBatch, PagedScratch, PagedSeq,
    Projection, RopeStyle, RopeTable, Shard, StoredWeight, STEP_QUERIES_MAX,
};
use crate::model::checkpoint::TensorView;

/// One op's verdict.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OpCheck {
    pub op: String,
    /// ‖test − reference‖ / ‖reference‖ for float outputs; 0 or 1 (mismatch) for ids.
    pub rel_err: f64,
    pub tolerance: f64,
    pub ok: bool,
}

/// Tolerances: bf16-rounded matmul inputs (cuBLAS path) vs everything else in f32.
const MATMUL_TOL: f64 = 1e-2;
const F32_TOL: f64 = 1e-4;
/// A prompt chunk's attention on a GPU's tensor cores rounds q, k, the weights and v to
/// tf32 (11 significant bits) before multiplying in f32.
const TF32_TOL: f64 = 2e-3;

/// The tolerance of an attention forward of `queries` queries: a prompt chunk may take the
/// tensor cores.
fn attention_tol(queries: usize) -> f64 {
    if queries > STEP_QUERIES_MAX {
        TF32_TOL
    } else {
        F32_TOL
    }
}

fn rel_err(test: &[f32], reference: &[f32]) -> f64 {
    if test.len() != reference.len() || test.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let num: f64 = test.iter().zip(reference).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let den: f64 = reference.iter().map(|b| (*b as f64).powi(2)).sum();
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

struct Pair<'a, R: Backend, T: Backend> {
    r: &'a R,
    t: &'a T,
    rng: ChaCha8Rng,
    out: Vec<OpCheck>,
}

struct Both<R: Backend, T: Backend, X, Y> {
    r: X,
    t: Y,
    _p: std::marker::PhantomData<(R, T)>,
}

type Tensors<R, T> = Both<R, T, <R as Backend>::Tensor, <T as Backend>::Tensor>;
type Weights<R, T> = Both<R, T, <R as Backend>::Weight, <T as Backend>::Weight>;
type Idss<R, T> = Both<R, T, <R as Backend>::Ids, <T as Backend>::Ids>;

impl<'a, R: Backend, T: Backend> Pair<'a, R, T> {
    /// Uniform in (-scale, scale); scale 0 gives zeros (output buffers).
    fn random(&mut self, n: usize, scale: f32) -> Vec<f32> {
        if scale == 0.0 {
            return vec![0.0; n];
        }
        (0..n).map(|_| self.rng.random_range(-scale..scale)).collect()
    }

    fn tensor(&mut self, rows: usize, cols: usize, scale: f32) -> Result<Tensors<R, T>, BackendError> {
        let data = self.random(rows * cols, scale);
        self.tensor_from(cols, &data)
    }

    /// A bf16 KV cache on both backends holding `data` rounded (the CPU keeps the rounded
    /// values in f32, a GPU the bf16 itself).
    fn kv_tensor(&mut self, rows: usize, cols: usize, scale: f32) -> Result<Tensors<R, T>, BackendError> {
        let data = self.random(rows * cols, scale);
        Ok(Both {
            r: kv_tensor_from(self.r, cols, &data, KvDtype::Bf16)?,
            t: kv_tensor_from(self.t, cols, &data, KvDtype::Bf16)?,
            _p: Default::default(),
        })
    }

    fn tensor_from(&self, cols: usize, data: &[f32]) -> Result<Tensors<R, T>, BackendError> {
        Ok(Both { r: self.r.tensor_from(cols, data)?, t: self.t.tensor_from(cols, data)?, _p: Default::default() })
    }

    fn weight(&mut self, shape: &[usize], scale: f32) -> Result<Weights<R, T>, BackendError> {
        let values = self.random(shape.iter().product(), scale);
        let bytes: Vec<u8> = values.iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect();
        let view = TensorView { name: "conformance", file: std::path::Path::new("(random)"), dtype: Dtype::BF16, shape, data: &bytes };
        Ok(Both {
            r: self.r.load_weight(&view, Shard::Replicated)?,
            t: self.t.load_weight(&view, Shard::Replicated)?,
            _p: Default::default(),
        })
    }

    /// Weights that multiply one input, loaded together (`Backend::load_stacked`).
    fn stacked(&mut self, shapes: &[&[usize]], scale: f32) -> Result<Vec<Weights<R, T>>, BackendError> {
        let bytes: Vec<Vec<u8>> = shapes
            .iter()
            .map(|shape| self.random(shape.iter().product(), scale).iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect())
            .collect();
        let views: Vec<TensorView<'_>> = shapes
            .iter()
            .zip(&bytes)
            .map(|(shape, data)| TensorView {
                name: "conformance",
                file: std::path::Path::new("(random)"),
                dtype: Dtype::BF16,
                shape,
                data,
            })
            .collect();
        let r = self.r.load_stacked(&views, Shard::Replicated)?;
        let t = self.t.load_stacked(&views, Shard::Replicated)?;
        Ok(r.into_iter().zip(t).map(|(r, t)| Both { r, t, _p: Default::default() }).collect())
    }

    fn ids(&self, values: &[i32]) -> Result<Idss<R, T>, BackendError> {
        let mut r = self.r.ids(values.len())?;
        let mut t = self.t.ids(values.len())?;
        self.r.write_ids(&mut r, values);
        self.t.write_ids(&mut t, values);
        Ok(Both { r, t, _p: Default::default() })
    }

    fn compare(&mut self, op: &str, x: &Tensors<R, T>, rows: usize, tolerance: f64) -> Result<(), BackendError> {
        let a = self.t.read_rows(&x.t, 0, rows)?;
        let b = self.r.read_rows(&x.r, 0, rows)?;
        self.check(op, &a, &b, tolerance);
        Ok(())
    }

    fn check(&mut self, op: &str, test: &[f32], reference: &[f32], tolerance: f64) {
        let e = rel_err(test, reference);
        self.out.push(OpCheck { op: op.to_string(), rel_err: e, tolerance, ok: e <= tolerance });
    }

    fn compare_ids(&mut self, op: &str, x: &Idss<R, T>, len: usize) -> Result<(), BackendError> {
        let same = self.t.read_ids(&x.t, len)? == self.r.read_ids(&x.r, len)?;
        self.out.push(OpCheck { op: op.to_string(), rel_err: if same { 0.0 } else { 1.0 }, tolerance: 0.0, ok: same });
        Ok(())
    }
}

/// Run every op on both backends and compare. `test` is checked against `reference`.
pub fn compare_backends<R: Backend, T: Backend>(reference: &R, test: &T, seed: u64) -> Result<Vec<OpCheck>, BackendError> {
    let mut p = Pair { r: reference, t: test, rng: ChaCha8Rng::seed_from_u64(seed), out: Vec::new() };
    layer_ops(&mut p)?;
    fused_ops(&mut p)?;
    stacked_ops(&mut p)?;
    stored_ops(&mut p)?;
    attention_ops(&mut p)?;
    long_attention_ops(&mut p)?;
    paged_batch_ops(&mut p)?;
    wide_paged_batch_ops(&mut p)?;
    movement_ops(&mut p)?;
    decoding_ops(&mut p)?;
    test.sync()?;
    Ok(p.out)
}

/// A layer's matmuls over weights loaded stacked (one allocation for q, k and v, one for gate
/// and up), fed by the norm before them, as a batched forward runs them: q, k and v (q and k
/// with a bias) split apart, and with RoPE (`qkv_rope`); the norm, gate-up-SiLU and down with
/// the residual add. At 40 rows a GPU runs each stacked set as one cuBLAS launch reading the
/// bf16 copy its norm wrote; the last op multiplies another tensor of the normed one's shape,
/// which must not read that copy.
fn stacked_ops<R: Backend, T: Backend>(p: &mut Pair<'_, R, T>) -> Result<(), BackendError> {
    let (hidden, heads, kv_heads, hd, inter) = (256usize, 4usize, 2usize, 64usize, 768usize);
    let widths = [heads * hd, kv_heads * hd, kv_heads * hd];
    let qkv = p.stacked(&[&[widths[0], hidden], &[widths[1], hidden], &[widths[2], hidden]], 0.1)?;
    let (q_bias, k_bias) = (p.weight(&[widths[0]], 0.1)?, p.weight(&[widths[1]], 0.1)?);
    let gate_up = p.stacked(&[&[inter, hidden], &[inter, hidden]], 0.1)?;
    let (down, norm) = (p.weight(&[hidden, inter], 0.1)?, p.weight(&[hidden], 1.0)?);
    let (tr, tt) = rope_tables(p, hd, 600, RopeStyle::NeoX)?;
    for rows in [5usize, 40] {
        let h0 = p.random(rows * hidden, 30.0);
        let mut h = p.tensor_from(hidden, &h0)?;
        let mut normed = p.tensor(rows, hidden, 0.0)?;
        let pos = p.ids(&(0..rows as i32).map(|i| 7 + 13 * i).collect::<Vec<_>>())?;
        for rope in [false, true] {
            let mut ys = [p.tensor(rows, widths[0], 0.0)?, p.tensor(rows, widths[1], 0.0)?, p.tensor(rows, widths[2], 0.0)?];
            p.r.rms_norm(&h.r, &norm.r, 1e-6, rows, &mut normed.r);
            p.t.rms_norm(&h.t, &norm.t, 1e-6, rows, &mut normed.t);
            {
                let [y0, y1, y2] = &mut ys;
                let mut pr = [
                    Projection { w: &qkv[0].r, bias: Some(&q_bias.r), out: &mut y0.r },
                    Projection { w: &qkv[1].r, bias: Some(&k_bias.r), out: &mut y1.r },
                    Projection { w: &qkv[2].r, bias: None, out: &mut y2.r },
                ];
                let mut pt = [
                    Projection { w: &qkv[0].t, bias: Some(&q_bias.t), out: &mut y0.t },
                    Projection { w: &qkv[1].t, bias: Some(&k_bias.t), out: &mut y1.t },
                    Projection { w: &qkv[2].t, bias: None, out: &mut y2.t },
                ];
                if rope {
                    p.r.qkv_rope(&normed.r, rows, &mut pr, &tr, &pos.r);
                    p.t.qkv_rope(&normed.t, rows, &mut pt, &tt, &pos.t);
                } else {
                    p.r.matmul_many(&normed.r, rows, &mut pr);
                    p.t.matmul_many(&normed.t, rows, &mut pt);
                }
            }
            let op = if rope { "qkv_rope" } else { "matmul_many" };
            for (y, name) in ys.iter().zip(["q", "k", "v"]) {
                p.compare(&format!("stacked {op} {rows} rows, {name}"), y, rows, MATMUL_TOL)?;
            }
        }
        let (mut gb, mut ub, mut act) = (p.tensor(rows, inter, 0.0)?, p.tensor(rows, inter, 0.0)?, p.tensor(rows, inter, 0.0)?);
        let mut delta = p.tensor(rows, hidden, 0.0)?;
        p.r.rms_norm(&h.r, &norm.r, 1e-6, rows, &mut normed.r);
        p.t.rms_norm(&h.t, &norm.t, 1e-6, rows, &mut normed.t);
        p.r.gate_up_silu(&normed.r, &gate_up[0].r, &gate_up[1].r, rows, &mut gb.r, &mut ub.r, &mut act.r);
        p.t.gate_up_silu(&normed.t, &gate_up[0].t, &gate_up[1].t, rows, &mut gb.t, &mut ub.t, &mut act.t);
        p.compare(&format!("stacked gate_up_silu {rows} rows"), &act, rows, MATMUL_TOL)?;
        p.r.matmul_residual(&act.r, &down.r, rows, &mut delta.r, &mut h.r);
        p.t.matmul_residual(&act.t, &down.t, rows, &mut delta.t, &mut h.t);
        p.compare(&format!("norm, stacked gate-up, down + residual {rows} rows"), &h, rows, MATMUL_TOL)?;
        // A norm's copy belongs to its own output: a matmul of another tensor converts that one.
        let other = p.tensor(rows, hidden, 1.0)?;
        let mut y = p.tensor(rows, inter, 0.0)?;
        p.r.rms_norm(&h.r, &norm.r, 1e-6, rows, &mut normed.r);
        p.t.rms_norm(&h.t, &norm.t, 1e-6, rows, &mut normed.t);
        p.r.matmul(&other.r, &gate_up[0].r, None, rows, &mut y.r);
        p.t.matmul(&other.t, &gate_up[0].t, None, rows, &mut y.t);
        p.compare(&format!("matmul of another tensor after a norm {rows} rows"), &y, rows, MATMUL_TOL)?;
    }
    Ok(())
}

/// Dense FP8 linears as the DeepSeek-V3 family stores them (`Backend::load_stored`: e4m3
/// bytes, one scale per weight row and 128 columns, as the device forward lays them out), at
/// the row counts of a decode step, one and two groups of a verify, two blocks of groups (a
/// concurrency-32 step) and a prefill chunk: a product, and one added into the residual, with
/// x read in one part, then precisely (`set_precise_inputs`). The widths leave part of a
/// 32-row block and cut K into slices of several steps; the third, as wide as an attention
/// output, leaves idle rows in its last block; the fourth, in blocks of 32 columns, takes the
/// CUDA cores' `linear_fp8` with a row shared among 4 warps (stored::linear_splits). Then the per-head products of `kv_b_proj`
/// absorbed (`Backend::head_matmul`), with the transposed keys' scales a run of 64 values (the
/// tensor cores) or of 16 (the CUDA cores' `head_matmul_fp8`), x precise.
fn stored_ops<R: Backend, T: Backend>(p: &mut Pair<'_, R, T>) -> Result<(), BackendError> {
    for [n_out, k_in, bc] in [[200usize, 1024usize, 128usize], [96, 2304, 128], [4100, 256, 128], [64, 2048, 32]] {
        // Every e4m3 byte but the two NaNs, with scales that keep the sums near 1.
        let bytes: Vec<u8> = (0..n_out * k_in).map(|_| p.rng.random_range(0u8..=0xfe)).map(|b| if b == 0x7f { 0 } else { b }).collect();
        let scales: Vec<f32> = (0..n_out * k_in / bc).map(|_| p.rng.random_range(1e-3f32..4e-3)).collect();
        let format = StoredFormat::Fp8 { block: [1, bc] };
        let blocks = if bc == 128 { String::new() } else { format!(" in blocks of {bc}") };
        let w = StoredWeight { name: "conformance fp8", bytes: &bytes, scales: &scales, shape: [n_out, k_in], format };
        let w: Weights<R, T> = Both { r: p.r.load_stored(&w)?, t: p.t.load_stored(&w)?, _p: Default::default() };
        for precise in [false, true] {
            p.t.set_precise_inputs(precise);
            let how = if precise { ", x precise" } else { "" };
            for rows in [1usize, 5, 13, 29, 40] {
                // A GPU reads a step's weights as stored, and gives a prefill's (40 rows) to
                // cuBLAS as bf16 values, 2^-9 from the f32 ones.
                let tolerance = if precise && rows <= 32 { F32_TOL } else { MATMUL_TOL };
                let x = p.tensor(rows, k_in, 1.0)?;
                let mut y = p.tensor(rows, n_out, 0.0)?;
                p.r.matmul(&x.r, &w.r, None, rows, &mut y.r);
                p.t.matmul(&x.t, &w.t, None, rows, &mut y.t);
                p.compare(&format!("stored fp8 [{n_out}, {k_in}]{blocks} {rows} rows{how}"), &y, rows, tolerance)?;
                let (mut h, mut delta) = (p.tensor(rows, n_out, 1.0)?, p.tensor(rows, n_out, 0.0)?);
                p.r.matmul_residual(&x.r, &w.r, rows, &mut delta.r, &mut h.r);
                p.t.matmul_residual(&x.t, &w.t, rows, &mut delta.t, &mut h.t);
                p.compare(&format!("stored fp8 [{n_out}, {k_in}]{blocks} + residual {rows} rows{how}"), &h, rows, tolerance)?;
            }
        }
        p.t.set_precise_inputs(false);
    }
    let (heads, b, a) = (4usize, 96usize, 128usize);
    for run in [64usize, 16] {
        let bytes: Vec<u8> = (0..heads * b * a).map(|_| p.rng.random_range(0u8..=0xfe)).map(|b| if b == 0x7f { 0 } else { b }).collect();
        let scales: Vec<f32> = (0..heads * b * a / run).map(|_| p.rng.random_range(1e-3f32..4e-3)).collect();
        let format = StoredFormat::Fp8 { block: [1, run] };
        let w = StoredWeight { name: "conformance fp8 heads", bytes: &bytes, scales: &scales, shape: [heads * b, a], format };
        let w: Weights<R, T> = Both { r: p.r.load_stored(&w)?, t: p.t.load_stored(&w)?, _p: Default::default() };
        p.t.set_precise_inputs(true);
        for rows in [1usize, 5, 40] {
            let x = p.tensor(rows, heads * a, 1.0)?;
            let mut y = p.tensor(rows, heads * b, 0.0)?;
            p.r.head_matmul(&x.r, &w.r, heads, rows, &mut y.r);
            p.t.head_matmul(&x.t, &w.t, heads, rows, &mut y.t);
            p.compare(&format!("stored fp8 per head [{heads} x {b}, {a}] in runs of {run}, {rows} rows"), &y, rows, F32_TOL)?;
        }
        p.t.set_precise_inputs(false);
    }
    Ok(())
}

fn layer_ops<R: Backend, T: Backend>(p: &mut Pair<'_, R, T>) -> Result<(), BackendError> {
    let (hidden, n_out, vocab) = (256, 384, 1000);
    let table = p.weight(&[vocab, hidden], 1.0)?;
    let ids = p.ids(&[3, 999, 0, 512, 77])?;
    let mut e = p.tensor(5, hidden, 0.0)?;
    p.r.embed(&table.r, &ids.r, 5, &mut e.r);
    p.t.embed(&table.t, &ids.t, 5, &mut e.t);
    p.compare("embed", &e, 5, F32_TOL)?;

    // 384 outputs: one W row per warp; 4101: four per warp, with a ragged last warp.
    // 1 and 5 rows: the skinny kernel (decode, verify); 40 rows: cuBLAS (prefill).
    for (n_out, row_counts) in [(n_out, &[1usize, 5, 40][..]), (4101, &[1, 5][..])] {
        let w = p.weight(&[n_out, hidden], 0.1)?;
        let bias = p.weight(&[n_out], 0.1)?;
        for &rows in row_counts {
            let x = p.tensor(rows, hidden, 1.0)?;
            let mut y = p.tensor(rows, n_out, 0.0)?;
            for with_bias in [false, true] {
                let b = with_bias.then_some(&bias);
                p.r.matmul(&x.r, &w.r, b.map(|b| &b.r), rows, &mut y.r);
                p.t.matmul(&x.t, &w.t, b.map(|b| &b.t), rows, &mut y.t);
                p.compare(&format!("matmul {rows}x{hidden} -> {n_out} bias={with_bias}"), &y, rows, MATMUL_TOL)?;
            }
        }
    }

    // The router's product keeps x's f32 values at every row count, cuBLAS's included.
    let w = p.weight(&[n_out, hidden], 0.1)?;
    for rows in [1, 5, 40] {
        let x = p.tensor(rows, hidden, 1.0)?;
        let mut y = p.tensor(rows, n_out, 0.0)?;
        p.r.matmul_f32_inputs(&x.r, &w.r, rows, &mut y.r);
        p.t.matmul_f32_inputs(&x.t, &w.t, rows, &mut y.t);
        p.compare(&format!("matmul_f32_inputs {rows}x{hidden} -> {n_out}"), &y, rows, F32_TOL)?;
    }

    // Where the model asks for x at f32 precision (the MoE family), every product reads it
    // so: the skinny kernels' two tf32 parts, cuBLAS's two bf16 parts.
    let bias = p.weight(&[n_out], 0.1)?;
    p.t.set_precise_inputs(true);
    for rows in [1, 5, 40] {
        let x = p.tensor(rows, hidden, 1.0)?;
        let mut y = p.tensor(rows, n_out, 0.0)?;
        p.r.matmul(&x.r, &w.r, Some(&bias.r), rows, &mut y.r);
        p.t.matmul(&x.t, &w.t, Some(&bias.t), rows, &mut y.t);
        p.compare(&format!("matmul, precise inputs, {rows}x{hidden} -> {n_out}"), &y, rows, F32_TOL)?;
    }
    p.t.set_precise_inputs(false);

    let norm = p.weight(&[hidden], 1.0)?;
    let x = p.tensor(7, hidden, 2.0)?;
    let mut y = p.tensor(7, hidden, 0.0)?;
    p.r.rms_norm(&x.r, &norm.r, 1e-6, 7, &mut y.r);
    p.t.rms_norm(&x.t, &norm.t, 1e-6, 7, &mut y.t);
    p.compare("rms_norm", &y, 7, F32_TOL)?;

    let head_norm = p.weight(&[64], 1.0)?;
    p.r.head_rms_norm(&mut y.r, &head_norm.r, 1e-6, 7);
    p.t.head_rms_norm(&mut y.t, &head_norm.t, 1e-6, 7);
    p.compare("head_rms_norm", &y, 7, F32_TOL)?;

    for style in [RopeStyle::NeoX, RopeStyle::Interleaved] {
        let hd = 64;
        let (tr, tt) = rope_tables(p, hd, 300, style)?;
        let pos = p.ids(&[0, 1, 17, 250, 299])?;
        let mut q = p.tensor(5, 4 * hd, 1.0)?;
        p.r.rope(&mut q.r, &tr, &pos.r, 5);
        p.t.rope(&mut q.t, &tt, &pos.t, 5);
        p.compare(&format!("rope {style:?}"), &q, 5, F32_TOL)?;
    }

    let gate = p.tensor(3, 512, 4.0)?;
    let up = p.tensor(3, 512, 1.0)?;
    let mut act = p.tensor(3, 512, 0.0)?;
    p.r.silu_mul(&gate.r, &up.r, 3, &mut act.r);
    p.t.silu_mul(&gate.t, &up.t, 3, &mut act.t);
    p.compare("silu_mul", &act, 3, F32_TOL)?;
    p.r.add(&mut act.r, &gate.r, 2);
    p.t.add(&mut act.t, &gate.t, 2);
    p.compare("add", &act, 3, F32_TOL)
}

/// RoPE tables of `max_pos` positions for head_dim `hd` on both backends.
fn rope_tables<R: Backend, T: Backend>(
    p: &Pair<'_, R, T>,
    hd: usize,
    max_pos: usize,
    style: RopeStyle,
) -> Result<(RopeTable<R>, RopeTable<T>), BackendError> {
    let cos: Vec<f32> = (0..max_pos * hd / 2).map(|i| ((i % 97) as f32 * 0.37).cos()).collect();
    let sin: Vec<f32> = (0..max_pos * hd / 2).map(|i| ((i % 97) as f32 * 0.37).sin()).collect();
    Ok((
        RopeTable { cos: p.r.tensor_from(hd / 2, &cos)?, sin: p.r.tensor_from(hd / 2, &sin)?, head_dim: hd, style, max_positions: max_pos },
        RopeTable { cos: p.t.tensor_from(hd / 2, &cos)?, sin: p.t.tensor_from(hd / 2, &sin)?, head_dim: hd, style, max_positions: max_pos },
    ))
}

/// A layer's attention inputs on `b` from `x[:rows]` and the q, k, v weights of `cols`
/// outputs: `qkv_rope_store_kv` (`fused`) or `matmul_many` then `rope_store_kv`. Returns q
/// and the two caches (`slots` rows starting as `cache`; the step writes rows 30 ..).
#[allow(clippy::too_many_arguments)]
fn attention_inputs<B: Backend>(
    b: &B,
    x: &B::Tensor,
    rows: usize,
    weights: [(&B::Weight, Option<&B::Weight>); 3],
    cols: [usize; 3],
    table: &RopeTable<B>,
    positions: &B::Ids,
    cache: &[f32],
    fused: bool,
) -> Result<[B::Tensor; 3], BackendError> {
    let (mut q, mut k, mut v) = (b.tensor(rows, cols[0])?, b.tensor(rows, cols[1])?, b.tensor(rows, cols[2])?);
    let (mut kc, mut vc) = (kv_tensor_from(b, cols[1], cache, KvDtype::Bf16)?, kv_tensor_from(b, cols[2], cache, KvDtype::Bf16)?);
    let slot = 30;
    let [(wq, bq), (wk, bk), (wv, bv)] = weights;
    let mut qkv = [
        Projection { w: wq, bias: bq, out: &mut q },
        Projection { w: wk, bias: bk, out: &mut k },
        Projection { w: wv, bias: bv, out: &mut v },
    ];
    if fused {
        b.qkv_rope_store_kv(x, rows, &mut qkv, KvStore { table, positions, cache: (&mut kc, &mut vc), slot });
    } else {
        b.matmul_many(x, rows, &mut qkv);
        b.rope_store_kv(&mut q, &mut k, &v, table, positions, rows, (&mut kc, &mut vc), slot);
    }
    Ok([q, kc, vc])
}

/// The fused steps against the same steps done op by op: q/k/v in one call (with bias),
/// gate-up-SiLU, the row-parallel matmul with the residual add, RoPE with the KV-cache
/// write, and q/k/v with RoPE and the cache write in one call, at decode, verify and
/// prefill sizes.
fn fused_ops<R: Backend, T: Backend>(p: &mut Pair<'_, R, T>) -> Result<(), BackendError> {
    let hidden = 256;
    let widths = [384usize, 128, 128];
    let ws = [p.weight(&[widths[0], hidden], 0.1)?, p.weight(&[widths[1], hidden], 0.1)?, p.weight(&[widths[2], hidden], 0.1)?];
    let bs = [p.weight(&[widths[0]], 0.1)?, p.weight(&[widths[1]], 0.1)?, p.weight(&[widths[2]], 0.1)?];
    let (gate, up) = (p.weight(&[768, hidden], 0.1)?, p.weight(&[768, hidden], 0.1)?);
    let down = p.weight(&[hidden, 768], 0.1)?;
    for rows in [1usize, 5, 40] {
        let x = p.tensor(rows, hidden, 1.0)?;
        let mut ys = [p.tensor(rows, widths[0], 0.0)?, p.tensor(rows, widths[1], 0.0)?, p.tensor(rows, widths[2], 0.0)?];
        {
            let [y0, y1, y2] = &mut ys;
            let mut pr = [
                Projection { w: &ws[0].r, bias: Some(&bs[0].r), out: &mut y0.r },
                Projection { w: &ws[1].r, bias: Some(&bs[1].r), out: &mut y1.r },
                Projection { w: &ws[2].r, bias: None, out: &mut y2.r },
            ];
            p.r.matmul_many(&x.r, rows, &mut pr);
            let mut pt = [
                Projection { w: &ws[0].t, bias: Some(&bs[0].t), out: &mut y0.t },
                Projection { w: &ws[1].t, bias: Some(&bs[1].t), out: &mut y1.t },
                Projection { w: &ws[2].t, bias: None, out: &mut y2.t },
            ];
            p.t.matmul_many(&x.t, rows, &mut pt);
        }
        for (i, y) in ys.iter().enumerate() {
            p.compare(&format!("matmul_many {rows} rows, output {i}"), y, rows, MATMUL_TOL)?;
        }
        let (mut gb, mut ub, mut act) = (p.tensor(rows, 768, 0.0)?, p.tensor(rows, 768, 0.0)?, p.tensor(rows, 768, 0.0)?);
        p.r.gate_up_silu(&x.r, &gate.r, &up.r, rows, &mut gb.r, &mut ub.r, &mut act.r);
        p.t.gate_up_silu(&x.t, &gate.t, &up.t, rows, &mut gb.t, &mut ub.t, &mut act.t);
        p.compare(&format!("gate_up_silu {rows} rows"), &act, rows, MATMUL_TOL)?;
        // The residual stream at its own scale.
        let act = p.tensor(rows, 768, 1.0)?;
        let (mut h, mut delta) = (p.tensor(rows, hidden, 30.0)?, p.tensor(rows, hidden, 0.0)?);
        p.r.matmul_residual(&act.r, &down.r, rows, &mut delta.r, &mut h.r);
        p.t.matmul_residual(&act.t, &down.t, rows, &mut delta.t, &mut h.t);
        p.compare(&format!("matmul_residual {rows} rows"), &h, rows, MATMUL_TOL)?;
    }
    let (heads, kv_heads, hd, slots) = (4usize, 2usize, 64usize, 64usize);
    for style in [RopeStyle::NeoX, RopeStyle::Interleaved] {
        let (tr, tt) = rope_tables(p, hd, 300, style)?;
        let pos = p.ids(&[30, 31, 32, 250, 299])?;
        let mut q = p.tensor(5, heads * hd, 1.0)?;
        let mut k = p.tensor(5, kv_heads * hd, 1.0)?;
        let v = p.tensor(5, kv_heads * hd, 1.0)?;
        let mut kc = p.kv_tensor(slots, kv_heads * hd, 1.0)?;
        let mut vc = p.kv_tensor(slots, kv_heads * hd, 1.0)?;
        p.r.rope_store_kv(&mut q.r, &mut k.r, &v.r, &tr, &pos.r, 5, (&mut kc.r, &mut vc.r), 30);
        p.t.rope_store_kv(&mut q.t, &mut k.t, &v.t, &tt, &pos.t, 5, (&mut kc.t, &mut vc.t), 30);
        p.compare(&format!("rope_store_kv {style:?} q"), &q, 5, F32_TOL)?;
        p.compare(&format!("rope_store_kv {style:?} k"), &k, 5, F32_TOL)?;
        p.compare(&format!("rope_store_kv {style:?} k cache"), &kc, slots, F32_TOL)?;
        p.compare(&format!("rope_store_kv {style:?} v cache"), &vc, slots, 0.0)?;

        // 6 q heads and 2 kv heads of 64 (the q/k/v weights above), q and k with a bias.
        for rows in [1usize, 5, 12] {
            let x = p.tensor(rows, hidden, 1.0)?;
            let pos = p.ids(&(0..rows as i32).map(|i| 40 + 21 * i).collect::<Vec<_>>())?;
            let cache = p.random(slots * widths[1], 1.0);
            let on_r = [(&ws[0].r, Some(&bs[0].r)), (&ws[1].r, Some(&bs[1].r)), (&ws[2].r, None)];
            let on_t = [(&ws[0].t, Some(&bs[0].t)), (&ws[1].t, Some(&bs[1].t)), (&ws[2].t, None)];
            let reference = attention_inputs(p.r, &x.r, rows, on_r, widths, &tr, &pos.r, &cache, true)?;
            let fused = attention_inputs(p.t, &x.t, rows, on_t, widths, &tt, &pos.t, &cache, true)?;
            let by_ops = attention_inputs(p.t, &x.t, rows, on_t, widths, &tt, &pos.t, &cache, false)?;
            let (mut test, mut ops) = (Vec::new(), Vec::new());
            for (i, name) in ["q", "k cache", "v cache"].into_iter().enumerate() {
                let n = if i == 0 { rows } else { slots };
                let (t, r) = (p.t.read_rows(&fused[i], 0, n)?, p.r.read_rows(&reference[i], 0, n)?);
                p.check(&format!("qkv_rope_store_kv {style:?} {rows} rows {name}"), &t, &r, MATMUL_TOL);
                test.extend(t);
                ops.extend(p.t.read_rows(&by_ops[i], 0, n)?);
            }
            // The one-launch form must be the op-by-op bits: decode and verify steps take it,
            // a longer verify or a deterministic prefill may not.
            p.check(&format!("qkv_rope_store_kv {style:?} {rows} rows == op by op"), &test, &ops, 0.0);
        }
    }
    Ok(())
}

fn attention_ops<R: Backend, T: Backend>(p: &mut Pair<'_, R, T>) -> Result<(), BackendError> {
    for (heads, kv_heads, hd) in [(4usize, 2usize, 64usize), (8, 8, 128), (2, 1, 80)] {
        let g = AttnGeometry { heads, kv_heads, head_dim: hd, scale: 1.0 / (hd as f32).sqrt() };
        let slots = 400;
        let k = p.kv_tensor(slots, kv_heads * hd, 1.0)?;
        let v = p.kv_tensor(slots, kv_heads * hd, 1.0)?;
        // Short and long prefixes: a warp's keys make no, one or several full groups.
        let cases: [(&str, AttnWindow); 5] = [
            ("decode", AttnWindow { prefix: 41, region: 1, queries: 1 }),
            ("decode long", AttnWindow { prefix: 377, region: 1, queries: 1 }),
            ("prefill", AttnWindow { prefix: 0, region: 33, queries: 33 }),
            ("chunk", AttnWindow { prefix: 20, region: 9, queries: 4 }),
            ("chunk long", AttnWindow { prefix: 290, region: 70, queries: 70 }),
        ];
        for (name, w) in cases {
            let q = p.tensor(w.queries, heads * hd, 1.0)?;
            let mut o = p.tensor(w.queries, heads * hd, 0.0)?;
            p.r.attention(&q.r, &k.r, &v.r, &g, w, Mask::Causal, &mut o.r);
            p.t.attention(&q.t, &k.t, &v.t, &g, w, Mask::Causal, &mut o.t);
            p.compare(&format!("attention {name} causal hd={hd}"), &o, w.queries, attention_tol(w.queries))?;
        }
        // A verify tree of 5 nodes: 0 root; 1, 2 children of 0; 3 child of 1; 4 child of 3.
        let parents = [usize::MAX, 0, 0, 1, 3];
        let mut mask = vec![0i32; 25];
        for i in 0..5 {
            let mut n = i;
            loop {
                mask[i * 5 + n] = 1;
                if parents[n] == usize::MAX {
                    break;
                }
                n = parents[n];
            }
        }
        let m = p.ids(&mask)?;
        for prefix in [57, 333] {
            let w = AttnWindow { prefix, region: 5, queries: 5 };
            let q = p.tensor(5, heads * hd, 1.0)?;
            let mut o = p.tensor(5, heads * hd, 0.0)?;
            p.r.attention(&q.r, &k.r, &v.r, &g, w, Mask::Explicit(&m.r), &mut o.r);
            p.t.attention(&q.t, &k.t, &v.t, &g, w, Mask::Explicit(&m.t), &mut o.t);
            p.compare(&format!("attention tree mask prefix {prefix} hd={hd}"), &o, 5, F32_TOL)?;
        }
    }
    Ok(())
}

/// A pool long enough that step queries split their keys over several blocks on a GPU
/// (kernels/attention.cu: 2048 keys a split), with grouped heads.
const LONG_SLOTS: usize = 7000;
const LONG_GEOMETRY: AttnGeometry = AttnGeometry { heads: 8, kv_heads: 2, head_dim: 128, scale: 0.088_388_35 };

/// Decode and chain-verify queries over thousands of keys.
fn long_attention_ops<R: Backend, T: Backend>(p: &mut Pair<'_, R, T>) -> Result<(), BackendError> {
    let g = LONG_GEOMETRY;
    let k = p.kv_tensor(LONG_SLOTS, g.kv_heads * g.head_dim, 1.0)?;
    let v = p.kv_tensor(LONG_SLOTS, g.kv_heads * g.head_dim, 1.0)?;
    for w in [AttnWindow { prefix: LONG_SLOTS - 1, region: 1, queries: 1 }, AttnWindow { prefix: 4500, region: 3, queries: 3 }] {
        let q = p.tensor(w.queries, g.heads * g.head_dim, 1.0)?;
        let mut o = p.tensor(w.queries, g.heads * g.head_dim, 0.0)?;
        p.r.attention(&q.r, &k.r, &v.r, &g, w, Mask::Causal, &mut o.r);
        p.t.attention(&q.t, &k.t, &v.t, &g, w, Mask::Causal, &mut o.t);
        p.compare(&format!("attention {} keys, {} queries", w.prefix + w.region, w.queries), &o, w.queries, F32_TOL)?;
    }
    Ok(())
}

/// `paged_attention_batch` over a pool whose slots are shuffled: a decode, a chain verify
/// over thousands of keys and a prefill chunk in one forward, against the reference (the
/// outputs and the stored K and V), and each step row against the same query over its
/// keys laid out contiguously on the backend under test, which must be equal to the bit.
fn paged_batch_ops<R: Backend, T: Backend>(p: &mut Pair<'_, R, T>) -> Result<(), BackendError> {
    let g = LONG_GEOMETRY;
    let (q_width, kv_width) = (g.heads * g.head_dim, g.kv_heads * g.head_dim);
    let mut pool: Vec<usize> = (0..LONG_SLOTS).collect();
    for i in (1..pool.len()).rev() {
        pool.swap(i, p.rng.random_range(0..=i));
    }
    // (keys seen by the last query, queries): a decode, a chain of 4, a 20-token prefill,
    // and a prompt chunk of 100 queries (tiled on a GPU).
    let shapes = [(300usize, 1usize), (6500, 4), (20, 20), (150, 100)];
    let (mut taken, mut row) = (0, 0);
    let mut parts = Vec::new();
    for (len, queries) in shapes {
        parts.push((row, queries, &pool[taken..taken + len]));
        taken += len;
        row += queries;
    }
    let rows = row;
    let (mut k, mut v) = (p.kv_tensor(LONG_SLOTS, kv_width, 1.0)?, p.kv_tensor(LONG_SLOTS, kv_width, 1.0)?);
    let new_k = p.tensor(rows, kv_width, 1.0)?;
    let new_v = p.tensor(rows, kv_width, 1.0)?;
    let q = p.tensor(rows, q_width, 1.0)?;
    let mut o = p.tensor(rows, q_width, 0.0)?;
    let seqs_r: Vec<BatchSeq<'_, R>> =
        parts.iter().map(|&(row, queries, slots)| BatchSeq { seq: PagedSeq { row, queries, slots }, mask: Mask::Causal }).collect();
    let seqs_t: Vec<BatchSeq<'_, T>> =
        parts.iter().map(|&(row, queries, slots)| BatchSeq { seq: PagedSeq { row, queries, slots }, mask: Mask::Causal }).collect();
    let mut scratch_r = PagedScratch::new(p.r, 100, 6500, &g, KvDtype::Bf16)?;
    let mut scratch_t = PagedScratch::new(p.t, 100, 6500, &g, KvDtype::Bf16)?;
    let (batch_r, batch_t) = (PagedBatch::new(&seqs_r, rows), PagedBatch::new(&seqs_t, rows));
    p.r.paged_attention_batch(&q.r, (&new_k.r, &new_v.r), (&mut k.r, &mut v.r), &g, &batch_r, &mut scratch_r, &mut o.r);
    p.t.paged_attention_batch(&q.t, (&new_k.t, &new_v.t), (&mut k.t, &mut v.t), &g, &batch_t, &mut scratch_t, &mut o.t);
    let (batched, reference) = (p.t.read_rows(&o.t, 0, rows)?, p.r.read_rows(&o.r, 0, rows)?);
    for &(row, queries, slots) in &parts {
        let at = row * q_width..(row + queries) * q_width;
        let op = format!("paged_attention_batch output, {queries} queries over {} keys", slots.len());
        p.check(&op, &batched[at.clone()], &reference[at], attention_tol(queries));
    }
    p.compare("paged_attention_batch k pool", &k, LONG_SLOTS, 0.0)?;
    p.compare("paged_attention_batch v pool", &v, LONG_SLOTS, 0.0)?;
    let (pool_k, pool_v) = (p.t.read_rows(&k.t, 0, LONG_SLOTS)?, p.t.read_rows(&v.t, 0, LONG_SLOTS)?);
    for &(row, queries, slots) in parts.iter().filter(|(_, queries, _)| *queries <= STEP_QUERIES_MAX) {
        let laid_out = |pool: &[f32]| -> Vec<f32> { slots.iter().flat_map(|&s| pool[s * kv_width..(s + 1) * kv_width].to_vec()).collect() };
        let kc = kv_tensor_from(p.t, kv_width, &laid_out(&pool_k), KvDtype::Bf16)?;
        let vc = kv_tensor_from(p.t, kv_width, &laid_out(&pool_v), KvDtype::Bf16)?;
        let mut qc = p.t.tensor(queries, q_width)?;
        p.t.copy_rows(&q.t, row, &mut qc, 0, queries);
        let mut oc = p.t.tensor(queries, q_width)?;
        let w = AttnWindow { prefix: slots.len() - queries, region: queries, queries };
        p.t.attention(&qc, &kc, &vc, &g, w, Mask::Causal, &mut oc);
        let contiguous = p.t.read_rows(&oc, 0, queries)?;
        let op = format!("paged batch row {row} ({} keys) == contiguous", slots.len());
        p.check(&op, &batched[row * q_width..(row + queries) * q_width], &contiguous, 0.0);
    }
    Ok(())
}

fn movement_ops<R: Backend, T: Backend>(p: &mut Pair<'_, R, T>) -> Result<(), BackendError> {
    let src = p.tensor(12, 96, 1.0)?;
    let mut dst = p.tensor(20, 96, 1.0)?;
    p.r.copy_rows(&src.r, 3, &mut dst.r, 11, 6);
    p.t.copy_rows(&src.t, 3, &mut dst.t, 11, 6);
    p.compare("copy_rows", &dst, 20, 0.0)?;
    let mut wide = p.tensor(12, 200, 1.0)?;
    p.r.copy_cols(&src.r, 9, &mut wide.r, 40);
    p.t.copy_cols(&src.t, 9, &mut wide.t, 40);
    p.compare("copy_cols", &wide, 12, 0.0)?;
    p.r.gather_rows(&src.r, &[7, 0, 7, 11], &mut dst.r);
    p.t.gather_rows(&src.t, &[7, 0, 7, 11], &mut dst.t);
    p.compare("gather_rows", &dst, 20, 0.0)?;
    p.r.move_rows(&mut dst.r, &[5, 6, 9, 13], 5);
    p.t.move_rows(&mut dst.t, &[5, 6, 9, 13], 5);
    p.compare("move_rows", &dst, 20, 0.0)?;
    // The same moves within and between bf16 KV caches: rounded on the way in, then moved
    // as they are.
    let mut cache = p.kv_tensor(20, 96, 1.0)?;
    p.r.copy_rows(&src.r, 3, &mut cache.r, 11, 6);
    p.t.copy_rows(&src.t, 3, &mut cache.t, 11, 6);
    p.compare("copy_rows into a bf16 KV cache", &cache, 20, 0.0)?;
    let mut gathered = p.kv_tensor(20, 96, 0.0)?;
    p.r.gather_rows(&cache.r, &[12, 0, 12, 16], &mut gathered.r);
    p.t.gather_rows(&cache.t, &[12, 0, 12, 16], &mut gathered.t);
    p.compare("gather_rows between bf16 KV caches", &gathered, 20, 0.0)?;
    p.r.move_rows(&mut cache.r, &[5, 6, 9, 13], 5);
    p.t.move_rows(&mut cache.t, &[5, 6, 9, 13], 5);
    p.compare("move_rows in a bf16 KV cache", &cache, 20, 0.0)
}

fn decoding_ops<R: Backend, T: Backend>(p: &mut Pair<'_, R, T>) -> Result<(), BackendError> {
    let vocab = 50_000;
    let mut logits = p.tensor(4, vocab, 8.0)?;
    let mut am = p.ids(&[0; 4])?;
    p.r.argmax(&logits.r, 4, &mut am.r);
    p.t.argmax(&logits.t, 4, &mut am.t);
    p.compare_ids("argmax", &am, 4)?;
    let k = 8;
    let mut vals = p.tensor(4, k, 0.0)?;
    let mut idx = p.ids(&[0; 32])?;
    p.r.topk(&logits.r, 4, k, &mut vals.r, &mut idx.r);
    p.t.topk(&logits.t, 4, k, &mut vals.t, &mut idx.t);
    p.compare("topk values", &vals, 4, 0.0)?;
    p.compare_ids("topk indices", &idx, 32)?;
    // A k past what chunks keep (one block per row), and more rows than one launch takes.
    let mut wide_vals = p.tensor(4, 20, 0.0)?;
    let mut wide_idx = p.ids(&[0; 80])?;
    p.r.topk(&logits.r, 4, 20, &mut wide_vals.r, &mut wide_idx.r);
    p.t.topk(&logits.t, 4, 20, &mut wide_vals.t, &mut wide_idx.t);
    p.compare("topk k=20 values", &wide_vals, 4, 0.0)?;
    p.compare_ids("topk k=20 indices", &wide_idx, 80)?;
    let many = p.tensor(70, 9000, 8.0)?;
    let mut many_am = p.ids(&[0; 70])?;
    p.r.argmax(&many.r, 70, &mut many_am.r);
    p.t.argmax(&many.t, 70, &mut many_am.t);
    p.compare_ids("argmax 70 rows", &many_am, 70)?;
    // A draft step's top-k of probabilities, on logits of their own (the reference leaves
    // probabilities in them, a GPU the logits).
    let mut draft = p.tensor(4, vocab, 8.0)?;
    let (mut probs, mut ids) = (p.tensor(4, k, 0.0)?, p.ids(&[0; 32])?);
    p.r.softmax_topk(&mut draft.r, 4, k, &mut probs.r, &mut ids.r);
    p.t.softmax_topk(&mut draft.t, 4, k, &mut probs.t, &mut ids.t);
    p.compare("softmax_topk values", &probs, 4, F32_TOL)?;
    p.compare_ids("softmax_topk indices", &ids, 32)?;
    // Each row's best as an id of another vocabulary, at an offset, then gathered into a
    // verify's rows (chain drafting keeps its tokens on the device).
    let reversed: Vec<i32> = (0..vocab as i32).rev().collect();
    let map = p.ids(&reversed)?;
    let mut picked = p.ids(&[-1; 12])?;
    p.r.pick_ids(&ids.r, k, Some(&map.r), 4, &mut picked.r, 5);
    p.t.pick_ids(&ids.t, k, Some(&map.t), 4, &mut picked.t, 5);
    p.r.pick_ids(&ids.r, k, None, 3, &mut picked.r, 1);
    p.t.pick_ids(&ids.t, k, None, 3, &mut picked.t, 1);
    p.compare_ids("pick_ids", &picked, 12)?;
    let mut verify = p.ids(&[7; 10])?;
    let from = [-1, 5, 6, -1, 1, 8, -1, -1, 2, 3];
    p.r.gather_ids(&picked.r, &from, &mut verify.r);
    p.t.gather_ids(&picked.t, &from, &mut verify.t);
    p.compare_ids("gather_ids", &verify, 10)?;
    p.r.softmax(&mut logits.r, 4, 0.7);
    p.t.softmax(&mut logits.t, 4, 0.7);
    p.compare("softmax", &logits, 4, F32_TOL)?;
    // Draws at a few coins, with and without exclusions; a draw may differ from the
    // sequential scan only when the coin lands within rounding of a boundary.
    let top: Vec<u32> = p.r.read_ids(&idx.r, 3)?.iter().map(|&i| i as u32).collect();
    let mut agree = true;
    for (row, coin) in [(0usize, 0.0f32), (1, 0.31), (2, 0.77), (3, 0.999)] {
        let probs = p.r.read_rows(&logits.r, row, 1)?;
        for excluded in [&[][..], &top[..]] {
            let (want, got) = (p.r.sample(&logits.r, row, excluded, coin)?, p.t.sample(&logits.t, row, excluded, coin)?);
            agree &= want == got || draw_at_boundary(&probs, excluded, coin, got);
        }
    }
    p.out.push(OpCheck { op: "sample".into(), rel_err: if agree { 0.0 } else { 1.0 }, tolerance: 0.0, ok: agree });
    Ok(())
}

/// Whether drawing `token` at `coin` is right up to f32 rounding: the coin's point of the
/// kept mass lies within 1e-4 of the mass (the error of an f32 running sum over 50 000
/// entries, in either order) of `token`'s interval of the exact cumulative sum.
fn draw_at_boundary(probs: &[f32], excluded: &[u32], coin: f32, token: u32) -> bool {
    let kept = |j: usize| probs[j] > 0.0 && !excluded.contains(&(j as u32));
    let mass: f64 = (0..probs.len()).filter(|&j| kept(j)).map(|j| probs[j] as f64).sum();
    let t = token as usize;
    if t >= probs.len() || !kept(t) {
        return false;
    }
    let before: f64 = (0..t).filter(|&j| kept(j)).map(|j| probs[j] as f64).sum();
    let (point, slack) = (coin as f64 * mass, 1e-4 * mass);
    before - slack <= point && point < before + probs[t] as f64 + slack
}

/// Decode rows of a batch of many sequences (`MANY_SEQS`, which a GPU runs on its tensor
/// cores) over a shuffled pool, against the reference; and each row of a batch of
/// `MANY_SEQS` against the same row in a batch of more, which must be equal to the bit: a
/// row's sums depend on its own keys alone.
fn wide_paged_batch_ops<R: Backend, T: Backend>(p: &mut Pair<'_, R, T>) -> Result<(), BackendError> {
    const MANY_SEQS: usize = 16;
    let g = LONG_GEOMETRY;
    let (q_width, kv_width) = (g.heads * g.head_dim, g.kv_heads * g.head_dim);
    let mut pool: Vec<usize> = (0..LONG_SLOTS).collect();
    for i in (1..pool.len()).rev() {
        pool.swap(i, p.rng.random_range(0..=i));
    }
    // Keys of 20 decode rows: short ones, and some that split over blocks on a GPU.
    let lens: Vec<usize> = (0..MANY_SEQS + 4).map(|i| if i % 5 == 4 { 500 + 50 * i } else { 9 + 7 * i }).collect();
    let mut starts = vec![0];
    for len in &lens {
        starts.push(starts.last().expect("pushed") + len);
    }
    let (mut k, mut v) = (p.kv_tensor(LONG_SLOTS, kv_width, 1.0)?, p.kv_tensor(LONG_SLOTS, kv_width, 1.0)?);
    let rows = lens.len();
    let new_k = p.tensor(rows, kv_width, 1.0)?;
    let new_v = p.tensor(rows, kv_width, 1.0)?;
    let q = p.tensor(rows, q_width, 1.0)?;
    let mut outputs = Vec::new();
    for seqs in [rows, MANY_SEQS] {
        let part = |i: usize| PagedSeq { row: i, queries: 1, slots: &pool[starts[i]..starts[i + 1]] };
        let seqs_r: Vec<BatchSeq<'_, R>> = (0..seqs).map(|i| BatchSeq { seq: part(i), mask: Mask::Causal }).collect();
        let seqs_t: Vec<BatchSeq<'_, T>> = (0..seqs).map(|i| BatchSeq { seq: part(i), mask: Mask::Causal }).collect();
        let mut o = p.tensor(seqs, q_width, 0.0)?;
        let mut scratch_r = PagedScratch::new(p.r, seqs, 4000, &g, KvDtype::Bf16)?;
        let mut scratch_t = PagedScratch::new(p.t, seqs, 4000, &g, KvDtype::Bf16)?;
        let (batch_r, batch_t) = (PagedBatch::new(&seqs_r, seqs), PagedBatch::new(&seqs_t, seqs));
        p.r.paged_attention_batch(&q.r, (&new_k.r, &new_v.r), (&mut k.r, &mut v.r), &g, &batch_r, &mut scratch_r, &mut o.r);
        p.t.paged_attention_batch(&q.t, (&new_k.t, &new_v.t), (&mut k.t, &mut v.t), &g, &batch_t, &mut scratch_t, &mut o.t);
        p.compare(&format!("paged_attention_batch of {seqs} decode rows"), &o, seqs, TF32_TOL)?;
        outputs.push(p.t.read_rows(&o.t, 0, seqs)?);
    }
    p.check(&format!("paged batch of {MANY_SEQS} rows == the same rows of {rows}"), &outputs[1], &outputs[0][..MANY_SEQS * q_width], 0.0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;

    /// The harness itself: CPU against CPU must agree exactly on every op, and it must
    /// cover every op family of the seam.
    #[test]
    fn cpu_against_cpu_agrees_exactly() {
        let checks = compare_backends(&CpuBackend, &CpuBackend, 7).unwrap();
        for c in &checks {
            assert!(c.ok && c.rel_err == 0.0, "{c:?}");
        }
        let names: Vec<&str> = checks.iter().map(|c| c.op.as_str()).collect();
        for op in [
            "embed",
            "matmul 40x256 -> 384 bias=true",
            "matmul 5x256 -> 4101 bias=false",
            "matmul_f32_inputs 40x256 -> 384",
            "matmul, precise inputs, 40x256 -> 384",
            "matmul_many 5 rows, output 1",
            "gate_up_silu 40 rows",
            "matmul_residual 5 rows",
            "rope_store_kv Interleaved k cache",
            "qkv_rope_store_kv NeoX 5 rows k cache",
            "qkv_rope_store_kv Interleaved 1 rows == op by op",
            "rope Interleaved",
            "attention decode long causal hd=80",
            "attention tree mask prefix 333 hd=128",
            "attention 7000 keys, 1 queries",
            "attention 4503 keys, 3 queries",
            "paged_attention_batch output, 1 queries over 300 keys",
            "paged_attention_batch output, 100 queries over 150 keys",
            "paged_attention_batch k pool",
            "paged batch row 0 (300 keys) == contiguous",
            "paged batch row 1 (6500 keys) == contiguous",
            "paged_attention_batch of 20 decode rows",
            "paged batch of 16 rows == the same rows of 20",
            "move_rows",
            "copy_rows into a bf16 KV cache",
            "gather_rows between bf16 KV caches",
            "move_rows in a bf16 KV cache",
            "topk k=20 indices",
            "softmax_topk indices",
            "pick_ids",
            "gather_ids",
            "argmax 70 rows",
            "sample",
            "stored fp8 [200, 1024] 1 rows",
            "stored fp8 [96, 2304] + residual 13 rows, x precise",
            "stored fp8 [200, 1024] 40 rows, x precise",
            "stored fp8 [96, 2304] 29 rows",
            "stored fp8 [4100, 256] + residual 5 rows",
            "stored fp8 [64, 2048] in blocks of 32 + residual 13 rows, x precise",
            "stored fp8 per head [4 x 96, 128] in runs of 64, 40 rows",
            "stored fp8 per head [4 x 96, 128] in runs of 16, 1 rows",
        ] {
            assert!(names.contains(&op), "{op} missing from {names:?}");
        }
        assert_eq!(checks.len(), 228);
    }

    /// A draw differs from the reference's only where rounding could move the boundary.
    #[test]
    fn a_draw_at_a_boundary_is_within_rounding() {
        let probs = [0.25f32, 0.0, 0.5, 0.25];
        assert!(draw_at_boundary(&probs, &[], 0.3, 2));
        assert!(draw_at_boundary(&probs, &[], 0.25, 0), "the coin on the boundary itself");
        assert!(draw_at_boundary(&probs, &[], 0.249_99, 2), "within 1e-4 of the boundary");
        assert!(!draw_at_boundary(&probs, &[], 0.1, 2));
        assert!(!draw_at_boundary(&probs, &[], 0.3, 1), "a token of no probability");
        assert!(!draw_at_boundary(&probs, &[2], 0.3, 2), "an excluded token");
        assert!(draw_at_boundary(&probs, &[2], 0.6, 3), "the mass renormalised without token 2");
        assert!(!draw_at_boundary(&probs, &[], 0.5, 9));
    }

    #[test]
    fn relative_error_flags_non_finite_and_length_mismatch() {
        assert_eq!(rel_err(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_err(&[1.1, 2.0], &[1.0, 2.0]) - 0.1 / 5f64.sqrt()).abs() < 1e-6);
        assert_eq!(rel_err(&[f32::NAN, 2.0], &[1.0, 2.0]), f64::INFINITY);
        assert_eq!(rel_err(&[1.0], &[1.0, 2.0]), f64::INFINITY);
    }
}
