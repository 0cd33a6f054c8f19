//! Draft trees, built as SGLang builds them (`eagle_worker.draft_forward`,
//! `select_top_k_tokens`, `organize_draft_results`, `build_tree_kernel_efficient`).
//!
//! With `steps` S, `topk` K and `draft_tokens` N: the drafter's top-K after the root are the
//! first level; each of S-1 draft forwards expands the K frontier tokens into K·K children
//! scored by the product of probabilities along the path, and keeps the best K as the next
//! frontier. Of all K + (S-1)·K² candidates the best N-1 (ties to the earlier one) become
//! the tree, numbered in candidate order (so parents come before children), under node 0,
//! the root. K = 1 gives a chain of S tokens.

use crate::backend::Backend;
use crate::engine::drafter::{Candidate, Drafter};
use crate::engine::EngineError;

/// Tree shape knobs, SGLang's `--speculative-num-steps/-eagle-topk/-num-draft-tokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeShape {
    pub steps: usize,
    pub topk: usize,
    pub draft_tokens: usize,
}

impl TreeShape {
    /// Candidates the drafting produces: K + (S-1)·K².
    pub fn candidates(&self) -> usize {
        self.topk + self.steps.saturating_sub(1) * self.topk * self.topk
    }

    /// Scratch slots a draft tree occupies in the drafter's cache.
    pub fn draft_slots(&self) -> usize {
        self.steps.saturating_sub(1) * self.topk
    }

    pub fn is_chain(&self) -> bool {
        self.topk == 1
    }
}

/// A verify tree: node 0 is the root (the last committed token, not yet in the target's KV).
#[derive(Clone, Debug, PartialEq)]
pub struct Tree {
    pub tokens: Vec<u32>,
    pub parent: Vec<Option<usize>>,
    pub depth: Vec<usize>,
}

impl Tree {
    pub fn root(token: u32) -> Tree {
        Tree { tokens: vec![token], parent: vec![None], depth: vec![0] }
    }

    /// `root` then `drafts`, each the child of the one before.
    pub fn chain(root: u32, drafts: &[u32]) -> Tree {
        let n = drafts.len() + 1;
        Tree { tokens: [&[root], drafts].concat(), parent: (0..n).map(|i| i.checked_sub(1)).collect(), depth: (0..n).collect() }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Children of `node` in ascending node order (SGLang's sibling order).
    pub fn children(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        (node + 1..self.len()).filter(move |&c| self.parent[c] == Some(node))
    }

    /// Row-major `[N, N]`: node `i` sees node `j` when `j` is `i` or one of its ancestors.
    pub fn mask(&self) -> Vec<i32> {
        let n = self.len();
        let mut m = vec![0; n * n];
        for i in 0..n {
            let mut cur = Some(i);
            while let Some(j) = cur {
                m[i * n + j] = 1;
                cur = self.parent[j];
            }
        }
        m
    }

    /// Positions in the target: `base + depth`.
    pub fn positions(&self, base: usize) -> Vec<usize> {
        self.depth.iter().map(|d| base + d).collect()
    }

    /// Whether the mask is plain causal (a chain), so a backend can skip the explicit mask.
    pub fn is_chain(&self) -> bool {
        (1..self.len()).all(|i| self.parent[i] == Some(i - 1))
    }
}

/// One candidate of the drafting, in SGLang's flat score-list order.
#[derive(Clone, Copy, Debug)]
struct Scored {
    token: u32,
    score: f32,
    parent: Option<usize>,
}

/// A frontier token: the candidate it is, its path score, and the draft-tree scratch slots of
/// its ancestors (its own slot is added when it is drafted).
#[derive(Clone, Debug)]
struct Frontier {
    cand: usize,
    score: f32,
    slots: Vec<usize>,
    /// Row of the previous draft forward whose hidden state it continues.
    hidden_row: usize,
}

/// Grow a tree from the drafter's first level `head` (top-K after the root).
pub fn draft<B: Backend>(
    drafter: &mut dyn Drafter<B>,
    root: u32,
    root_position: usize,
    head: Vec<Candidate>,
    shape: TreeShape,
) -> Result<Tree, EngineError> {
    let k = shape.topk;
    let mut cands: Vec<Scored> = Vec::with_capacity(shape.candidates());
    let mut frontier: Vec<Frontier> = Vec::with_capacity(k);
    for c in head.into_iter().take(k) {
        frontier.push(Frontier { cand: cands.len(), score: c.prob, slots: Vec::new(), hidden_row: 0 });
        cands.push(Scored { token: c.token, score: c.prob, parent: None });
    }
    for step in 1..shape.steps {
        // This level's tokens take slots (step-1)·K + b of the draft scratch region.
        let region = step * k;
        let mut mask = vec![0i32; frontier.len() * region];
        for (b, f) in frontier.iter_mut().enumerate() {
            f.slots.push((step - 1) * k + b);
            for &s in &f.slots {
                mask[b * region + s] = 1;
            }
        }
        let tokens: Vec<u32> = frontier.iter().map(|f| cands[f.cand].token).collect();
        let parents: Vec<usize> = frontier.iter().map(|f| f.hidden_row).collect();
        let out = drafter.step(&tokens, &parents, root_position + step, region, &mask)?;
        let mut expanded: Vec<(f32, usize, usize)> = Vec::with_capacity(k * k);
        for (b, (f, top)) in frontier.iter().zip(&out).enumerate() {
            for c in top.iter().take(k) {
                let score = f.score * c.prob;
                expanded.push((score, b, cands.len()));
                cands.push(Scored { token: c.token, score, parent: Some(f.cand) });
            }
        }
        expanded.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.2.cmp(&b.2)));
        frontier = expanded
            .into_iter()
            .take(k)
            .map(|(score, b, cand)| Frontier { cand, score, slots: frontier[b].slots.clone(), hidden_row: b })
            .collect();
    }
    Ok(select(root, &cands, shape.draft_tokens.saturating_sub(1)))
}

/// The best `keep` candidates as a tree under `root`, numbered in candidate order.
fn select(root: u32, cands: &[Scored], keep: usize) -> Tree {
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&a, &b| cands[b].score.total_cmp(&cands[a].score).then(a.cmp(&b)));
    let mut chosen: Vec<usize> = order.into_iter().take(keep).collect();
    chosen.sort_unstable();
    let mut tree = Tree::root(root);
    let mut node_of = vec![None; cands.len()];
    for c in chosen {
        // A child never outscores its parent and ties go to the earlier candidate, so the
        // parent is always chosen first; SGLang drops a node whose parent is missing.
        let parent = match cands[c].parent {
            None => Some(0),
            Some(p) => node_of[p],
        };
        let Some(parent) = parent else { continue };
        node_of[c] = Some(tree.len());
        tree.tokens.push(cands[c].token);
        tree.depth.push(tree.depth[parent] + 1);
        tree.parent.push(Some(parent));
    }
    tree
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc(token: u32, score: f32, parent: Option<usize>) -> Scored {
        Scored { token, score, parent }
    }

    #[test]
    fn selection_keeps_the_best_paths_in_candidate_order() {
        // K = 2, S = 2: level 1 = [a 0.6, b 0.3]; children of a: [c .36, d .18], of b: [e .27, f .03].
        let cands = vec![
            sc(10, 0.6, None),
            sc(11, 0.3, None),
            sc(12, 0.36, Some(0)),
            sc(13, 0.18, Some(0)),
            sc(14, 0.27, Some(1)),
            sc(15, 0.03, Some(1)),
        ];
        let t = select(7, &cands, 4);
        assert_eq!(t.tokens, vec![7, 10, 11, 12, 14]);
        assert_eq!(t.parent, vec![None, Some(0), Some(0), Some(1), Some(2)]);
        assert_eq!(t.depth, vec![0, 1, 1, 2, 2]);
        assert_eq!(t.children(0).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(t.positions(5), vec![5, 6, 6, 7, 7]);
        #[rustfmt::skip]
        assert_eq!(t.mask(), vec![
            1, 0, 0, 0, 0,
            1, 1, 0, 0, 0,
            1, 0, 1, 0, 0,
            1, 1, 0, 1, 0,
            1, 0, 1, 0, 1,
        ]);
        assert!(!t.is_chain());
        // Equal scores: the parent (earlier) wins the last place over its child.
        let tie = vec![sc(1, 0.5, None), sc(2, 0.5, Some(0)), sc(3, 0.1, None)];
        assert_eq!(select(0, &tie, 1).tokens, vec![0, 1]);
    }
}
