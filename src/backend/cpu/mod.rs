//! The CPU reference backend: f32 everywhere, `gemm` + rayon for matrix products, plain loops
//! (vectorisable, row-parallel) for the rest. Every CI test runs on it, and a GPU backend is
//! checked against it.

mod attention;
mod buffers;
pub(crate) mod latent;
pub(crate) mod matmul;
mod par;
pub mod route;
#[cfg(target_arch = "x86_64")]
mod skinny;

use super::latent::{Experts, MlaGeometry, MoeScratch, Routing, SlotTable};
use super::{AttnGeometry, AttnWindow, Backend, BackendError, KvDtype, Mask, PagedScratch, PagedSeq, RopeStyle, RopeTable, Shard};
use crate::model::checkpoint::TensorView;

pub use attention::dot;
pub use buffers::{CpuIds, CpuTensor, CpuWeight};

#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

/// Zeroed memory straight from the allocator: a large buffer (a KV cache) then comes as
/// untouched zero pages, and costs its page faults only where it is written, rather than a
/// memset of the whole buffer at kv-alloc.
fn alloc_f32(len: usize, what: &str) -> Result<Vec<f32>, BackendError> {
    let oom = || BackendError::OutOfMemory { bytes: len as u64 * 4, what: what.to_string() };
    if len == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<f32>(len).map_err(|_| oom())?;
    // SAFETY: the layout has a non-zero size; all-zero bits are a valid f32 (0.0); the Vec
    // takes the allocation with the global allocator and the same layout it was made with.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<f32>();
        if ptr.is_null() {
            return Err(oom());
        }
        Ok(Vec::from_raw_parts(ptr, len, len))
    }
}

/// Values into a tensor, rounded to bf16 where it is a bf16 KV cache (round to nearest
/// even, as the GPU's stores round).
fn write_values(bf16: bool, to: &mut [f32], from: &[f32]) {
    if bf16 {
        to.iter_mut().zip(from).for_each(|(t, &f)| *t = half::bf16::from_f32(f).to_f32());
    } else {
        to.copy_from_slice(from);
    }
}

fn rms_scale(x: &[f32], eps: f32) -> f32 {
    1.0 / (dot(x, x) / x.len() as f32 + eps).sqrt()
}

fn normalise_into(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let s = rms_scale(x, eps);
    out.iter_mut().zip(x).zip(w).for_each(|((o, x), w)| *o = x * s * w);
}

/// Rotate one head in place by the given cos/sin rows.
fn rotate(head: &mut [f32], cos: &[f32], sin: &[f32], style: RopeStyle) {
    let half = head.len() / 2;
    for j in 0..half {
        let (a, b) = match style {
            RopeStyle::NeoX => (j, j + half),
            RopeStyle::Interleaved => (2 * j, 2 * j + 1),
        };
        let (x0, x1) = (head[a], head[b]);
        head[a] = x0 * cos[j] - x1 * sin[j];
        head[b] = x1 * cos[j] + x0 * sin[j];
    }
}

fn region_mask<'a>(mask: Mask<'a, CpuBackend>) -> attention::RegionMask<'a> {
    match mask {
        Mask::Causal => attention::RegionMask::Causal,
        Mask::Explicit(ids) => attention::RegionMask::Explicit(&ids.data),
    }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Weight = CpuWeight;
    type Ids = CpuIds;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn run<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        rayon::scope(|_| work())
    }

    fn tensor(&self, rows: usize, cols: usize) -> Result<CpuTensor, BackendError> {
        Ok(CpuTensor { data: alloc_f32(rows * cols, "a scratch tensor")?, cols, bf16: false })
    }

    fn kv_tensor(&self, rows: usize, cols: usize, dtype: KvDtype) -> Result<CpuTensor, BackendError> {
        Ok(CpuTensor { data: alloc_f32(rows * cols, "a KV cache")?, cols, bf16: dtype == KvDtype::Bf16 })
    }

    fn tensor_from(&self, cols: usize, data: &[f32]) -> Result<CpuTensor, BackendError> {
        assert!(cols > 0 && data.len() % cols == 0, "tensor_from: {} values are not rows of {cols}", data.len());
        Ok(CpuTensor { data: data.to_vec(), cols, bf16: false })
    }

    fn ids(&self, len: usize) -> Result<CpuIds, BackendError> {
        Ok(CpuIds { data: vec![0; len] })
    }

    fn load_weight(&self, view: &TensorView<'_>, _shard: Shard) -> Result<CpuWeight, BackendError> {
        Ok(CpuWeight { data: view.to_f32()?, shape: view.shape.to_vec() })
    }

    fn weight_shape<'w>(&self, w: &'w CpuWeight) -> &'w [usize] {
        &w.shape
    }

    fn weight_bytes(&self, w: &CpuWeight) -> u64 {
        w.data.len() as u64 * 4
    }

    fn write_ids(&self, dst: &mut CpuIds, src: &[i32]) {
        dst.data[..src.len()].copy_from_slice(src);
    }

    fn read_ids(&self, src: &CpuIds, len: usize) -> Result<Vec<i32>, BackendError> {
        Ok(src.data[..len].to_vec())
    }

    fn read_rows(&self, src: &CpuTensor, start: usize, n: usize) -> Result<Vec<f32>, BackendError> {
        Ok(src.data[start * src.cols..(start + n) * src.cols].to_vec())
    }

    fn read_elements(&self, src: &CpuTensor, coords: &[(usize, usize)]) -> Result<Vec<f32>, BackendError> {
        Ok(coords.iter().map(|&(r, c)| src.data[r * src.cols + c]).collect())
    }

    fn sync(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn embed(&self, table: &CpuWeight, ids: &CpuIds, n: usize, out: &mut CpuTensor) {
        let width = table.shape[1];
        for (i, row) in out.data.chunks_mut(out.cols).take(n).enumerate() {
            let id = ids.data[i] as usize;
            row.copy_from_slice(&table.data[id * width..][..width]);
        }
    }

    fn matmul(&self, x: &CpuTensor, w: &CpuWeight, bias: Option<&CpuWeight>, n: usize, out: &mut CpuTensor) {
        let (m, k) = (w.shape[0], w.shape[1]);
        assert_eq!((x.cols, out.cols), (k, m), "matmul: x is [.., {}], w is [{m}, {k}], out is [.., {}]", x.cols, out.cols);
        matmul::matmul(&x.data, &w.data, bias.map(|b| b.data.as_slice()), n, k, m, &mut out.data);
    }

    fn rms_norm(&self, x: &CpuTensor, w: &CpuWeight, eps: f32, n: usize, out: &mut CpuTensor) {
        let c = x.cols;
        par::chunks(&mut out.data[..n * c], c, n * c, |i, o| normalise_into(x.row(i), &w.data, eps, o));
    }

    fn head_rms_norm(&self, x: &mut CpuTensor, w: &CpuWeight, eps: f32, n: usize) {
        let hd = w.data.len();
        let cols = x.cols;
        par::chunks(&mut x.data[..n * cols], hd, n * cols, |_, head| {
            let s = rms_scale(head, eps);
            head.iter_mut().zip(&w.data).for_each(|(h, w)| *h *= s * w);
        });
    }

    fn rope(&self, x: &mut CpuTensor, table: &RopeTable<Self>, positions: &CpuIds, n: usize) {
        let hd = table.head_dim;
        let cols = x.cols;
        par::chunks(&mut x.data[..n * cols], cols, n * cols, |i, row| {
            let pos = positions.data[i] as usize;
            assert!(pos < table.max_positions, "position {pos} is past the RoPE table ({})", table.max_positions);
            let (cos, sin) = (table.cos.row(pos), table.sin.row(pos));
            row.chunks_mut(hd).for_each(|head| rotate(head, cos, sin, table.style));
        });
    }

    fn attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        geometry: &AttnGeometry,
        window: AttnWindow,
        mask: Mask<'_, Self>,
        out: &mut CpuTensor,
    ) {
        let mask = region_mask(mask);
        attention::attention(&q.data, &k.data, &v.data, geometry, window, mask, None, &mut out.data);
    }

    /// Reads the pool's rows in place: no gather.
    fn paged_attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        geometry: &AttnGeometry,
        seq: &PagedSeq<'_>,
        mask: Mask<'_, Self>,
        _scratch: &mut PagedScratch<Self>,
        out: &mut CpuTensor,
    ) {
        let mask = region_mask(mask);
        let (qs, os) = (seq.row * q.cols, seq.row * out.cols);
        attention::attention(&q.data[qs..], &k.data, &v.data, geometry, seq.window(), mask, Some(seq.slots), &mut out.data[os..]);
    }

    fn silu_mul(&self, gate: &CpuTensor, up: &CpuTensor, n: usize, out: &mut CpuTensor) {
        const CHUNK: usize = 4096;
        let len = n * out.cols;
        par::chunks(&mut out.data[..len], CHUNK, len, |i, o| {
            let (g, u) = (&gate.data[i * CHUNK..], &up.data[i * CHUNK..]);
            for ((o, g), u) in o.iter_mut().zip(g).zip(u) {
                *o = g / (1.0 + (-g).exp()) * u;
            }
        });
    }

    fn add(&self, dst: &mut CpuTensor, src: &CpuTensor, n: usize) {
        let len = n * dst.cols;
        dst.data[..len].iter_mut().zip(&src.data[..len]).for_each(|(d, s)| *d += s);
    }

    fn all_reduce(&self, _x: &mut CpuTensor, _n: usize) {}

    fn head_matmul(&self, x: &CpuTensor, w: &CpuWeight, heads: usize, n: usize, out: &mut CpuTensor) {
        latent::head_matmul(x, w, heads, n, out);
    }

    fn mla_attention(
        &self,
        q_lat: &CpuTensor,
        q_pe: &CpuTensor,
        new: (&CpuTensor, &CpuTensor),
        cache: (&mut CpuTensor, &mut CpuTensor),
        geometry: &MlaGeometry,
        table: &SlotTable,
        out: &mut CpuTensor,
    ) {
        latent::mla_attention(q_lat, q_pe, new, cache, geometry, table, out);
    }

    fn moe_route(&self, logits: &CpuTensor, bias: &CpuTensor, routing: &Routing, n: usize, experts: &mut CpuIds, weights: &mut CpuTensor) {
        latent::moe_route(logits, bias, routing, n, experts, weights);
    }

    fn moe_experts(
        &self,
        x: &CpuTensor,
        experts: &CpuIds,
        weights: &CpuTensor,
        per_token: usize,
        w: &Experts<'_, Self>,
        n: usize,
        _scratch: &mut MoeScratch<Self>,
        out: &mut CpuTensor,
    ) {
        latent::moe_experts(x, (experts, weights, per_token), w, n, out);
    }

    fn copy_rows(&self, src: &CpuTensor, src_start: usize, dst: &mut CpuTensor, dst_start: usize, n: usize) {
        assert_eq!(src.cols, dst.cols, "copy_rows: widths differ");
        let c = src.cols;
        write_values(dst.bf16, &mut dst.data[dst_start * c..(dst_start + n) * c], &src.data[src_start * c..(src_start + n) * c]);
    }

    fn copy_cols(&self, src: &CpuTensor, n: usize, dst: &mut CpuTensor, dst_col: usize) {
        assert!(dst_col + src.cols <= dst.cols, "copy_cols: {} + {} > {}", dst_col, src.cols, dst.cols);
        for (i, row) in dst.data.chunks_mut(dst.cols).take(n).enumerate() {
            row[dst_col..dst_col + src.cols].copy_from_slice(src.row(i));
        }
    }

    fn gather_rows(&self, src: &CpuTensor, rows: &[usize], dst: &mut CpuTensor) {
        assert_eq!(src.cols, dst.cols, "gather_rows: widths differ");
        for (i, &r) in rows.iter().enumerate() {
            write_values(dst.bf16, &mut dst.data[i * dst.cols..][..dst.cols], src.row(r));
        }
    }

    fn move_rows(&self, t: &mut CpuTensor, src_rows: &[usize], dst_start: usize) {
        let c = t.cols;
        for (i, &r) in src_rows.iter().enumerate() {
            let d = dst_start + i;
            assert!(r >= d, "move_rows: source row {r} is before destination {d}");
            if r != d {
                t.data.copy_within(r * c..(r + 1) * c, d * c);
            }
        }
    }

    fn argmax(&self, x: &CpuTensor, n: usize, out: &mut CpuIds) {
        for i in 0..n {
            let row = x.row(i);
            let mut best = 0;
            for (j, v) in row.iter().enumerate() {
                if *v > row[best] {
                    best = j;
                }
            }
            out.data[i] = best as i32;
        }
    }

    fn softmax(&self, x: &mut CpuTensor, n: usize, temperature: f32) {
        let c = x.cols;
        par::chunks(&mut x.data[..n * c], c, n * c, |_, row| {
            let max = row.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
            let mut total = 0.0f32;
            for v in row.iter_mut() {
                *v = ((*v - max) / temperature).exp();
                total += *v;
            }
            row.iter_mut().for_each(|v| *v /= total);
        });
    }

    fn topk(&self, x: &CpuTensor, n: usize, k: usize, values: &mut CpuTensor, indices: &mut CpuIds) {
        for i in 0..n {
            // Kept sorted descending; a later index never displaces an equal earlier one.
            let mut best: Vec<(f32, usize)> = Vec::with_capacity(k + 1);
            for (j, &v) in x.row(i).iter().enumerate() {
                if best.len() == k && v <= best[k - 1].0 {
                    continue;
                }
                let at = best.iter().position(|&(b, _)| v > b).unwrap_or(best.len());
                best.insert(at, (v, j));
                best.truncate(k);
            }
            for (slot, (v, j)) in best.into_iter().enumerate() {
                values.data[i * values.cols + slot] = v;
                indices.data[i * k + slot] = j as i32;
            }
        }
    }

    fn pick_ids(&self, src: &CpuIds, stride: usize, map: Option<&CpuIds>, n: usize, dst: &mut CpuIds, at: usize) {
        for (i, d) in dst.data[at..at + n].iter_mut().enumerate() {
            let best = src.data[i * stride];
            *d = map.map_or(best, |m| m.data[best as usize]);
        }
    }

    fn gather_ids(&self, src: &CpuIds, from: &[i32], dst: &mut CpuIds) {
        for (d, &f) in dst.data.iter_mut().zip(from).filter(|(_, &f)| f >= 0) {
            *d = src.data[f as usize];
        }
    }

    fn sample(&self, probs: &CpuTensor, row: usize, excluded: &[u32], coin: f32) -> Result<u32, BackendError> {
        let p = probs.row(row);
        let kept = |j: usize| !excluded.contains(&(j as u32));
        let mass: f32 = p.iter().enumerate().filter(|(j, _)| kept(*j)).map(|(_, v)| v).sum();
        let (mass, keep_all) = if mass > 0.0 { (mass, false) } else { (p.iter().sum(), true) };
        let target = coin * mass;
        let mut acc = 0.0f32;
        let mut last = None;
        for (j, &v) in p.iter().enumerate() {
            if v <= 0.0 || !(keep_all || kept(j)) {
                continue;
            }
            acc += v;
            last = Some(j);
            if target < acc {
                break;
            }
        }
        last.map(|j| j as u32).ok_or_else(|| BackendError::Device(format!("row {row} has no probability mass")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(cols: usize, data: &[f32]) -> CpuTensor {
        CpuBackend.tensor_from(cols, data).unwrap()
    }

    /// A bf16 KV cache holds what a GPU's does: each stored value rounded to the nearest
    /// bf16, ties to even; an f32 cache keeps the values.
    #[test]
    fn a_bf16_kv_cache_rounds_what_it_stores() {
        let values = [1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, -3.0, 0.1];
        let src = t(2, &values);
        let (mut bf16, mut f32) = (CpuBackend.kv_tensor(3, 2, KvDtype::Bf16).unwrap(), CpuBackend.kv_tensor(3, 2, KvDtype::F32).unwrap());
        CpuBackend.copy_rows(&src, 0, &mut bf16, 1, 2);
        CpuBackend.copy_rows(&src, 0, &mut f32, 1, 2);
        assert_eq!(CpuBackend.read_rows(&bf16, 1, 2).unwrap(), [1.0, 1.015625, -3.0, 0.100_097_656]);
        assert_eq!(CpuBackend.read_rows(&f32, 1, 2).unwrap(), values);
        let mut gathered = CpuBackend.kv_tensor(2, 2, KvDtype::Bf16).unwrap();
        CpuBackend.gather_rows(&src, &[1], &mut gathered);
        assert_eq!(CpuBackend.read_rows(&gathered, 0, 1).unwrap(), [-3.0, 0.100_097_656]);
    }

    #[test]
    fn kv_cache_dtype_flag() {
        assert_eq!(KvDtype::from_flag(None), Ok(None));
        assert_eq!(KvDtype::from_flag(Some("auto")), Ok(None));
        assert_eq!(KvDtype::from_flag(Some("bfloat16")), Ok(Some(KvDtype::Bf16)));
        assert_eq!(
            KvDtype::from_flag(Some("fp8_e5m2")),
            Err("--kv-cache-dtype fp8_e5m2: the engine keeps its KV cache in bf16 or f32 (use auto or bf16)".to_string())
        );
    }

    #[test]
    fn topk_breaks_ties_by_lower_index_and_sample_skips_exclusions() {
        let b = CpuBackend;
        let x = t(5, &[0.1, 0.3, 0.3, 0.2, 0.1]);
        let mut vals = b.tensor(1, 3).unwrap();
        let mut idx = b.ids(3).unwrap();
        b.topk(&x, 1, 3, &mut vals, &mut idx);
        assert_eq!(idx.data, vec![1, 2, 3]);
        assert_eq!(vals.data, vec![0.3, 0.3, 0.2]);
        // Excluding 1 and 2 leaves [0.1, 0.2, 0.1] (mass 0.4): coin 0.3 → 0.12 falls in id 3.
        assert_eq!(b.sample(&x, 0, &[1, 2], 0.3).unwrap(), 3);
        assert_eq!(b.sample(&x, 0, &[1, 2], 0.0).unwrap(), 0);
        assert_eq!(b.sample(&x, 0, &[1, 2], 0.99).unwrap(), 4);
        // Everything excluded: the row as is.
        assert_eq!(b.sample(&x, 0, &[0, 1, 2, 3, 4], 0.15).unwrap(), 1);
    }

    #[test]
    fn rope_rotates_pairs_by_style() {
        let b = CpuBackend;
        let (c, s) = (0.6f32, 0.8f32);
        let table = RopeTable::<CpuBackend> {
            cos: t(2, &[1.0, 1.0, c, 1.0]),
            sin: t(2, &[0.0, 0.0, s, 0.0]),
            head_dim: 4,
            style: RopeStyle::NeoX,
            max_positions: 2,
        };
        let mut pos = b.ids(1).unwrap();
        b.write_ids(&mut pos, &[1]);
        let mut x = t(4, &[1.0, 2.0, 3.0, 4.0]);
        b.rope(&mut x, &table, &pos, 1);
        // NeoX pairs (0,2) rotated by (c,s), (1,3) untouched.
        assert_eq!(x.data, vec![1.0 * c - 3.0 * s, 2.0, 3.0 * c + 1.0 * s, 4.0]);
        let table = RopeTable { style: RopeStyle::Interleaved, ..table };
        let mut x = t(4, &[1.0, 2.0, 3.0, 4.0]);
        b.rope(&mut x, &table, &pos, 1);
        assert_eq!(x.data, vec![1.0 * c - 2.0 * s, 2.0 * c + 1.0 * s, 3.0, 4.0]);
    }

    #[test]
    fn matmul_residual_adds_the_product_into_the_residual() {
        let b = CpuBackend;
        let mut h = t(2, &[1.0, 1.0]);
        let x = t(2, &[2.0, -2.0]);
        let mut delta = b.tensor(1, 2).unwrap();
        let identity = CpuWeight { data: vec![1.0, 0.0, 0.0, 1.0], shape: vec![2, 2] };
        b.matmul_residual(&x, &identity, 1, &mut delta, &mut h);
        assert_eq!(h.data, vec![3.0, -1.0]);
    }
}
