//! Continuous batching over the paged KV pool (`engine::paged`), after SGLang's scheduler:
//! up to `max_running` sequences run, the rest wait in arrival order; each step is one
//! forward of the whole running batch: every decoding sequence's verify tree (its root alone
//! without a drafter, a chain or, at batch 1, a tree with one) and prefill chunks of at most
//! `chunk` prompt tokens in all. Each sequence accepts its own number of draft tokens, and a
//! finished or cancelled sequence gives its blocks back at once.
//!
//! A sequence runs through the same steps as `spec_decode::generate` (prefill of all prompt
//! tokens but the last, then verify steps rooted at the last committed token; the drafter
//! reads what each forward committed), and every op computes each row on its own (the CPU's
//! matmul: src/backend/cpu/matmul.rs), so its tokens are the same alone, batched or through
//! the batch-1 path. Chains are drafted for the whole batch at once: the drafter keeps its KV
//! in a pool laid out slot for slot as the target's (`Drafter::set_pool`), reads what a step
//! committed for every sequence in one forward and drafts each chain level in one more
//! (`Drafter::draft_chains`). A tree (batch 1) is drafted in the drafter's own cache.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::backend::{Backend, BatchSeq, Mask, PagedBatch, PagedSeq};
use crate::engine::batch_buffers::{pad_inputs, padding_seqs, BatchBuffers, BatchLayout};
use crate::engine::drafter::{step_as, AuxRows, ChainSeq, Drafter, PoolSize};
use crate::engine::graph_sizes::capture_sizes;
use crate::engine::kv_budget::BLOCK_TOKENS;
use crate::engine::paged::{blocks_for, BlockPool, BlockTable};
use crate::engine::plan::PREFILL_CHUNK;
use crate::engine::sampling::{self, SamplingParams};
use crate::engine::spec_decode::Target;
use crate::engine::tree::{self, Tree, TreeShape};
use crate::engine::verify::{self, Walk};
use crate::engine::EngineError;
use crate::model::tokenizer::TextTokenizer;
use crate::spec::LaunchSpec;

/// `--max-running-requests` when absent.
pub const DEFAULT_MAX_RUNNING: usize = 8;
/// The largest batch a graph step is captured for, whatever the flags ask (SGLang's own
/// capture list ends at 512 on the largest GPUs).
const GRAPH_BS_CAP: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    pub max_running: usize,
    /// Most prompt tokens one step prefills, over all sequences.
    pub chunk: usize,
    /// Decode and verify steps of at most this many sequences run as graph steps, padded
    /// up to the next size of SGLang's capture list (`graph_sizes::capture_sizes`), one graph
    /// per size and verify length, where the target runs graphs at all
    /// (`--cuda-graph-max-bs`; without it, up to `max_running`).
    pub graph_max_bs: usize,
}

/// `--chunked-prefill-size` when absent: as SGLang picks it by the GPU's memory (2048 under
/// 35 GiB, 8192 under 160 GiB, 16384 above); on the CPU, `PREFILL_CHUNK`, the size the CPU
/// reference's prefill was measured at. A c64 load of 512-token prompts on the H200 took
/// 3.42 s at 512 and 3.05 s at 8192 (testdata/gpu/run-24/NOTES.md, call 1).
pub fn default_chunk(gpu_memory: Option<u64>) -> usize {
    const GIB: u64 = 1 << 30;
    match gpu_memory {
        None => PREFILL_CHUNK,
        Some(m) if m < 35 * GIB => 2048,
        Some(m) if m < 160 * GIB => 8192,
        Some(_) => 16384,
    }
}

impl SchedulerConfig {
    /// The scheduler a launch asks for, on a GPU of `gpu_memory` bytes (`None`: the CPU).
    pub fn from_spec(spec: &LaunchSpec, gpu_memory: Option<u64>) -> SchedulerConfig {
        let max_running = spec.max_running_requests.map_or(DEFAULT_MAX_RUNNING, |n| n as usize).max(1);
        let chunk = spec.chunked_prefill_size.map_or(default_chunk(gpu_memory), |n| {
            // SGLang's -1 (or any value below 1) turns chunking off: a prompt prefills whole.
            usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(usize::MAX)
        });
        SchedulerConfig { max_running, chunk, graph_max_bs: spec.cuda_graph_max_bs.map_or(max_running, |n| n as usize) }
    }
}

/// What a ready engine serves with (`Engine::serve_batch` lends them to the scheduler).
pub struct EngineParts<B: Backend> {
    pub target: Target<B>,
    pub drafter: Option<Box<dyn Drafter<B>>>,
    pub tokenizer: Arc<TextTokenizer>,
    pub shape: TreeShape,
}

/// One request, tokenized.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Keep going past the tokenizer's stop ids.
    pub ignore_eos: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// A stop id (not emitted).
    Stop,
    /// `max_tokens` reached.
    Length,
    Cancelled,
}

/// What one step did for one sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqUpdate {
    pub id: u64,
    /// Tokens committed this step (none while it prefills).
    pub tokens: Vec<u32>,
    /// Of `tokens`, how many were accepted drafts.
    pub drafted: usize,
    /// Tokens the verify step produced (accept length), when it decoded.
    pub accept_length: Option<usize>,
    pub finished: Option<Finish>,
}

/// Where the steps went, summed over them (`specdeck bench` reports each part a step).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepTimes {
    pub steps: u64,
    /// Planning the batch and writing its ids, positions, masks and table.
    pub schedule_s: f64,
    /// Issuing the forward; a backend that computes as it is called (the CPU) computes here.
    pub launch_s: f64,
    /// Waiting for the forward's argmax: a GPU's work that the launch did not cover.
    pub wait_s: f64,
    /// Accepting, committing and drafting the next trees.
    pub commit_s: f64,
    /// The serving thread's handling of the step's updates (text, events, metrics).
    pub publish_s: f64,
    /// Padding sequences that filled graph steps up to their captured sizes.
    pub padding_seqs: u64,
}

/// What the serving thread shows of a scheduler after a step, in one answer (a
/// tensor-parallel group asks its rank 0 once, not once a count).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchStatus {
    pub running: usize,
    pub queued: usize,
    pub kv_blocks_free: usize,
    pub kv_blocks_total: usize,
    pub times: StepTimes,
}

impl BatchStatus {
    pub fn is_idle(&self) -> bool {
        self.running == 0 && self.queued == 0
    }
}

struct Seq {
    id: u64,
    /// The prompt, then every produced token (the drafter reads them).
    tokens: Vec<u32>,
    prompt_len: usize,
    /// Positions in the target's KV.
    committed: usize,
    table: BlockTable,
    out: Vec<u32>,
    max_tokens: usize,
    ignore_eos: bool,
    sampling: SamplingParams,
    rng: ChaCha8Rng,
    /// Positions the drafter has read of a chain-drafted sequence (`Chain::read`).
    draft_read: usize,
    /// The verify tree of the next step, drafted after the last one.
    tree: Option<Tree>,
    /// Where the drafter holds `tree`'s drafts on the device (`ChainTokens`): its drafting
    /// row of the last `draft_chains`. The tree has placeholders for them until the verify
    /// that gathers them there reads them back.
    chain_row: Option<usize>,
}

impl Seq {
    fn prefilling(&self) -> bool {
        self.committed + 1 < self.prompt_len
    }
}

/// What a step committed for one sequence still running, for the drafter to read.
struct Read {
    seq: usize,
    /// The forward's rows of the newly committed positions (EAGLE-3 reads their hidden states).
    rows: Vec<usize>,
    /// The sequence's slots in the forward (positions `0 .. committed + rows` before it).
    slots: Vec<usize>,
}

/// One sequence's part of a step's forward.
struct Part {
    seq: usize,
    row: usize,
    rows: usize,
    tree: Option<Tree>,
}

pub struct Scheduler<B: Backend> {
    target: Target<B>,
    drafter: Option<Box<dyn Drafter<B>>>,
    shape: TreeShape,
    stop_ids: Vec<u32>,
    tokenizer: Arc<TextTokenizer>,
    pool: BlockPool,
    cfg: SchedulerConfig,
    /// Rows of one sequence's verify step.
    tree_rows: usize,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    next_id: u64,
    buffers: BatchBuffers<B>,
    /// The blocks the padding sequences of graph steps write (`pad_table`).
    pad: BlockTable,
    times: StepTimes,
}

/// The layout of a scheduler over `cfg`: a tree shape (topk > 1) runs one sequence at a
/// time, chains and target-only decoding `max_running`. With `graphs`, steps of chains pad
/// up to the sizes of SGLang's list up to `--cuda-graph-max-bs`, as far as the first that
/// holds `max_running` sequences.
pub fn batch_layout(cfg: &SchedulerConfig, drafter: Option<TreeShape>, max_tokens: usize, graphs: bool) -> BatchLayout {
    let tree_rows = drafter.map_or(1, |s| s.draft_tokens);
    let max_running = if drafter.is_some_and(|s| !s.is_chain()) { 1 } else { cfg.max_running };
    // The drafter reads a prefill chunk in one forward of its own capacity; without chunking
    // (SGLang's -1) a whole prompt, which the context bounds, is one chunk.
    let whole = cfg.chunk.min(max_tokens).max(1);
    let chunk = if drafter.is_some() { whole.min(PREFILL_CHUNK) } else { whole };
    let mut graph_sizes = Vec::new();
    if graphs {
        // The first size of the list that holds max_running is at most its next multiple of 8.
        let max_bs = cfg.graph_max_bs.min(max_running.next_multiple_of(8)).min(GRAPH_BS_CAP);
        for size in capture_sizes(max_bs as u32).into_iter().map(|s| s as usize) {
            graph_sizes.push(size);
            if size >= max_running {
                break;
            }
        }
    }
    BatchLayout { tree_rows, max_running, chunk, graph_sizes }
}

/// The target's batch buffers for `layout`: the ones it keeps when they fit (a graph step
/// captured over them then replays), else new ones; the model's batch capacity sized too.
fn batch_buffers<B: Backend>(target: &mut Target<B>, layout: &BatchLayout) -> Result<BatchBuffers<B>, EngineError> {
    let b = target.model.backend().clone();
    let logit_rows = layout.logit_rows();
    let positions = target.max_tokens() + layout.tree_rows;
    target.model.set_batch_capacity(layout.forward_rows(), logit_rows, layout.seq_rows(), positions)?;
    if let Some(kept) = target.batch.take().filter(|kept| &kept.layout == layout) {
        return Ok(kept);
    }
    Ok(BatchBuffers {
        layout: layout.clone(),
        argmax: b.ids(logit_rows)?,
        probs: b.tensor(layout.tree_rows, target.model.vocab())?,
        masks: (0..layout.max_running).map(|_| b.ids(layout.tree_rows * layout.tree_rows)).collect::<Result<Vec<_>, _>>()?,
    })
}

/// The blocks that a graph step's padding sequences write, taken first from a fresh pool
/// (so always its first blocks); none without graphs.
fn pad_table(pool: &mut BlockPool, layout: &BatchLayout) -> BlockTable {
    let mut pad = BlockTable::default();
    if !layout.graph_sizes.is_empty() {
        pad.reserve(pool, layout.tree_rows);
    }
    pad
}

/// The graph key of a step of `seqs` sequences (padded) of `rows` rows each.
fn step_key(seqs: usize, rows: usize) -> String {
    format!("scheduler-step/{seqs}x{rows}")
}

/// One forward of a step's batch and the argmax of its logit rows, as the graph step
/// `graph` where given (everything in it only enqueues work).
fn forward_and_argmax<B: Backend>(
    target: &mut Target<B>,
    argmax: &mut B::Ids,
    paged: &PagedBatch<'_, B>,
    logit_rows: &[usize],
    graph: Option<&str>,
) -> Result<(), EngineError> {
    let b = target.model.backend().clone();
    let Target { model, kv, .. } = target;
    let mut forward = Ok(());
    let mut step = || {
        forward = model.forward_batch(kv, paged, logit_rows);
        if forward.is_ok() && !logit_rows.is_empty() {
            b.argmax(model.logits(), logit_rows.len(), argmax);
        }
    };
    step_as(&*b, graph, &mut step);
    Ok(forward?)
}

/// Record and capture the graph steps of `seqs` sequences (a size of `layout.graph_sizes`)
/// at every verify length, on padding alone, into the target's batch buffers: the launch's
/// `target-graph-capture` phase, so that serving replays them from its first step. The
/// padding writes only the pad table's slots, which a scheduler keeps for itself.
pub fn capture_steps<B: Backend>(target: &mut Target<B>, layout: &BatchLayout, seqs: usize) -> Result<(), EngineError> {
    let b = target.model.backend().clone();
    let mut buffers = batch_buffers(target, layout)?;
    let pad = pad_table(&mut BlockPool::new(target.kv.slots / BLOCK_TOKENS), layout);
    let mut captured = Ok(());
    for rows in layout.step_rows() {
        let (mut ids, mut positions) = (Vec::new(), Vec::new());
        pad_inputs(seqs, rows, &mut ids, &mut positions);
        target.model.inputs().set(&*b, &ids, &positions);
        let pad_slots = pad.slots(rows);
        let batch: Vec<BatchSeq<'_, B>> = padding_seqs(&pad_slots, 0, seqs, rows).collect();
        let logit_rows: Vec<usize> = (0..ids.len()).collect();
        let paged = PagedBatch::new(&batch, ids.len());
        // Its tables go up once: both runs of the batch read them.
        target.model.prepare_batch(&paged)?;
        // The first run records the step, the second captures it.
        for _ in 0..2 {
            captured =
                captured.and_then(|_| forward_and_argmax(target, &mut buffers.argmax, &paged, &logit_rows, Some(&step_key(seqs, rows))));
        }
        captured = captured.and_then(|_| b.read_ids(&buffers.argmax, 1).map(drop).map_err(EngineError::from));
    }
    target.batch = Some(buffers);
    captured
}

impl<B: Backend> Scheduler<B> {
    /// Serve from a launched engine's parts. A tree shape (topk > 1) runs one sequence at a
    /// time; chains and target-only decoding run `max_running`. On an error (a target that
    /// cannot batch, buffers that do not fit) the parts come back with it.
    pub fn new(mut parts: EngineParts<B>, cfg: SchedulerConfig) -> Result<Scheduler<B>, Box<(EngineError, EngineParts<B>)>> {
        let shape = parts.drafter.is_some().then_some(parts.shape);
        let layout = batch_layout(&cfg, shape, parts.target.max_tokens(), parts.target.graph_rows > 0);
        let buffers = match batch_buffers(&mut parts.target, &layout) {
            Ok(b) => b,
            Err(e) => return Err(Box::new((e, parts))),
        };
        let mut pool = BlockPool::new(parts.target.kv.slots / BLOCK_TOKENS);
        let pad = pad_table(&mut pool, &layout);
        if let Some(dr) = parts.drafter.as_deref_mut().filter(|_| parts.shape.is_chain()) {
            let size = PoolSize {
                slots: parts.target.kv.slots,
                positions: parts.target.max_tokens() + layout.tree_rows,
                pad_slots: if layout.graph_sizes.is_empty() { Vec::new() } else { pad.slots(layout.tree_rows) },
                layout: layout.clone(),
            };
            if let Err(e) = dr.set_pool(Some(size)) {
                return Err(Box::new((e, parts)));
            }
        }
        let EngineParts { target, drafter, tokenizer, shape } = parts;
        let (tree_rows, max_running, chunk) = (layout.tree_rows, layout.max_running, layout.chunk);
        Ok(Scheduler {
            pad,
            pool,
            buffers,
            stop_ids: tokenizer.stop_ids().to_vec(),
            tokenizer,
            cfg: SchedulerConfig { max_running, chunk, ..cfg },
            tree_rows,
            target,
            drafter,
            shape,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_id: 1,
            times: StepTimes::default(),
        })
    }

    /// The parts it served from, for the engine to keep (every request is dropped), the
    /// batch buffers with the target and the drafter's own cache back in place of its pool
    /// (an error when that cache could not be allocated again).
    pub fn into_parts(mut self) -> (EngineParts<B>, Result<(), EngineError>) {
        self.target.batch = Some(self.buffers);
        let restored = match self.drafter.as_deref_mut() {
            Some(dr) if self.shape.is_chain() => dr.set_pool(None),
            _ => Ok(()),
        };
        (EngineParts { target: self.target, drafter: self.drafter, tokenizer: self.tokenizer, shape: self.shape }, restored)
    }

    /// Move waiting requests to the batch while there is room: a free place and the blocks
    /// of its whole prompt, output and verify tree (so a running sequence never waits for
    /// blocks).
    fn admit(&mut self) {
        while self.running.len() < self.cfg.max_running {
            let Some(s) = self.waiting.front_mut() else { break };
            let tokens = s.prompt_len + s.max_tokens + self.tree_rows;
            if blocks_for(tokens) > self.pool.free_blocks() {
                break;
            }
            assert!(s.table.reserve(&mut self.pool, tokens), "checked above");
            let s = self.waiting.pop_front().expect("front exists");
            // A tree runs alone, in the drafter's own cache.
            if let Some(dr) = self.drafter.as_deref_mut().filter(|_| !self.shape.is_chain()) {
                dr.reset();
            }
            self.running.push(s);
        }
    }

    fn step_here(&mut self) -> Result<Vec<SeqUpdate>, EngineError> {
        self.admit();
        if self.running.is_empty() {
            return Ok(Vec::new());
        }
        let b = self.target.model.backend().clone();
        let start = Instant::now();
        let mut parts = self.plan();
        let rows: usize = parts.iter().map(|p| p.rows).sum();
        let (mut ids, mut positions, mut slots) = (Vec::with_capacity(rows), Vec::with_capacity(rows), Vec::with_capacity(parts.len()));
        for p in &parts {
            let s = &self.running[p.seq];
            match &p.tree {
                Some(t) => {
                    ids.extend_from_slice(&t.tokens);
                    positions.extend(t.positions(s.committed));
                }
                None => {
                    ids.extend_from_slice(&s.tokens[s.committed..s.committed + p.rows]);
                    positions.extend(s.committed..s.committed + p.rows);
                }
            }
            slots.push(s.table.slots(s.committed + p.rows));
        }
        // A graph step runs at a captured batch size: padding sequences fill it up.
        let graph = self.graph_step(&parts);
        let (padding, pad_rows) = graph.as_ref().map_or((0, 0), |&(seqs, rows)| (seqs - parts.len(), rows));
        pad_inputs(padding, pad_rows, &mut ids, &mut positions);
        let pad_slots = self.pad.slots(pad_rows);
        self.target.model.inputs().set(&*b, &ids, &positions);
        let drafted = self.gather_drafts(&parts)?;
        for (p, mask) in parts.iter().zip(self.buffers.masks.iter_mut()) {
            if let Some(t) = p.tree.as_ref().filter(|t| !t.is_chain()) {
                b.write_ids(mask, &t.mask());
            }
        }
        let mut batch: Vec<BatchSeq<'_, B>> = parts
            .iter()
            .zip(&slots)
            .zip(&self.buffers.masks)
            .map(|((p, slots), mask)| {
                let tree_mask = p.tree.as_ref().is_some_and(|t| !t.is_chain());
                BatchSeq {
                    seq: PagedSeq { row: p.row, queries: p.rows, slots },
                    mask: if tree_mask { Mask::Explicit(mask) } else { Mask::Causal },
                }
            })
            .collect();
        batch.extend(padding_seqs(&pad_slots, rows, padding, pad_rows));
        let mut logit_rows: Vec<usize> = parts.iter().filter(|p| p.tree.is_some()).flat_map(|p| p.row..p.row + p.rows).collect();
        let read_rows = logit_rows.len();
        logit_rows.extend(rows..ids.len());
        let paged = PagedBatch::new(&batch, ids.len());
        // The table goes up ahead of the forward, which then only enqueues work (the ids and
        // positions were written above, the argmax reads its logits on the device).
        self.target.model.prepare_batch(&paged)?;
        let scheduled = Instant::now();
        let key = graph.map(|(seqs, rows)| step_key(seqs, rows));
        forward_and_argmax(&mut self.target, &mut self.buffers.argmax, &paged, &logit_rows, key.as_deref())?;
        drop(paged);
        drop(batch);
        let launched = Instant::now();
        let argmax =
            if read_rows == 0 { Vec::new() } else { b.read_ids(&self.buffers.argmax, read_rows)?.into_iter().map(|t| t as u32).collect() };
        self.read_drafts(&mut parts, &drafted)?;
        let read = Instant::now();
        let mut updates = Vec::with_capacity(parts.len());
        let mut reads = Vec::with_capacity(parts.len());
        let mut logit_row = 0;
        for (p, slots) in parts.into_iter().zip(slots) {
            let update = match &p.tree {
                Some(t) => {
                    let walk = self.accept(p.seq, t, logit_row, &argmax)?;
                    logit_row += t.len();
                    let rows: Vec<usize> = walk.0.path.iter().map(|n| p.row + n).collect();
                    let update = self.commit(&p, t, walk);
                    if update.finished.is_none() {
                        reads.push(Read { seq: p.seq, rows, slots });
                    }
                    update
                }
                None => {
                    self.running[p.seq].committed += p.rows;
                    reads.push(Read { seq: p.seq, rows: (p.row..p.row + p.rows).collect(), slots });
                    SeqUpdate { id: self.running[p.seq].id, tokens: Vec::new(), drafted: 0, accept_length: None, finished: None }
                }
            };
            updates.push(update);
        }
        self.draft(reads)?;
        for u in updates.iter().filter(|u| u.finished.is_some()) {
            self.cancel(u.id);
        }
        let t = &mut self.times;
        t.steps += 1;
        t.padding_seqs += padding as u64;
        t.schedule_s += scheduled.duration_since(start).as_secs_f64();
        t.launch_s += launched.duration_since(scheduled).as_secs_f64();
        t.wait_s += read.duration_since(launched).as_secs_f64();
        t.commit_s += read.elapsed().as_secs_f64();
        Ok(updates)
    }

    /// The chain drafts of `parts` that are still on the device, as (part, drafting row),
    /// gathered there into the forward's ids, which hold placeholders for them.
    fn gather_drafts(&mut self, parts: &[Part]) -> Result<Vec<(usize, usize)>, EngineError> {
        let drafted: Vec<(usize, usize)> =
            parts.iter().enumerate().filter_map(|(i, p)| self.running[p.seq].chain_row.map(|row| (i, row))).collect();
        if drafted.is_empty() {
            return Ok(drafted);
        }
        let chains = self.drafter.as_deref().and_then(|d| d.chain_tokens()).ok_or_else(no_chains)?;
        let mut from = Vec::new();
        for &(i, row) in &drafted {
            let p = &parts[i];
            from.resize(p.row + p.rows, -1);
            (1..p.rows).for_each(|l| from[p.row + l] = chains.index(l - 1, row));
        }
        let b = self.target.model.backend().clone();
        b.gather_ids(&chains.ids, &from, &mut self.target.model.inputs().ids);
        Ok(drafted)
    }

    /// The drafts `gather_drafts` found, read back into their parts' trees.
    fn read_drafts(&mut self, parts: &mut [Part], drafted: &[(usize, usize)]) -> Result<(), EngineError> {
        if drafted.is_empty() {
            return Ok(());
        }
        let chains = self.drafter.as_deref().and_then(|d| d.chain_tokens()).ok_or_else(no_chains)?;
        let rows: Vec<usize> = drafted.iter().map(|&(_, row)| row).collect();
        let length = drafted.iter().map(|&(i, _)| parts[i].rows - 1).max().unwrap_or(0);
        let b = self.target.model.backend().clone();
        for (&(i, _), tokens) in drafted.iter().zip(chains.read(&*b, &rows, length)?) {
            let p = &mut parts[i];
            self.running[p.seq].chain_row = None;
            let tree = p.tree.as_mut().expect("a drafted part verifies a tree");
            tree.tokens[1..].copy_from_slice(&tokens[..p.rows - 1]);
        }
        Ok(())
    }

    /// (padded sequences, rows each) of a step whose every part is a chain of the same
    /// length over causal attention (decode steps, or EAGLE-3 and STANDALONE chain verifies),
    /// for a batch a captured size holds: the ops and their shapes repeat for the same size
    /// and length. Steps with a prompt chunk, a tree mask, or verify chains of mixed lengths
    /// run eagerly.
    fn graph_step(&self, parts: &[Part]) -> Option<(usize, usize)> {
        let seqs = self.buffers.layout.padded(parts.len())?;
        let rows = parts.first()?.rows;
        let uniform = parts.iter().all(|p| p.rows == rows && p.tree.as_ref().is_some_and(Tree::is_chain));
        uniform.then_some((seqs, rows))
    }

    /// The step's parts: every decoding sequence's verify tree, then prefill chunks in
    /// arrival order within the chunk budget.
    fn plan(&mut self) -> Vec<Part> {
        let mut parts = Vec::with_capacity(self.running.len());
        let mut row = 0;
        for (i, s) in self.running.iter_mut().enumerate().filter(|(_, s)| !s.prefilling()) {
            let tree = s.tree.take().unwrap_or_else(|| Tree::root(s.tokens[s.committed]));
            parts.push(Part { seq: i, row, rows: tree.len(), tree: Some(tree) });
            row += parts.last().expect("pushed").rows;
        }
        let mut budget = self.cfg.chunk;
        for (i, s) in self.running.iter().enumerate().filter(|(_, s)| s.prefilling()) {
            let n = (s.prompt_len - 1 - s.committed).min(budget);
            if n == 0 {
                break;
            }
            parts.push(Part { seq: i, row, rows: n, tree: None });
            row += n;
            budget -= n;
        }
        parts
    }

    /// The accepted path of sequence `i`'s tree and the target's next token, greedy from
    /// the argmax or by rejection sampling at its temperature; its logits are rows
    /// `logit_row ..` of the forward's.
    fn accept(&mut self, i: usize, t: &Tree, logit_row: usize, argmax: &[u32]) -> Result<(Walk, u32), EngineError> {
        let b = self.target.model.backend().clone();
        let n = t.len();
        let s = &mut self.running[i];
        if s.sampling.temperature <= 0.0 {
            return Ok(verify::greedy(t, &argmax[logit_row..logit_row + n]));
        }
        // The coins in the batch-1 path's order (`spec_decode::Target::verify`).
        let coins: Vec<f32> = (0..n).map(|_| s.rng.random::<f32>()).collect();
        let final_coin: f32 = s.rng.random();
        b.copy_rows(self.target.model.logits(), logit_row, &mut self.buffers.probs, 0, n);
        b.softmax(&mut self.buffers.probs, n, s.sampling.temperature);
        if !s.sampling.filters() {
            let coords: Vec<(usize, usize)> = (1..n).map(|c| (t.parent[c].expect("non-root"), t.tokens[c] as usize)).collect();
            let mut child_prob = vec![0.0];
            child_prob.extend(b.read_elements(&self.buffers.probs, &coords)?);
            let walk = verify::sample(t, &child_prob, &coins, verify::lossless);
            let next = b.sample(&self.buffers.probs, walk.last(), &walk.rejected, final_coin)?;
            return Ok((walk, next));
        }
        // top-k / top-p: the filtered distributions on the host.
        let vocab = self.target.model.vocab();
        let rows: Vec<Vec<f32>> = b
            .read_rows(&self.buffers.probs, 0, n)?
            .chunks(vocab)
            .map(|r| sampling::filtered(r, s.sampling.top_k, s.sampling.top_p))
            .collect();
        let mut child_prob = vec![0.0];
        child_prob.extend((1..n).map(|c| rows[t.parent[c].expect("non-root")][t.tokens[c] as usize]));
        let walk = verify::sample(t, &child_prob, &coins, verify::lossless);
        let next = sampling::sample_excluding(&rows[walk.last()], &walk.rejected, final_coin);
        Ok((walk, next))
    }

    /// Keep the accepted path's KV and emit its tokens.
    fn commit(&mut self, p: &Part, t: &Tree, (walk, next): (Walk, u32)) -> SeqUpdate {
        let b = self.target.model.backend().clone();
        let s = &mut self.running[p.seq];
        let base = s.committed;
        for (i, &node) in walk.path.iter().enumerate().filter(|(i, node)| *i != **node) {
            let (src, dst) = (s.table.slot(base + node), s.table.slot(base + i));
            for tensor in self.target.kv.k.iter_mut().chain(self.target.kv.v.iter_mut()) {
                b.move_rows(tensor, &[src], dst);
            }
        }
        s.committed += walk.path.len();
        let produced: Vec<u32> = walk.path[1..].iter().map(|&i| t.tokens[i]).chain([next]).collect();
        s.tokens.extend_from_slice(&produced);
        let room = s.max_tokens - s.out.len();
        let stop = if s.ignore_eos { &[][..] } else { &self.stop_ids[..] };
        let stop_at = produced.iter().position(|t| stop.contains(t)).filter(|&at| at < room);
        let keep = stop_at.unwrap_or(produced.len()).min(room);
        s.out.extend_from_slice(&produced[..keep]);
        let finished = match stop_at {
            Some(_) => Some(Finish::Stop),
            None if s.out.len() >= s.max_tokens => Some(Finish::Length),
            None => None,
        };
        SeqUpdate {
            id: s.id,
            tokens: produced[..keep].to_vec(),
            drafted: keep.min(walk.path.len() - 1),
            accept_length: Some(stop_at.map_or(keep, |at| at + 1)),
            finished,
        }
    }

    /// The drafter reads what the forward committed for each of `reads` and drafts the next
    /// verify tree of each that decodes: chains for the whole batch in one `draft_chains`, a
    /// tree (batch 1) level by level in its own cache.
    fn draft(&mut self, mut reads: Vec<Read>) -> Result<(), EngineError> {
        let Some(dr) = self.drafter.as_deref_mut().filter(|_| !reads.is_empty()) else { return Ok(()) };
        let aux = match (dr.wants_aux(), self.target.model.aux()) {
            (true, Some(aux)) => Some(aux),
            (true, None) => return Err(EngineError::Request("the target is not capturing hidden states for the drafter".into())),
            (false, _) => None,
        };
        let shape = self.shape;
        if !shape.is_chain() {
            for r in &reads {
                let s = &mut self.running[r.seq];
                let head = dr.extend(&s.tokens, s.committed, aux.map(|tensor| AuxRows { tensor, rows: &r.rows }))?;
                s.tree = match head {
                    Some(h) if !s.prefilling() => Some(tree::draft(dr, s.tokens[s.committed], s.committed, h, shape)?),
                    _ => None,
                };
            }
            return Ok(());
        }
        let length = shape.steps.min(shape.draft_tokens.saturating_sub(1));
        // The forward's slot lists, grown to the positions a read padded to the verify's rows
        // reaches (`committed + tree_rows - 1`); the table holds the verify's slots past the output.
        for r in &mut reads {
            let s = &self.running[r.seq];
            let first = r.slots.len();
            r.slots.extend((first..s.committed + self.tree_rows).map(|p| s.table.slot(p)));
        }
        let seqs: Vec<ChainSeq<'_>> = reads
            .iter()
            .map(|r| {
                let s = &self.running[r.seq];
                let aux_rows = if aux.is_some() { &r.rows[..] } else { &[] };
                ChainSeq {
                    tokens: &s.tokens,
                    committed: s.committed,
                    read: s.draft_read,
                    aux_rows,
                    slots: &r.slots,
                    draft: !s.prefilling(),
                }
            })
            .collect();
        let chains = dr.draft_chains(&seqs, aux, length)?;
        drop(seqs);
        // The drafts stay on the device until the verify reads them back (`chain_row`).
        let placeholders = vec![0; length];
        for (r, chain) in reads.iter().zip(chains) {
            let s = &mut self.running[r.seq];
            s.draft_read = chain.read;
            s.chain_row = chain.row;
            s.tree = chain.row.map(|_| Tree::chain(s.tokens[s.committed], &placeholders));
        }
        Ok(())
    }
}

/// The error of drafts on the device with no drafter that holds them (set_pool went).
fn no_chains() -> EngineError {
    EngineError::Request("drafted chains on the device, but the drafter holds none".into())
}

/// A scheduler as the serving thread drives it, whatever its backend (`ranks::Serve::serve_batch`).
pub trait Batch: Send {
    fn config(&self) -> SchedulerConfig;
    /// The longest prompt + output a request may ask for.
    fn context(&self) -> usize;
    fn running(&self) -> usize;
    fn queued(&self) -> usize;
    /// (free, total) KV blocks.
    fn blocks(&self) -> (usize, usize);
    fn is_idle(&self) -> bool;
    /// Queue a request; its id names it in every `SeqUpdate`.
    fn submit(&mut self, req: SeqRequest) -> Result<u64, EngineError>;
    /// Drop a waiting or running request and free its blocks; false when it is unknown.
    fn cancel(&mut self, id: u64) -> bool;
    /// Run one step of the running batch (admitting waiting requests first).
    fn step(&mut self) -> Result<Vec<SeqUpdate>, EngineError>;
    /// The target's tokenizer.
    fn tokenizer(&self) -> Arc<TextTokenizer>;
    /// Where the steps so far went (`publish_s` is the serving thread's to add).
    fn step_times(&self) -> StepTimes;
    /// The counts and times at once.
    fn status(&self) -> BatchStatus {
        let (kv_blocks_free, kv_blocks_total) = self.blocks();
        BatchStatus { running: self.running(), queued: self.queued(), kv_blocks_free, kv_blocks_total, times: self.step_times() }
    }
}

impl<B: Backend> Batch for Scheduler<B> {
    fn config(&self) -> SchedulerConfig {
        self.cfg
    }

    fn context(&self) -> usize {
        self.target.max_tokens().min(self.blocks().1 * BLOCK_TOKENS - self.tree_rows)
    }

    fn running(&self) -> usize {
        self.running.len()
    }

    fn queued(&self) -> usize {
        self.waiting.len()
    }

    fn blocks(&self) -> (usize, usize) {
        (self.pool.free_blocks(), self.pool.total() - self.pad.blocks())
    }

    fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    fn submit(&mut self, req: SeqRequest) -> Result<u64, EngineError> {
        let vocab = self.target.model.vocab();
        if req.prompt.is_empty() {
            return Err(EngineError::Request("the prompt has no tokens".into()));
        }
        if let Some(t) = req.prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::Request(format!("prompt token {t} is outside the target's vocabulary ({vocab})")));
        }
        if req.prompt.len().checked_add(req.max_tokens).is_none_or(|n| n > self.context()) {
            return Err(EngineError::Request(format!(
                "the prompt ({} tokens) plus max_tokens ({}) exceed the context ({} tokens)",
                req.prompt.len(),
                req.max_tokens,
                self.context()
            )));
        }
        sampling::check(&req.sampling).map_err(EngineError::Request)?;
        let id = self.next_id;
        self.next_id += 1;
        let seed = req.sampling.seed.unwrap_or(id);
        self.waiting.push_back(Seq {
            id,
            prompt_len: req.prompt.len(),
            tokens: req.prompt,
            committed: 0,
            table: BlockTable::default(),
            out: Vec::new(),
            max_tokens: req.max_tokens,
            ignore_eos: req.ignore_eos,
            sampling: req.sampling,
            rng: ChaCha8Rng::seed_from_u64(seed),
            draft_read: 0,
            tree: None,
            chain_row: None,
        });
        Ok(id)
    }

    fn cancel(&mut self, id: u64) -> bool {
        if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            self.waiting.remove(i);
            return true;
        }
        match self.running.iter().position(|s| s.id == id) {
            Some(i) => {
                let mut s = self.running.remove(i);
                s.table.release(&mut self.pool);
                true
            }
            None => false,
        }
    }

    fn step(&mut self) -> Result<Vec<SeqUpdate>, EngineError> {
        let b = self.target.model.backend().clone();
        b.run(|| self.step_here())
    }

    fn tokenizer(&self) -> Arc<TextTokenizer> {
        self.tokenizer.clone()
    }

    fn step_times(&self) -> StepTimes {
        self.times
    }
}

#[cfg(test)]
mod tests;
