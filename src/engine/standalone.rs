//! The STANDALONE drafter: any smaller model of a target family (Llama or DeepSeek-V3) with the
//! target's tokenizer, run as its own target over the committed sequence and the draft tree.

use crate::backend::{AttnWindow, Backend, Mask, PagedBatch};
use crate::engine::drafter::{
    self, check_kv, draft_step_key, graph_or_eager, no_pool, step_as, AuxRows, Candidate, Chain, ChainForwards, ChainSeq, ChainTokens,
    Drafter, ExtendBatch, LevelBatch, PoolSize, TopK,
};
use crate::engine::kv::KvCache;
use crate::engine::llama::Logits;
use crate::engine::target_model::TargetModel;
use crate::engine::EngineError;

pub struct StandaloneDrafter<B: Backend> {
    model: TargetModel<B>,
    kv: KvCache<B>,
    /// Slots of the one sequence's cache (`extend`, `step`), which a pool replaces.
    own_slots: usize,
    /// The batch's pool, while the drafter keeps one (`set_pool`).
    pool: Option<PoolSize>,
    /// The chains drafted over the pool.
    chain: Option<ChainTokens<B>>,
    top: TopK<B>,
    topk: usize,
    mask: B::Ids,
    /// Positions `[0, len)` are in the draft KV (the root included).
    len: usize,
    graph_rows: usize,
}

impl<B: Backend> StandaloneDrafter<B> {
    pub fn new(model: TargetModel<B>, target_vocab: usize, kv_slots: usize, topk: usize, file: &str) -> Result<Self, EngineError> {
        if model.vocab() > target_vocab {
            return Err(EngineError::Invalid {
                file: file.to_string(),
                key: "/vocab_size".into(),
                message: format!("{} is larger than the target's {target_vocab}: it must share the tokenizer", model.vocab()),
            });
        }
        let b = model.backend().clone();
        let cap = model.capacity();
        Ok(StandaloneDrafter {
            kv: model.new_kv(kv_slots)?,
            top: TopK::new(&*b, cap.logit_rows, topk)?,
            topk,
            own_slots: kv_slots,
            pool: None,
            chain: None,
            mask: b.ids(cap.logit_rows * cap.rows)?,
            len: 0,
            graph_rows: 0,
            model,
        })
    }
}

impl<B: Backend> Drafter<B> for StandaloneDrafter<B> {
    fn reset(&mut self) {
        self.len = 0;
    }

    fn resize(&mut self, kv_slots: usize, topk: usize) -> Result<(), EngineError> {
        let b = self.model.backend().clone();
        if self.kv.slots != kv_slots {
            let model = &self.model;
            self.kv.replace(|| model.new_kv(kv_slots))?;
        }
        self.model.ensure_positions(kv_slots)?;
        (self.own_slots, self.topk, self.pool) = (kv_slots, topk, None);
        self.top = TopK::new(&*b, self.model.capacity().logit_rows, topk)?;
        self.len = 0;
        Ok(())
    }

    fn set_pool(&mut self, size: Option<PoolSize>) -> Result<(), EngineError> {
        let b = self.model.backend().clone();
        let slots = size.as_ref().map_or(self.own_slots, |p| p.slots);
        if self.kv.slots < slots {
            let model = &self.model;
            self.kv.replace(|| model.new_kv(slots))?;
        }
        self.len = 0;
        self.chain = size.as_ref().map(|p| ChainTokens::for_layout(&*b, &p.layout)).transpose()?;
        if let Some(p) = &size {
            self.model.set_batch_capacity(p.layout.forward_rows(), p.layout.step_seqs(), p.layout.seq_rows(), p.positions)?;
            self.top = TopK::new(&*b, self.model.capacity().logit_rows, self.topk)?;
        }
        self.pool = size;
        Ok(())
    }

    fn draft_chains(&mut self, seqs: &[ChainSeq<'_>], aux: Option<&B::Tensor>, length: usize) -> Result<Vec<Chain>, EngineError> {
        check_kv(&self.kv)?;
        let pool = self.pool.take().ok_or_else(no_pool)?;
        let graphs = self.graph_rows > 0 && self.model.graphs_capture();
        let drafted = drafter::draft_chains(self, &pool, graphs, seqs, aux, length);
        self.pool = Some(pool);
        drafted
    }

    fn chain_tokens(&self) -> Option<&ChainTokens<B>> {
        self.chain.as_ref()
    }

    fn wants_aux(&self) -> bool {
        false
    }

    fn set_graph_rows(&mut self, rows: usize) {
        self.graph_rows = rows;
    }

    fn weight_bytes(&self) -> u64 {
        self.model.weight_bytes()
    }

    fn region_base(&self) -> usize {
        self.len
    }

    fn extend(&mut self, seq: &[u32], committed: usize, _aux: Option<AuxRows<'_, B>>) -> Result<Option<Vec<Candidate>>, EngineError> {
        // Tokens up to and including the root, at their own positions.
        let end = committed + 1;
        if end <= self.len {
            return Ok(None);
        }
        check_kv(&self.kv)?;
        let b = self.model.backend().clone();
        let rows = self.model.capacity().rows;
        while self.len < end {
            let n = (end - self.len).min(rows);
            let positions: Vec<usize> = (self.len..self.len + n).collect();
            let last = self.len + n == end;
            let window = AttnWindow { prefix: self.len, region: n, queries: n };
            self.model.prepare_forward(window, None);
            let (model, kv, top) = (&mut self.model, &mut self.kv, &mut self.top);
            let mut failed = None;
            let mut ops = || {
                model.inputs().set(&*b, &seq[window.prefix..window.prefix + n], &positions);
                match model.forward(kv, window, Mask::Causal, if last { Logits::Last } else { Logits::None }) {
                    Ok(()) if last => top.enqueue(&*b, model.logits_mut(), 1),
                    Ok(()) => {}
                    Err(e) => failed = Some(e),
                }
            };
            // Every cycle ends here with the accepted tokens: as a graph, a small drafter's
            // forward costs its kernels' time and not their launches'.
            if last {
                graph_or_eager(&*b, self.graph_rows, &format!("draft-extend/standalone/{n}"), n, &mut ops);
            } else {
                ops();
            }
            if let Some(e) = failed {
                return Err(e.into());
            }
            self.len += n;
        }
        let head = self.top.read(&*b, 1, |d| d as u32)?;
        Ok(head.into_iter().next())
    }

    fn step(
        &mut self,
        tokens: &[u32],
        _parents: &[usize],
        position: usize,
        region: usize,
        mask: &[i32],
    ) -> Result<Vec<Vec<Candidate>>, EngineError> {
        let b = self.model.backend().clone();
        let n = tokens.len();
        let positions = vec![position; n];
        let window = AttnWindow { prefix: self.len, region, queries: n };
        self.model.prepare_forward(window, Some(mask));
        let (model, kv, mask_ids, top) = (&mut self.model, &mut self.kv, &mut self.mask, &mut self.top);
        let mut failed = None;
        let mut ops = || {
            model.inputs().set(&*b, tokens, &positions);
            b.write_ids(mask_ids, mask);
            match model.forward(kv, window, Mask::Explicit(&*mask_ids), Logits::All) {
                Ok(()) => top.enqueue(&*b, model.logits_mut(), n),
                Err(e) => failed = Some(e),
            }
        };
        graph_or_eager(&*b, self.graph_rows, &draft_step_key("standalone", n, region), n, &mut ops);
        if let Some(e) = failed {
            return Err(e.into());
        }
        Ok(self.top.read(&*b, n, |d| d as u32)?)
    }
}

impl<B: Backend> StandaloneDrafter<B> {
    /// One forward of `batch` over the pool with `inputs` (ids, where the device does not
    /// hold them already, and positions), the top-k of `logit_rows` enqueued, as the graph
    /// step `key` where there is one.
    fn forward_pooled(
        &mut self,
        batch: &PagedBatch<'_, B>,
        (ids, positions): (Option<&[u32]>, &[usize]),
        logit_rows: &[usize],
        key: Option<&str>,
    ) -> Result<(), EngineError> {
        let b = self.model.backend().clone();
        match ids {
            Some(ids) => self.model.inputs().set(&*b, ids, positions),
            None => self.model.inputs().set_positions(&*b, positions),
        }
        self.model.prepare_batch(batch)?;
        let (model, kv, top) = (&mut self.model, &mut self.kv, &mut self.top);
        let mut forward = Ok(());
        step_as(&*b, key, &mut || {
            forward = model.forward_batch(kv, batch, logit_rows);
            if forward.is_ok() {
                top.enqueue(&*b, model.logits_mut(), logit_rows.len());
            }
        });
        Ok(forward?)
    }
}

/// A standalone drafter reads every token up to the root at its own position, as a target
/// does: it reads one past `committed`, and a level's KV goes to its position's slot.
impl<B: Backend> ChainForwards<B> for StandaloneDrafter<B> {
    const AHEAD: usize = 1;

    fn read(&mut self, ext: &ExtendBatch<'_, B>, _aux: Option<&B::Tensor>) -> Result<(), EngineError> {
        let batch = PagedBatch::new(&ext.seqs, ext.rows());
        self.forward_pooled(&batch, (Some(&ext.ids), &ext.positions), &ext.last_rows, ext.graph_key("standalone").as_deref())
    }

    fn level(&mut self, level: &LevelBatch<'_, B>) -> Result<(), EngineError> {
        let batch = PagedBatch::new(&level.seqs, level.rows());
        let rows: Vec<usize> = (0..level.rows()).collect();
        self.forward_pooled(&batch, (None, &level.positions), &rows, level.graph_key("standalone").as_deref())
    }

    fn pick(&mut self, rows: usize, level: usize) -> Result<(), EngineError> {
        let b = self.model.backend().clone();
        let chain = self.chain.as_mut().ok_or_else(no_pool)?;
        chain.pick(&*b, &self.top, None, rows, level, &mut self.model.inputs().ids)
    }
}
