//! Accepting draft tokens against the target (eagle3_spec.md §4).
//!
//! Greedy (`VerifyTreeGreedy`): walk from the root; at each node take the first child whose
//! token is the target's argmax there; the target's argmax at the last accepted node is the
//! bonus token. The output is exactly target-only greedy decoding.
//!
//! Sampling (`TreeSpeculativeSamplingTargetOnly` with thresholds 1): at each node one coin
//! `u`; children are tried in order with `acc += p(child)` and the first with `u < acc` is
//! accepted. This is inverse-CDF sampling from the target's `p` over the children; when no
//! child takes the coin, the final token is drawn from `p` with the tried children removed.
//! Either way every emitted token is distributed exactly as the target's `p`.

use crate::engine::tree::Tree;

/// The rule that accepts a child given the node's coin and the probability mass of the
/// children tried so far (this one included). `lossless` is the only rule the engine uses;
/// tests substitute broken ones to show the distribution test can fail.
pub type AcceptRule = fn(coin: f32, prob_acc: f32) -> bool;

pub fn lossless(coin: f32, prob_acc: f32) -> bool {
    coin < prob_acc
}

/// The accepted path (node 0 first) and where the next token comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct Walk {
    pub path: Vec<usize>,
    /// Tokens tried and rejected at the last node of the path (removed from its distribution).
    pub rejected: Vec<u32>,
}

impl Walk {
    pub fn last(&self) -> usize {
        *self.path.last().expect("a path starts at the root")
    }
}

/// Greedy acceptance; `argmax[i]` is the target's argmax at node `i`. Returns the path and
/// the bonus token.
pub fn greedy(tree: &Tree, argmax: &[u32]) -> (Walk, u32) {
    let mut path = vec![0];
    let mut cur = 0;
    while let Some(child) = tree.children(cur).find(|&c| tree.tokens[c] == argmax[cur]) {
        path.push(child);
        cur = child;
    }
    (Walk { path, rejected: Vec::new() }, argmax[cur])
}

/// Sampling acceptance. `child_prob[i]` is the target's probability of node `i`'s token at its
/// parent (entry 0 unused); `coins[i]` is node `i`'s uniform coin.
pub fn sample(tree: &Tree, child_prob: &[f32], coins: &[f32], rule: AcceptRule) -> Walk {
    let mut path = vec![0];
    let mut cur = 0;
    loop {
        let mut acc = 0.0f32;
        let mut rejected = Vec::new();
        let mut next = None;
        for c in tree.children(cur) {
            acc += child_prob[c];
            if rule(coins[cur], acc) {
                next = Some(c);
                break;
            }
            rejected.push(tree.tokens[c]);
        }
        match next {
            Some(c) => {
                path.push(c);
                cur = c;
            }
            None => return Walk { path, rejected },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> Tree {
        // root(7) → 10, 11; 10 → 12; 11 → 14.
        Tree { tokens: vec![7, 10, 11, 12, 14], parent: vec![None, Some(0), Some(0), Some(1), Some(2)], depth: vec![0, 1, 1, 2, 2] }
    }

    #[test]
    fn greedy_follows_matching_children_and_adds_the_bonus() {
        // Target argmax at root is 11 (second child), at node 2 is 14, at node 4 is 99.
        let (w, bonus) = greedy(&tree(), &[11, 0, 14, 0, 99]);
        assert_eq!((w.path, bonus), (vec![0, 2, 4], 99));
        // Nothing matches at the root: only the bonus.
        let (w, bonus) = greedy(&tree(), &[5, 0, 0, 0, 0]);
        assert_eq!((w.path, bonus), (vec![0], 5));
    }

    #[test]
    fn sampling_accumulates_sibling_mass() {
        let probs = [0.0, 0.2, 0.3, 0.5, 0.9];
        // Root coin 0.4: 10 (acc 0.2) rejected, 11 (acc 0.5) accepted; node 2 coin 0.95 > 0.9.
        let w = sample(&tree(), &probs, &[0.4, 0.0, 0.95, 0.0, 0.0], lossless);
        assert_eq!(w, Walk { path: vec![0, 2], rejected: vec![14] });
        // Root coin 0.6 > 0.5: both children rejected.
        let w = sample(&tree(), &probs, &[0.6, 0.0, 0.0, 0.0, 0.0], lossless);
        assert_eq!(w, Walk { path: vec![0], rejected: vec![10, 11] });
    }
}
