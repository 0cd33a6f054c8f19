//! What the speculative loop needs from a drafter, and what a drafter takes from its target.
//!
//! A drafter keeps its own KV cache in step with the target's committed sequence (`extend`),
//! then grows a draft tree one level at a time (`step`) in scratch slots after its committed
//! ones; the next `extend` overwrites those slots, which is all the rollback a drafter needs.
//!
//! Serving many sequences, a drafter keeps their KV in a pool laid out slot for slot as the
//! target's paged pool (`set_pool`) and drafts chains for the whole batch at once
//! (`draft_chains`): one forward reads what every sequence committed, then one forward a
//! chain level drafts a token for each decoding sequence.

use std::sync::Arc;

use crate::backend::{Backend, BackendError, BatchSeq, Mask, PagedSeq};
use crate::engine::batch_buffers::{pad_inputs, padding_seqs, BatchLayout};
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

/// The sizes of a drafter's pooled KV (`Drafter::set_pool`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSize {
    /// Slots, as many as the target's paged pool has.
    pub slots: usize,
    /// Positions the RoPE table covers.
    pub positions: usize,
    /// The scheduler's steps: their rows, and the batch sizes a drafting forward pads up to
    /// and runs as a graph step (none without graph sizes). A padded read gives every
    /// sequence the verify's rows.
    pub layout: BatchLayout,
    /// Pool slots of positions `0 .. tree_rows` that padding sequences write (slots no real
    /// sequence holds); empty without graph sizes.
    pub pad_slots: Vec<usize>,
}

/// One sequence of a batch's chain drafting (`Drafter::draft_chains`).
pub struct ChainSeq<'a> {
    /// The prompt and the committed output; `tokens[committed]` is the next verify's root.
    pub tokens: &'a [u32],
    pub committed: usize,
    /// Positions the drafter has read (`Chain::read` of the step before; 0 at first).
    pub read: usize,
    /// The target-forward rows whose hidden states belong to positions `read .. committed`
    /// (EAGLE-3; empty for a drafter that reads no hidden states).
    pub aux_rows: &'a [usize],
    /// Pool slots of positions `0 .. committed + length + 1`, `length` the chain's.
    pub slots: &'a [usize],
    /// Draft a chain (the sequence decodes); else only read (a prompt chunk).
    pub draft: bool,
}

/// What `draft_chains` did for one sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// Positions the drafter has now read.
    pub read: usize,
    /// The drafting row whose tokens after the root `Drafter::chain_tokens` holds (none when
    /// it only read).
    pub row: Option<usize>,
}

/// Chains drafted on the device, as target ids: level `l` of drafting row `r` at
/// `l * stride + r`. Each level's forward reads the level before where it lies, and the
/// scheduler's next verify gathers the chains from here (`Backend::gather_ids`), so drafting
/// reads nothing back: the host launches the verify while the GPU still drafts, and one read
/// after the verify brings its argmax and the chains it checked.
pub struct ChainTokens<B: Backend> {
    pub ids: B::Ids,
    /// Drafting rows a level holds.
    pub stride: usize,
    levels: usize,
}

impl<B: Backend> ChainTokens<B> {
    /// Room for the chains of `layout`'s running sequences, each as long as a verify allows.
    pub fn for_layout(b: &B, layout: &BatchLayout) -> Result<Self, BackendError> {
        let (stride, levels) = (layout.max_running, layout.tree_rows.max(2) - 1);
        Ok(ChainTokens { ids: b.ids(stride * levels)?, stride, levels })
    }

    /// The best of each of the first `rows` rows of `top` as level `level`, and as the ids of
    /// the next forward (`next`), through the drafter's vocabulary `map`.
    pub fn pick(
        &mut self,
        b: &B,
        top: &TopK<B>,
        map: Option<&B::Ids>,
        rows: usize,
        level: usize,
        next: &mut B::Ids,
    ) -> Result<(), EngineError> {
        if rows > self.stride || level >= self.levels {
            return Err(EngineError::Request(format!(
                "chain level {level} of {rows} sequences: the drafter holds {} levels of {}",
                self.levels, self.stride
            )));
        }
        b.pick_ids(&top.indices, top.k, map, rows, &mut self.ids, level * self.stride);
        b.pick_ids(&top.indices, top.k, map, rows, next, 0);
        Ok(())
    }

    /// Where level `level` of drafting row `row` lies, for `Backend::gather_ids`.
    pub fn index(&self, level: usize, row: usize) -> i32 {
        (level * self.stride + row) as i32
    }

    /// The `length` tokens of each of the drafting rows `rows`, read back.
    pub fn read(&self, b: &B, rows: &[usize], length: usize) -> Result<Vec<Vec<u32>>, BackendError> {
        let Some(&last) = rows.iter().max().filter(|_| length > 0) else { return Ok(vec![Vec::new(); rows.len()]) };
        let flat = b.read_ids(&self.ids, self.index(length - 1, last) as usize + 1)?;
        Ok(rows.iter().map(|&r| (0..length).map(|l| flat[self.index(l, r) as usize] as u32).collect()).collect())
    }
}

/// The forward that reads what a batch committed: per sequence, the positions `read .. end`
/// with the ids `tokens[read + shift .. end + shift]` (EAGLE-3 pairs a position's hidden state
/// with the next token: `shift` 1), its KV into the slots of those positions.
///
/// When every sequence decodes and the pool has a captured size for them, the forward is a
/// graph step: each sequence reads the verify's rows of positions, those past `end` with token 0 and
/// its last hidden row, and padding sequences fill the batch. The extra rows come after the
/// real ones of their sequence, so they change none of them, and their KV lands in slots past
/// `end - 1`, which the chain levels or the next read write again before anything sees them.
pub(crate) struct ExtendBatch<'a, B: Backend> {
    pub ids: Vec<u32>,
    pub positions: Vec<usize>,
    pub seqs: Vec<BatchSeq<'a, B>>,
    /// The target rows of the read positions, in row order.
    pub aux_rows: Vec<usize>,
    /// The last real row of each drafting sequence, in the call's order (their logits), then
    /// one row of each padding sequence.
    pub last_rows: Vec<usize>,
    /// The call's index of each drafting sequence.
    pub drafting: Vec<usize>,
    /// The padded size and rows a sequence, when the forward runs as a graph step.
    pub graph: Option<(usize, usize)>,
}

impl<'a, B: Backend> ExtendBatch<'a, B> {
    pub fn new(chains: &'a [ChainSeq<'a>], end: impl Fn(&ChainSeq<'_>) -> usize, shift: usize, pool: &'a PoolSize, graphs: bool) -> Self {
        let reading: Vec<usize> = (0..chains.len()).filter(|&i| end(&chains[i]) > chains[i].read).collect();
        let each = pool.layout.tree_rows;
        let uniform = reading.iter().all(|&i| chains[i].draft && end(&chains[i]) - chains[i].read <= each);
        let graph = pool.layout.padded(reading.len()).filter(|_| graphs && uniform).map(|size| (size, each));
        let mut out = ExtendBatch {
            ids: Vec::new(),
            positions: Vec::new(),
            seqs: Vec::new(),
            aux_rows: Vec::new(),
            last_rows: Vec::new(),
            drafting: Vec::new(),
            graph,
        };
        for &i in &reading {
            let c = &chains[i];
            let (row, real) = (out.ids.len(), end(c) - c.read);
            let queries = graph.map_or(real, |(_, each)| each);
            out.ids.extend((c.read..c.read + queries).map(|p| c.tokens.get(p + shift).copied().unwrap_or(0)));
            out.positions.extend(c.read..c.read + queries);
            out.aux_rows.extend_from_slice(c.aux_rows);
            if let Some(&last) = c.aux_rows.last() {
                out.aux_rows.extend(std::iter::repeat_n(last, queries - real));
            }
            out.seqs.push(BatchSeq { seq: PagedSeq { row, queries, slots: &c.slots[..c.read + queries] }, mask: Mask::Causal });
            if c.draft {
                out.last_rows.push(row + real - 1);
                out.drafting.push(i);
            }
        }
        if let Some((size, each)) = graph {
            let (first_row, padding) = (out.ids.len(), size - reading.len());
            pad_inputs(padding, each, &mut out.ids, &mut out.positions);
            if !out.aux_rows.is_empty() {
                out.aux_rows.resize(out.ids.len(), 0);
            }
            out.last_rows.extend((1..=padding).map(|i| first_row + i * each - 1));
            out.seqs.extend(padding_seqs(&pool.pad_slots, first_row, padding, each));
        }
        out
    }

    pub fn rows(&self) -> usize {
        self.ids.len()
    }

    /// The graph key of this read by drafter `kind`, when it runs as a graph step.
    pub fn graph_key(&self, kind: &str) -> Option<String> {
        self.graph.map(|(size, each)| format!("draft-read/{kind}/{size}x{each}"))
    }
}

/// One chain level of the drafting sequences `drafting` of `chains`: row `r` is
/// `drafting[r]`'s newest token (on the device, where `ChainTokens::pick` put it) at position
/// `committed + level`, its KV into the last of its first `committed + level + ahead` slots
/// (`ahead`: how far past `committed` the drafter has read, 0 for EAGLE-3, 1 for a drafter
/// that reads the root). Padded to `pool`'s captured size where one holds the level and
/// `graphs` is on; padding rows are at position 0 over the first pad slot, with whatever
/// token an earlier forward left in their row (any id will do: nothing reads their output).
pub(crate) struct LevelBatch<'a, B: Backend> {
    pub positions: Vec<usize>,
    pub seqs: Vec<BatchSeq<'a, B>>,
    /// The padded size, when the level runs as a graph step.
    pub graph: Option<usize>,
}

impl<'a, B: Backend> LevelBatch<'a, B> {
    pub fn new(chains: &'a [ChainSeq<'a>], drafting: &[usize], (level, ahead): (usize, usize), pool: &'a PoolSize, graphs: bool) -> Self {
        let graph = pool.layout.padded(drafting.len()).filter(|_| graphs);
        let rows = graph.unwrap_or(drafting.len());
        let mut out = LevelBatch { positions: Vec::with_capacity(rows), seqs: Vec::with_capacity(rows), graph };
        for (row, &i) in drafting.iter().enumerate() {
            let c = &chains[i];
            out.positions.push(c.committed + level);
            out.seqs
                .push(BatchSeq { seq: PagedSeq { row, queries: 1, slots: &c.slots[..c.committed + level + ahead] }, mask: Mask::Causal });
        }
        pad_inputs(rows - drafting.len(), 1, &mut Vec::new(), &mut out.positions);
        out.seqs.extend(padding_seqs(&pool.pad_slots, drafting.len(), rows - drafting.len(), 1));
        out
    }

    pub fn rows(&self) -> usize {
        self.positions.len()
    }

    /// The graph key of this level by drafter `kind`, when it runs as a graph step.
    pub fn graph_key(&self, kind: &str) -> Option<String> {
        self.graph.map(|size| format!("draft-level/{kind}/{size}"))
    }
}

/// The forwards a drafter runs for `Drafter::draft_chains`, which `draft_chains` drives.
pub(crate) trait ChainForwards<B: Backend> {
    /// How far past `committed` the drafter reads: 0 for EAGLE-3 (a position pairs with the
    /// token after it), 1 for a drafter that reads the root as any other token.
    const AHEAD: usize;
    /// One forward reading `ext` into the pool, with the top-k of the drafting sequences'
    /// last rows (`ext.last_rows`) enqueued.
    fn read(&mut self, ext: &ExtendBatch<'_, B>, aux: Option<&B::Tensor>) -> Result<(), EngineError>;
    /// One chain level's forward over the ids the last `pick` left, with the top-k of its
    /// rows enqueued.
    fn level(&mut self, level: &LevelBatch<'_, B>) -> Result<(), EngineError>;
    /// The best candidate of each of the first `rows` rows of the last top-k, as chain level
    /// `level` (`ChainTokens::pick`) and as the ids of the next level.
    fn pick(&mut self, rows: usize, level: usize) -> Result<(), EngineError>;
}

/// `Drafter::draft_chains` over a drafter's forwards: one forward reads what every sequence
/// committed, then each level of `length` drafts one token for every decoding sequence.
pub(crate) fn draft_chains<B: Backend, D: ChainForwards<B>>(
    drafter: &mut D,
    pool: &PoolSize,
    graphs: bool,
    seqs: &[ChainSeq<'_>],
    aux: Option<&B::Tensor>,
    length: usize,
) -> Result<Vec<Chain>, EngineError> {
    let end = |c: &ChainSeq<'_>| c.committed + D::AHEAD;
    let ext = ExtendBatch::new(seqs, end, 1 - D::AHEAD, pool, graphs);
    // Every sequence read as far as `end`; the drafting ones get their tokens below.
    let mut chains: Vec<Chain> = seqs.iter().map(|c| Chain { read: end(c).max(c.read), row: None }).collect();
    if ext.rows() == 0 {
        return Ok(chains);
    }
    drafter.read(&ext, aux)?;
    if ext.drafting.is_empty() || length == 0 {
        return Ok(chains);
    }
    let rows = ext.drafting.len();
    drafter.pick(rows, 0)?;
    for level in 1..length {
        drafter.level(&LevelBatch::new(seqs, &ext.drafting, (level, D::AHEAD), pool, graphs))?;
        drafter.pick(rows, level)?;
    }
    for (row, &i) in ext.drafting.iter().enumerate() {
        chains[i].row = Some(row);
    }
    Ok(chains)
}

pub trait Drafter<B: Backend>: Send {
    /// Forget the sequence (a new request).
    fn reset(&mut self);
    /// Size the caches for a relaunch that keeps the weights: `kv_slots` KV slots and the
    /// top-`topk` buffers of the new tree shape. Forgets the sequence.
    fn resize(&mut self, kv_slots: usize, topk: usize) -> Result<(), EngineError>;
    /// Keep the KV of a batch's sequences in a pool laid out as the target's (`size`), for
    /// `draft_chains`, in place of the one sequence's cache that `extend` and `step` use;
    /// `None` gives that cache back its size. Either forgets every sequence.
    fn set_pool(&mut self, size: Option<PoolSize>) -> Result<(), EngineError>;
    /// Read what a step committed for each of `seqs` (EAGLE-3 from the target's captured
    /// hidden states `aux`), in one forward over the pool, then draft `length` tokens after
    /// the root of each that decodes, one forward a level for them all, its tokens left on
    /// the device (`chain_tokens`). One `Chain` a sequence, in order.
    fn draft_chains(&mut self, seqs: &[ChainSeq<'_>], aux: Option<&B::Tensor>, length: usize) -> Result<Vec<Chain>, EngineError>;
    /// Where the last `draft_chains` left its chains (none without a pool).
    fn chain_tokens(&self) -> Option<&ChainTokens<B>>;
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

/// The error of a chain call on a drafter that keeps no pool.
pub(crate) fn no_pool() -> EngineError {
    EngineError::Request("the drafter keeps no pool (set_pool)".into())
}

/// An error when a drafter's cache is gone (its reallocation failed), before an op indexes it.
pub(crate) fn check_kv<B: Backend>(kv: &KvCache<B>) -> Result<(), EngineError> {
    if kv.slots == 0 {
        return Err(EngineError::Request("the drafter has no KV cache: its last reallocation failed".into()));
    }
    Ok(())
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

/// Run `ops` as the graph step `key` where there is one, else eagerly.
pub fn step_as<B: Backend>(b: &B, key: Option<&str>, ops: &mut dyn FnMut()) {
    match key {
        Some(key) => b.graph_step(key, ops),
        None => ops(),
    }
}

/// Run a draft step's ops as the graph step `key` when its `rows` fit the captured sizes.
pub fn graph_or_eager<B: Backend>(b: &B, graph_rows: usize, key: &str, rows: usize, ops: &mut dyn FnMut()) {
    step_as(b, (rows <= graph_rows).then_some(key), ops);
}

/// The graph key of a draft step: its rows, its attention region and the drafter kind
/// (the ops and their shapes repeat for equal keys; positions and lists are per-step values).
pub fn draft_step_key(kind: &str, rows: usize, region: usize) -> String {
    format!("draft-step/{kind}/{rows}/{region}")
}
