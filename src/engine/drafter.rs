//! What the speculative loop needs from a drafter, and what a drafter takes from its target.
//!
//! A drafter keeps its own KV cache in step with the target's committed sequence (`extend`),
//! then grows a draft tree one level at a time (`step`) in scratch slots after its committed
//! ones; the next `extend` overwrites those slots, which is all the rollback a drafter needs.

use std::sync::Arc;

use crate::backend::{Backend, BackendError};
use crate::engine::kv::KvCache;
use crate::engine::EngineError;

/// What an EAGLE-3 drafter takes from its target: the backend, the target's sizes, and the
/// embeddings and lm_head it shares when its checkpoint has none of its own.
pub struct TargetHead<B: Backend> {
    pub backend: Arc<B>,
    pub vocab: usize,
    pub hidden: usize,
    pub embed: Arc<B::Weight>,
    pub lm_head: Arc<B::Weight>,
}

/// One proposal: a target token id with the drafter's probability for it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub prob: f32,
    pub token: u32,
}

/// Rows of the target's captured hidden states (`[rows, 3·hidden]`) for new draft positions.
pub struct AuxRows<'a, B: Backend> {
    pub tensor: &'a B::Tensor,
    /// `rows[i]` holds the target hidden state of the `i`-th new position.
    pub rows: &'a [usize],
}

/// One sequence as a drafter holds it: its KV cache and how many positions it has read.
/// A scheduler running several sequences through one drafter keeps one per sequence and
/// swaps it in around that sequence's extend and draft (`Drafter::swap_state`).
pub struct DraftState<B: Backend> {
    pub(crate) kv: KvCache<B>,
    pub(crate) len: usize,
}

pub trait Drafter<B: Backend>: Send {
    /// Forget the sequence (a new request).
    fn reset(&mut self);
    /// Size the caches for a relaunch that keeps the weights: `kv_slots` KV slots and the
    /// top-`topk` buffers of the new tree shape. Forgets the sequence.
    fn resize(&mut self, kv_slots: usize, topk: usize) -> Result<(), EngineError>;
    /// A new sequence's state with `kv_slots` KV slots (its prompt, output and draft tree);
    /// positions up to `kv_slots` get RoPE.
    fn new_state(&mut self, kv_slots: usize) -> Result<DraftState<B>, EngineError>;
    /// Exchange the drafter's current sequence with `state`.
    fn swap_state(&mut self, state: &mut DraftState<B>);
    /// Whether `extend` needs the target's captured hidden states.
    fn wants_aux(&self) -> bool;
    /// Draft steps of up to this many rows run as CUDA-graph steps (0: none).
    fn set_graph_rows(&mut self, rows: usize);
    /// Bytes of weights one draft forward reads.
    fn weight_bytes(&self) -> u64;
    /// The first scratch slot of a draft tree (draft-tree slots are counted from here).
    fn region_base(&self) -> usize;
    /// Catch up with the target, whose KV holds `seq[..committed]` (`seq[committed]` is the
    /// root of the next tree). Returns the top-k candidates for the token after the root, or
    /// `None` when there was nothing new to read (nothing to draft from).
    fn extend(&mut self, seq: &[u32], committed: usize, aux: Option<AuxRows<'_, B>>) -> Result<Option<Vec<Candidate>>, EngineError>;
    /// One draft-tree level: `tokens` sit at `position`; each continues the hidden state of row
    /// `parents[i]` of the previous forward. The tree so far fills `region` scratch slots, these
    /// tokens being the last ones; `mask` is `[tokens, region]`. Returns top-k per token.
    fn step(
        &mut self,
        tokens: &[u32],
        parents: &[usize],
        position: usize,
        region: usize,
        mask: &[i32],
    ) -> Result<Vec<Vec<Candidate>>, EngineError>;
}

/// Softmax + top-k over logit rows, read back as candidates.
pub struct TopK<B: Backend> {
    k: usize,
    values: B::Tensor,
    indices: B::Ids,
}

impl<B: Backend> TopK<B> {
    pub fn new(b: &B, rows: usize, k: usize) -> Result<Self, BackendError> {
        Ok(TopK { k, values: b.tensor(rows, k)?, indices: b.ids(rows * k)? })
    }

    /// Top-k of `softmax(logits)` (no temperature, as SGLang drafts), rows `0..rows`; the
    /// logits may be overwritten. Ops only, so it can close a graph step.
    pub fn enqueue(&mut self, b: &B, logits: &mut B::Tensor, rows: usize) {
        b.softmax_topk(logits, rows, self.k, &mut self.values, &mut self.indices);
    }

    /// What `enqueue` found, each index mapped to a target id.
    pub fn read(&self, b: &B, rows: usize, to_target: impl Fn(usize) -> u32) -> Result<Vec<Vec<Candidate>>, BackendError> {
        let p = b.read_rows(&self.values, 0, rows)?;
        let i = b.read_ids(&self.indices, rows * self.k)?;
        Ok(p.chunks(self.k)
            .zip(i.chunks(self.k))
            .map(|(p, i)| p.iter().zip(i).map(|(&prob, &d)| Candidate { prob, token: to_target(d as usize) }).collect())
            .collect())
    }
}

/// Run a draft step's ops as the graph step `key` when its `rows` fit the captured sizes.
pub fn graph_or_eager<B: Backend>(b: &B, graph_rows: usize, key: &str, rows: usize, ops: &mut dyn FnMut()) {
    if rows <= graph_rows {
        b.graph_step(key, ops);
    } else {
        ops();
    }
}

/// The graph key of a draft step: its rows, its attention region and the drafter kind
/// (the ops and their shapes repeat for equal keys; positions and lists are per-step values).
pub fn draft_step_key(kind: &str, rows: usize, region: usize) -> String {
    format!("draft-step/{kind}/{rows}/{region}")
}
