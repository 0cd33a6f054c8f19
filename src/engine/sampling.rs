//! A request's sampling settings, and top-k / top-p on the host: the scheduler reads a
//! verify step's probability rows back only for a request that filters them (otherwise the
//! device's `softmax`, `read_elements` and `sample` do it all, as in the batch-1 path).

/// Per request. Temperature 0 is greedy; top_k 0 and top_p 1 filter nothing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: u32,
    /// The RNG seed; `None` takes the request's id.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams { temperature: 0.0, top_p: 1.0, top_k: 0, seed: None }
    }
}

impl SamplingParams {
    /// Whether top-k or top-p removes anything.
    pub fn filters(&self) -> bool {
        self.top_k > 0 || self.top_p < 1.0
    }
}

/// Refuse settings no distribution comes from.
pub fn check(p: &SamplingParams) -> Result<(), String> {
    if !p.temperature.is_finite() || p.temperature < 0.0 {
        return Err(format!("temperature must be a finite number of at least 0, not {}", p.temperature));
    }
    if !(p.top_p > 0.0 && p.top_p <= 1.0) {
        return Err(format!("top_p must be in (0, 1], not {}", p.top_p));
    }
    Ok(())
}

/// `probs` with only the `top_k` most likely tokens (all when 0) and, of those, the
/// smallest most-likely set whose mass reaches `top_p`; renormalised. Ties keep the lower id.
pub fn filtered(probs: &[f32], top_k: u32, top_p: f32) -> Vec<f32> {
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    let k = if top_k == 0 { probs.len() } else { (top_k as usize).min(probs.len()) };
    let mut kept = 0;
    let mut mass = 0.0f32;
    let total: f32 = order[..k].iter().map(|&i| probs[i]).sum();
    for &i in &order[..k] {
        kept += 1;
        mass += probs[i];
        if mass >= top_p * total {
            break;
        }
    }
    let mut out = vec![0.0; probs.len()];
    for &i in &order[..kept] {
        out[i] = probs[i] / mass;
    }
    out
}

/// Inverse-CDF sampling at `coin` in `[0, 1)` from `probs` with `excluded` removed and the
/// rest renormalised (`Backend::sample` on the host); the row as it is when nothing is left.
pub fn sample_excluding(probs: &[f32], excluded: &[u32], coin: f32) -> u32 {
    let kept = |i: usize| !excluded.contains(&(i as u32));
    let left: f32 = probs.iter().enumerate().filter(|(i, _)| kept(*i)).map(|(_, p)| p).sum();
    let (use_all, total) = if left > 0.0 { (false, left) } else { (true, probs.iter().sum()) };
    let target = coin * total;
    let mut acc = 0.0f32;
    let mut last = 0;
    for (i, &p) in probs.iter().enumerate().filter(|(i, _)| use_all || kept(*i)) {
        if p <= 0.0 {
            continue;
        }
        acc += p;
        last = i;
        if target < acc {
            return i as u32;
        }
    }
    last as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: Vec<f32>, want: &[f32]) {
        assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6), "{got:?} vs {want:?}");
    }

    #[test]
    fn top_k_and_top_p_keep_the_most_likely_tokens_renormalised() {
        let p = [0.1, 0.4, 0.2, 0.3];
        close(filtered(&p, 2, 1.0), &[0.0, 0.4 / 0.7, 0.0, 0.3 / 0.7]);
        // top_p 0.6: 0.4, then 0.3 reaches 0.7 >= 0.6.
        close(filtered(&p, 0, 0.6), &[0.0, 0.4 / 0.7, 0.0, 0.3 / 0.7]);
        // top_p 0.4 keeps the top token alone.
        close(filtered(&p, 0, 0.4), &[0.0, 1.0, 0.0, 0.0]);
        close(filtered(&p, 0, 1.0), &p);
    }

    #[test]
    fn sampling_skips_excluded_and_empty_tokens() {
        let p = [0.0, 0.5, 0.25, 0.25];
        assert_eq!(sample_excluding(&p, &[], 0.1), 1);
        assert_eq!(sample_excluding(&p, &[], 0.6), 2);
        assert_eq!(sample_excluding(&p, &[1], 0.1), 2);
        assert_eq!(sample_excluding(&p, &[1], 0.9), 3);
        // Everything excluded: the row as it is.
        assert_eq!(sample_excluding(&p, &[1, 2, 3], 0.9), 3);
        assert!(check(&SamplingParams { top_p: 0.0, ..Default::default() }).is_err());
        assert!(check(&SamplingParams { temperature: f32::NAN, ..Default::default() }).is_err());
    }
}
