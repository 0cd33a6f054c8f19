//! Dequantization of ggml blocks to f32, bit-exact with ggml's reference `dequantize_row_*`
//! and gguf-py's `gguf.quants.dequantize` (same operation order, no fused multiply-add).

use rayon::prelude::*;

use super::types::GgmlType;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DequantError {
    #[error("type {0} cannot be dequantized (supported: {list})", list = SUPPORTED.map(GgmlType::name).join(", "))]
    Unsupported(GgmlType),
    #[error("{ty}: {bytes} bytes do not hold {elements} elements")]
    SizeMismatch { ty: GgmlType, bytes: usize, elements: usize },
}

pub const SUPPORTED: [GgmlType; 9] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Bf16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q6K,
];

pub fn is_supported(ty: GgmlType) -> bool {
    SUPPORTED.contains(&ty)
}

/// Dequantize `data` (whole blocks of `ty`) into `out`, whose length is the element count.
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), DequantError> {
    let block: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => f32_block,
        GgmlType::F16 => f16_block,
        GgmlType::Bf16 => bf16_block,
        GgmlType::Q4_0 => q4_0,
        GgmlType::Q4_1 => q4_1,
        GgmlType::Q5_0 => q5_0,
        GgmlType::Q8_0 => q8_0,
        GgmlType::Q4K => q4_k,
        GgmlType::Q6K => q6_k,
        other => return Err(DequantError::Unsupported(other)),
    };
    let (elems, bytes) = (ty.block_elems() as usize, ty.block_bytes() as usize);
    if out.len() % elems != 0 || out.len() / elems * bytes != data.len() {
        return Err(DequantError::SizeMismatch { ty, bytes: data.len(), elements: out.len() });
    }
    // Jobs of a few thousand elements: big enough to amortise rayon, small enough to balance.
    let blocks_per_job = (4096 / elems).max(1);
    out.par_chunks_mut(elems * blocks_per_job).zip(data.par_chunks(bytes * blocks_per_job)).for_each(|(o, d)| {
        for (ob, db) in o.chunks_exact_mut(elems).zip(d.chunks_exact(bytes)) {
            block(db, ob);
        }
    });
    Ok(())
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

fn f32_block(b: &[u8], out: &mut [f32]) {
    out[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
}

fn f16_block(b: &[u8], out: &mut [f32]) {
    out[0] = f16_at(b, 0);
}

fn bf16_block(b: &[u8], out: &mut [f32]) {
    out[0] = half::bf16::from_le_bytes([b[0], b[1]]).to_f32();
}

/// 32 elements: f16 scale, 16 bytes of 4-bit quants (low nibbles first), offset -8.
fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        out[j] = (i32::from(q & 0x0F) - 8) as f32 * d;
        out[j + 16] = (i32::from(q >> 4) - 8) as f32 * d;
    }
}

/// 32 elements: f16 scale and minimum, 16 bytes of 4-bit quants.
fn q4_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (j, &q) in b[4..20].iter().enumerate() {
        out[j] = d * f32::from(q & 0x0F) + m;
        out[j + 16] = d * f32::from(q >> 4) + m;
    }
}

/// 32 elements: f16 scale, 32 fifth bits, 16 bytes of low nibbles; offset -16.
fn q5_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for (j, &q) in b[6..22].iter().enumerate() {
        let hi0 = ((qh >> j) & 1) << 4;
        let hi1 = ((qh >> (j + 16)) & 1) << 4;
        out[j] = ((u32::from(q & 0x0F) | hi0) as i32 - 16) as f32 * d;
        out[j + 16] = ((u32::from(q >> 4) | hi1) as i32 - 16) as f32 * d;
    }
}

/// 32 elements: f16 scale, 32 signed bytes.
fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = f32::from(q as i8) * d;
    }
}

/// Q4_K's 6-bit scale and minimum of sub-block `j` (0..8), packed in 12 bytes.
fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// 256 elements in 8 sub-blocks of 32: f16 super-scale and super-minimum, 12 bytes of
/// 6-bit sub-block scales/minimums, 128 bytes of 4-bit quants (each 32-byte run holds two
/// sub-blocks: low nibbles, then high nibbles).
fn q4_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    for (i, (qs, y)) in b[16..144].chunks_exact(32).zip(out.chunks_exact_mut(64)).enumerate() {
        let (sc1, m1) = scale_min_k4(2 * i, scales);
        let (sc2, m2) = scale_min_k4(2 * i + 1, scales);
        let (d1, min1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, min2) = (d * f32::from(sc2), dmin * f32::from(m2));
        for (l, &q) in qs.iter().enumerate() {
            y[l] = d1 * f32::from(q & 0x0F) - min1;
            y[l + 32] = d2 * f32::from(q >> 4) - min2;
        }
    }
}

/// 256 elements in 16 groups of 16: 128 bytes of low nibbles, 64 bytes of 2-bit highs,
/// 16 signed 8-bit group scales, f16 super-scale; offset -32.
fn q6_k(b: &[u8], out: &mut [f32]) {
    let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    for (n, y) in out.chunks_exact_mut(128).enumerate() {
        let (ql, qh, sc) = (&ql[64 * n..], &qh[32 * n..], &sc[8 * n..]);
        let scale = |k: usize| d * f32::from(sc[k] as i8);
        for l in 0..32 {
            let is = l / 16;
            let q = |lo: u8, shift: u8| (i32::from(lo | (((qh[l] >> shift) & 3) << 4)) - 32) as f32;
            y[l] = scale(is) * q(ql[l] & 0x0F, 0);
            y[l + 32] = scale(is + 2) * q(ql[l + 32] & 0x0F, 2);
            y[l + 64] = scale(is + 4) * q(ql[l] >> 4, 4);
            y[l + 96] = scale(is + 6) * q(ql[l + 32] >> 4, 6);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Hand-built blocks with known values. Scales are powers of two (exact in f16), so
    //! every expected value is exact.
    use super::*;
    use half::f16;

    fn run(ty: GgmlType, block: &[u8]) -> Vec<f32> {
        let mut out = vec![0.0; ty.block_elems() as usize];
        dequantize(ty, block, &mut out).unwrap();
        out
    }

    fn h(x: f32) -> [u8; 2] {
        f16::from_f32(x).to_le_bytes()
    }

    /// 4-bit quants `q[0..32]` packed the 32-element way: element j low nibble, j+16 high.
    fn pack_nibbles(q: &[u8; 32]) -> Vec<u8> {
        (0..16).map(|j| q[j] | (q[j + 16] << 4)).collect()
    }

    fn ramp<const N: usize>(modulo: u8) -> [u8; N] {
        std::array::from_fn(|i| (i as u8) % modulo)
    }

    #[test]
    fn q4_0_block() {
        let q: [u8; 32] = ramp(16);
        let block = [&h(0.5)[..], &pack_nibbles(&q)].concat();
        let out = run(GgmlType::Q4_0, &block);
        assert_eq!(&out[..4], &[-4.0, -3.5, -3.0, -2.5]);
        assert_eq!(out[15], 3.5);
        assert_eq!(out, q.iter().map(|&v| (v as f32 - 8.0) * 0.5).collect::<Vec<_>>());
    }

    #[test]
    fn q4_1_block() {
        let q: [u8; 32] = ramp(16);
        let block = [&h(0.25)[..], &h(-1.0), &pack_nibbles(&q)].concat();
        let out = run(GgmlType::Q4_1, &block);
        assert_eq!(&out[..3], &[-1.0, -0.75, -0.5]);
        assert_eq!(out, q.iter().map(|&v| v as f32 * 0.25 - 1.0).collect::<Vec<_>>());
    }

    #[test]
    fn q5_0_block_uses_the_fifth_bit() {
        let q: [u8; 32] = ramp(32); // 0..31: elements 16.. need the fifth bit
        let qh: u32 = (0..32).filter(|&j| q[j] & 0x10 != 0).map(|j| 1u32 << j).sum();
        let low: [u8; 32] = std::array::from_fn(|j| q[j] & 0x0F);
        let block = [&h(2.0)[..], &qh.to_le_bytes(), &pack_nibbles(&low)].concat();
        let out = run(GgmlType::Q5_0, &block);
        assert_eq!((out[0], out[16], out[31]), (-32.0, 0.0, 30.0));
        assert_eq!(out, q.iter().map(|&v| (v as f32 - 16.0) * 2.0).collect::<Vec<_>>());
    }

    #[test]
    fn q8_0_block() {
        let q: [i8; 32] = std::array::from_fn(|i| (i as i8 - 16) * 8);
        let block = [&h(0.125)[..], &q.map(|v| v as u8)].concat();
        let out = run(GgmlType::Q8_0, &block);
        assert_eq!((out[0], out[31]), (-16.0, 15.0));
    }

    /// Pack eight 6-bit (scale, min) pairs the way `scale_min_k4` reads them.
    fn pack_k4_scales(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
        let mut s = [0u8; 12];
        for j in 0..4 {
            s[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
            s[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
            s[j + 8] = (sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4);
        }
        s
    }

    #[test]
    fn q4_k_block() {
        // Scales/mins above 15 exercise the high bits stored in bytes 0..8.
        let sc = [1, 2, 3, 4, 17, 33, 63, 5];
        let m = [0, 1, 2, 3, 20, 40, 62, 7];
        let q: [u8; 256] = std::array::from_fn(|i| ((i * 7) % 16) as u8);
        let mut qs = vec![0u8; 128];
        for i in 0..4 {
            for l in 0..32 {
                qs[32 * i + l] = q[64 * i + l] | (q[64 * i + 32 + l] << 4);
            }
        }
        let block = [&h(0.5)[..], &h(0.25), &pack_k4_scales(sc, m), &qs].concat();
        let out = run(GgmlType::Q4K, &block);
        let expect: Vec<f32> = (0..256).map(|i| 0.5 * sc[i / 32] as f32 * q[i] as f32 - 0.25 * m[i / 32] as f32).collect();
        assert_eq!(out, expect);
        // Element 160 is sub-block 5: scale 33, min 40, quant (160*7)%16 = 0.
        assert_eq!(out[160], -10.0);
    }

    #[test]
    fn q6_k_block() {
        let q: [u8; 256] = std::array::from_fn(|i| ((i * 5) % 64) as u8);
        let sc: [i8; 16] = std::array::from_fn(|g| g as i8 - 8);
        let mut ql = [0u8; 128];
        let mut qh = [0u8; 64];
        for n in 0..2 {
            for l in 0..32 {
                let base = 128 * n;
                let [a, b, c, d] = [q[base + l], q[base + l + 32], q[base + l + 64], q[base + l + 96]];
                ql[64 * n + l] = (a & 0x0F) | ((c & 0x0F) << 4);
                ql[64 * n + l + 32] = (b & 0x0F) | ((d & 0x0F) << 4);
                qh[32 * n + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((d >> 4) << 6);
            }
        }
        let block = [&ql[..], &qh, &sc.map(|s| s as u8), &h(0.5)].concat();
        let out = run(GgmlType::Q6K, &block);
        let expect: Vec<f32> = (0..256).map(|i| 0.5 * sc[i / 16] as f32 * (q[i] as f32 - 32.0)).collect();
        assert_eq!(out, expect);
        assert_eq!(out[0], 0.5 * -8.0 * -32.0);
    }

    #[test]
    fn plain_types() {
        let f32s = [1.5f32, -2.25].map(f32::to_le_bytes).concat();
        let mut out = [0.0; 2];
        dequantize(GgmlType::F32, &f32s, &mut out).unwrap();
        assert_eq!(out, [1.5, -2.25]);
        dequantize(GgmlType::F16, &[h(0.1), h(-3.0)].concat(), &mut out).unwrap();
        assert_eq!(out, [f16::from_f32(0.1).to_f32(), -3.0]);
        // bf16 0x3FC0 = 1.5, 0xC010 = -2.25
        dequantize(GgmlType::Bf16, &[0xC0, 0x3F, 0x10, 0xC0], &mut out).unwrap();
        assert_eq!(out, [1.5, -2.25]);
    }

    #[test]
    fn wrong_sizes_and_unsupported_types_are_errors() {
        let mut out = [0.0; 32];
        let e = dequantize(GgmlType::Q8_0, &[0; 33], &mut out).unwrap_err();
        assert_eq!(e.to_string(), "Q8_0: 33 bytes do not hold 32 elements");
        let e = dequantize(GgmlType::Q5_1, &[0; 24], &mut out).unwrap_err();
        assert!(e.to_string().starts_with("type Q5_1 cannot be dequantized (supported: F32, F16, BF16, Q4_0"), "{e}");
    }
}
