//! DeepSeek-V3's `noaux_tc` router, as transformers' `DeepseekV3MoE.route_tokens_to_experts`:
//! sigmoid scores; the correction bias added only to choose; each group scored by the sum of
//! its two best biased scores; the best `topk_group` groups kept (the rest scored 0, not
//! minus infinity, as the reference masks them); the top `num_experts_per_tok` experts of
//! those; their weights the unbiased scores, normalised when `norm_topk_prob`, times
//! `routed_scaling_factor`.

use crate::backend::latent::Routing;

/// One token's experts and their weights, best first.
pub fn route(m: &Routing, logits: &[f32], bias: &[f32]) -> Vec<(usize, f32)> {
    let scores: Vec<f32> = logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect();
    let choice: Vec<f32> = scores.iter().zip(bias).map(|(s, b)| s + b).collect();
    let group_size = m.experts / m.groups;
    let group_scores: Vec<f32> = choice.chunks_exact(group_size).map(|g| top_k(g, 2).into_iter().map(|i| g[i]).sum()).collect();
    let groups = top_k(&group_scores, m.topk_groups);
    let masked: Vec<f32> = choice.iter().enumerate().map(|(e, &c)| if groups.contains(&(e / group_size)) { c } else { 0.0 }).collect();
    let chosen = top_k(&masked, m.per_token);
    let total: f32 = chosen.iter().map(|&e| scores[e]).sum();
    let norm = if m.norm_topk_prob { total + 1e-20 } else { 1.0 };
    chosen.into_iter().map(|e| (e, scores[e] / norm * m.routed_scaling_factor)).collect()
}

/// The indices of the `k` largest values, largest first (ties to the lower index).
fn top_k(values: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
    order.truncate(k);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moe(groups: usize, topk_groups: usize, norm: bool) -> Routing {
        Routing { experts: 8, per_token: 2, groups, topk_groups, norm_topk_prob: norm, routed_scaling_factor: 2.0 }
    }

    fn logit(p: f32) -> f32 {
        (p / (1.0 - p)).ln()
    }

    #[test]
    fn the_bias_chooses_and_the_scores_weigh() {
        // Expert 0 scores highest, but expert 5's bias makes it the choice over expert 0's
        // neighbour; the weights stay the sigmoid scores, not the biased ones.
        let logits: Vec<f32> = [0.9, 0.6, 0.1, 0.1, 0.2, 0.5, 0.1, 0.1].map(logit).to_vec();
        let bias = [0.0, 0.0, 0.0, 0.0, 0.0, 0.3, 0.0, 0.0];
        let r = route(&moe(1, 1, false), &logits, &bias);
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), [0, 5]);
        assert!((r[0].1 - 1.8).abs() < 1e-5 && (r[1].1 - 1.0).abs() < 1e-5, "{r:?}");
        let normed = route(&moe(1, 1, true), &logits, &bias);
        assert!((normed[0].1 - 2.0 * 0.9 / 1.4).abs() < 1e-5, "{normed:?}");
    }

    #[test]
    fn groups_are_scored_by_their_top_two_and_the_rest_count_zero() {
        // Groups of 2: {0,1} sums 0.9+0.1, {2,3} 0.55+0.55, {4,5} 0.6+0.6 (the best),
        // {6,7} 0.05+0.05. One group kept: {4,5}, though expert 0 alone scores higher.
        let logits: Vec<f32> = [0.9, 0.1, 0.55, 0.55, 0.6, 0.6, 0.05, 0.05].map(logit).to_vec();
        let r = route(&moe(4, 1, false), &logits, &[0.0; 8]);
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), [4, 5]);
        // A negative biased score in the one kept group loses to the masked experts' 0
        // (ties go to the lower index).
        let logits: Vec<f32> = [0.3, 0.1, 0.2, 0.2, 0.95, 0.5, 0.1, 0.1].map(logit).to_vec();
        let bias = [0.0, 0.0, 0.0, 0.0, 0.0, -0.7, 0.0, 0.0];
        let r = route(&moe(4, 1, false), &logits, &bias);
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), [4, 0]);
    }
}
