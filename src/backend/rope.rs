//! RoPE frequencies with the scalings SGLang implements for Llama-family models, and the
//! cos/sin tables every backend uploads at load (so the kernels only index them).

use std::f64::consts::PI;

use super::{Backend, BackendError, RopeStyle, RopeTable};

/// A rope scaling rule, with every default already resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (all frequencies divided by it).
    Linear {
        factor: f64,
    },
    /// Llama 3.1: low frequencies divided by `factor`, high ones kept, a smooth band between.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_positions: f64,
    },
    /// YaRN, as SGLang's `YaRNScalingRotaryEmbedding`: a ramp between extrapolated and
    /// interpolated frequencies, and cos/sin scaled by `mscale`.
    Yarn {
        factor: f64,
        original_max_positions: f64,
        beta_fast: f64,
        beta_slow: f64,
        mscale: f64,
    },
}

/// YaRN's magnitude correction `0.1 · m · ln(s) + 1` (1 for `s ≤ 1`).
pub fn yarn_mscale(scale: f64, m: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * m * scale.ln() + 1.0
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RopeParams {
    pub theta: f64,
    pub head_dim: usize,
    pub scaling: RopeScaling,
    pub style: RopeStyle,
}

impl RopeParams {
    /// The `head_dim / 2` inverse frequencies after scaling.
    pub fn inv_freq(&self) -> Vec<f64> {
        let d = self.head_dim as f64;
        let base: Vec<f64> = (0..self.head_dim / 2).map(|i| self.theta.powf(-((2 * i) as f64) / d)).collect();
        match self.scaling {
            RopeScaling::None => base,
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_positions } => {
                let low_wavelen = original_max_positions / low_freq_factor;
                let high_wavelen = original_max_positions / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (original_max_positions / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
            RopeScaling::Yarn { factor, original_max_positions, beta_fast, beta_slow, .. } => {
                let correction_dim = |rotations: f64| d * (original_max_positions / (rotations * 2.0 * PI)).ln() / (2.0 * self.theta.ln());
                let low = correction_dim(beta_fast).floor().max(0.0);
                let mut high = correction_dim(beta_slow).ceil().min(d - 1.0);
                if high == low {
                    high += 0.001;
                }
                base.iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrapolate = 1.0 - ramp;
                        (f / factor) * (1.0 - extrapolate) + f * extrapolate
                    })
                    .collect()
            }
        }
    }

    /// The factor cos and sin are multiplied by.
    pub fn attention_factor(&self) -> f64 {
        match self.scaling {
            RopeScaling::Yarn { mscale, .. } => mscale,
            _ => 1.0,
        }
    }

    /// Host-side `(cos, sin)` rows for positions `0 .. max_positions`, each `head_dim / 2` wide.
    pub fn cos_sin(&self, max_positions: usize) -> (Vec<f32>, Vec<f32>) {
        let inv = self.inv_freq();
        let m = self.attention_factor();
        let mut cos = Vec::with_capacity(max_positions * inv.len());
        let mut sin = Vec::with_capacity(max_positions * inv.len());
        for p in 0..max_positions {
            for f in &inv {
                let angle = p as f64 * f;
                cos.push((angle.cos() * m) as f32);
                sin.push((angle.sin() * m) as f32);
            }
        }
        (cos, sin)
    }

    pub fn table<B: Backend>(&self, backend: &B, max_positions: usize) -> Result<RopeTable<B>, BackendError> {
        let (cos, sin) = self.cos_sin(max_positions);
        let half = self.head_dim / 2;
        Ok(RopeTable {
            cos: backend.tensor_from(half, &cos)?,
            sin: backend.tensor_from(half, &sin)?,
            head_dim: self.head_dim,
            style: self.style,
            max_positions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(theta: f64, scaling: RopeScaling) -> RopeParams {
        RopeParams { theta, head_dim: 128, scaling, style: RopeStyle::NeoX }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1e-300)
    }

    #[test]
    fn llama3_keeps_high_divides_low_and_blends_the_band() {
        // Llama-3.1-8B: theta 500000, factor 8, low 1, high 4, original 8192.
        let p = params(
            500000.0,
            RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_positions: 8192.0 },
        );
        let inv = p.inv_freq();
        let plain = |i: i32| 500000f64.powf(-(2 * i) as f64 / 128.0);
        // Wavelength 2π·500000^(i/64): below 2048 for i ≤ 28, above 8192 for i ≥ 35.
        assert_eq!(inv[0], 1.0);
        assert!(close(inv[28], plain(28)));
        assert!(close(inv[35], plain(35) / 8.0));
        assert!(close(inv[63], plain(63) / 8.0));
        // i = 30: wavelen = 2π/plain(30) ≈ 2948.30; smooth = (8192/2948.30 - 1) / 3 ≈ 0.592849.
        let wavelen = 2.0 * PI / plain(30);
        assert!((wavelen - 2948.30).abs() < 0.01, "{wavelen}");
        let smooth = (8192.0 / wavelen - 1.0) / 3.0;
        assert!((smooth - 0.592849).abs() < 1e-6, "{smooth}");
        assert!(close(inv[30], (1.0 - smooth) * plain(30) / 8.0 + smooth * plain(30)));
    }

    #[test]
    fn yarn_ramps_between_extrapolation_and_interpolation() {
        // Qwen2.5 long-context recipe: theta 1e6, factor 4, original 32768.
        let p = params(
            1e6,
            RopeScaling::Yarn {
                factor: 4.0,
                original_max_positions: 32768.0,
                beta_fast: 32.0,
                beta_slow: 1.0,
                mscale: yarn_mscale(4.0, 1.0),
            },
        );
        let inv = p.inv_freq();
        let plain = |i: usize| 1e6f64.powf(-((2 * i) as f64) / 128.0);
        // Correction dims: 128·ln(32768/(32·2π))/(2·ln 1e6) = 23.60 → 23; for 1 rotation 39.65 → 40.
        assert!(close(inv[23], plain(23)));
        assert!(close(inv[40], plain(40) / 4.0));
        let ramp = (30.0 - 23.0) / (40.0 - 23.0);
        assert!(close(inv[30], plain(30) / 4.0 * ramp + plain(30) * (1.0 - ramp)));
        assert!((p.attention_factor() - 1.138_629_436_111_989).abs() < 1e-12);
        let (cos, sin) = p.cos_sin(3);
        // Position 0: cos = mscale, sin = 0; position 2, i = 0: angle 2.
        assert_eq!(cos[0], 1.138_629_4_f32);
        assert_eq!(sin[0], 0.0);
        assert!((cos[128] as f64 - 2f64.cos() * 1.138_629_436).abs() < 1e-6);
    }

    #[test]
    fn linear_and_none() {
        let none = params(10000.0, RopeScaling::None).inv_freq();
        let lin = params(10000.0, RopeScaling::Linear { factor: 2.0 }).inv_freq();
        assert!(close(none[1], 10000f64.powf(-2.0 / 128.0)));
        assert!(close(lin[1], none[1] / 2.0));
    }
}
