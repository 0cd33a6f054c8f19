//! The continuous-batching scheduler's shape (`BatchLayout`) and its device buffers
//! (`BatchBuffers`). The buffers stay with the target between servings: the scheduler's
//! graph steps are captured at launch, in the `target-graph-capture` phase, and replay
//! when serving starts only if every buffer they read and write is still where it was.

use crate::backend::{Backend, BatchSeq, Mask, PagedSeq};

/// What one scheduler's steps hold, from its configuration and its engine's parts
/// (`scheduler::batch_layout`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchLayout {
    /// Rows of one sequence's verify step (1 without a drafter).
    pub tree_rows: usize,
    /// Most sequences running at once.
    pub max_running: usize,
    /// Most prompt tokens one step prefills, over all sequences.
    pub chunk: usize,
    /// The batch sizes a step of chains pads up to and runs as a graph (SGLang's capture
    /// list); empty where the target runs no graphs.
    pub graph_sizes: Vec<usize>,
}

impl BatchLayout {
    /// Most sequences one step runs: the running ones, padded.
    pub fn step_seqs(&self) -> usize {
        self.graph_sizes.last().map_or(self.max_running, |&s| s.max(self.max_running))
    }

    /// The captured size `seqs` sequences pad up to, if one holds them.
    pub fn padded(&self, seqs: usize) -> Option<usize> {
        self.graph_sizes.iter().copied().find(|&s| s >= seqs)
    }

    /// Logit rows of the largest step: every sequence's verify, padded.
    pub fn logit_rows(&self) -> usize {
        self.step_seqs() * self.tree_rows
    }

    /// Rows of the largest forward: a prefill chunk beside the largest step.
    pub fn forward_rows(&self) -> usize {
        self.chunk + self.logit_rows()
    }

    /// Rows of one sequence in a forward at most: a prefill chunk or a verify.
    pub fn seq_rows(&self) -> usize {
        self.chunk.max(self.tree_rows)
    }

    /// The verify lengths a graph step can have: decode steps (one row each) and, with a
    /// drafter, chain verifies of every draft token.
    pub fn step_rows(&self) -> Vec<usize> {
        if self.tree_rows > 1 {
            vec![1, self.tree_rows]
        } else {
            vec![1]
        }
    }
}

/// Append `seqs` padding sequences of `rows` rows to a forward's inputs: token 0 at positions
/// `0 .. rows`. Their rows compute as any other and their results go unread; rows never mix
/// across sequences, so the real ones are unchanged.
pub fn pad_inputs(seqs: usize, rows: usize, ids: &mut Vec<u32>, positions: &mut Vec<usize>) {
    for _ in 0..seqs {
        ids.extend(std::iter::repeat_n(0, rows));
        positions.extend(0..rows);
    }
}

/// `seqs` padding sequences of `rows` rows each (`pad_inputs`), from row `first_row`, each
/// over the pad slots of positions `0 .. rows` (slots no real sequence holds).
pub fn padding_seqs<'a, B: Backend>(
    pad_slots: &'a [usize],
    first_row: usize,
    seqs: usize,
    rows: usize,
) -> impl Iterator<Item = BatchSeq<'a, B>> {
    (0..seqs).map(move |i| BatchSeq {
        seq: PagedSeq { row: first_row + i * rows, queries: rows, slots: &pad_slots[..rows] },
        mask: Mask::Causal,
    })
}

/// The scheduler's own device buffers for a layout.
pub struct BatchBuffers<B: Backend> {
    pub layout: BatchLayout,
    /// The argmax of every logit row of a step.
    pub argmax: B::Ids,
    /// One sequence's verify rows as probabilities (sampling).
    pub probs: B::Tensor,
    /// One tree mask per running sequence.
    pub masks: Vec<B::Ids>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_pad_to_the_next_captured_size_and_the_buffers_hold_the_padded_batch() {
        let layout = BatchLayout { tree_rows: 4, max_running: 12, chunk: 512, graph_sizes: vec![1, 2, 4, 8, 16] };
        assert_eq!((layout.padded(3), layout.padded(9), layout.padded(17)), (Some(4), Some(16), None));
        assert_eq!((layout.step_seqs(), layout.step_rows()), (16, vec![1, 4]));
        let eager = BatchLayout { tree_rows: 1, graph_sizes: Vec::new(), ..layout };
        assert_eq!((eager.padded(1), eager.step_seqs(), eager.step_rows()), (None, 12, vec![1]));
    }
}
