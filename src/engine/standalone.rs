//! The STANDALONE drafter: any smaller model of a target family (Llama or DeepSeek-V3) with the
//! target's tokenizer, run as its own target over the committed sequence and the draft tree.

use crate::backend::{AttnWindow, Backend, Mask};
use crate::engine::drafter::{draft_step_key, graph_or_eager, AuxRows, Candidate, DraftState, Drafter, TopK};
use crate::engine::kv::KvCache;
use crate::engine::llama::Logits;
use crate::engine::target_model::TargetModel;
use crate::engine::EngineError;

pub struct StandaloneDrafter<B: Backend> {
    model: TargetModel<B>,
    kv: KvCache<B>,
    top: TopK<B>,
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
            self.kv = self.model.new_kv(kv_slots)?;
        }
        self.model.ensure_positions(kv_slots)?;
        self.top = TopK::new(&*b, self.model.capacity().logit_rows, topk)?;
        self.len = 0;
        Ok(())
    }

    fn new_state(&mut self, kv_slots: usize) -> Result<DraftState<B>, EngineError> {
        self.model.ensure_positions(kv_slots)?;
        Ok(DraftState { kv: self.model.new_kv(kv_slots)?, len: 0 })
    }

    fn swap_state(&mut self, state: &mut DraftState<B>) {
        std::mem::swap(&mut self.kv, &mut state.kv);
        std::mem::swap(&mut self.len, &mut state.len);
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
        let b = self.model.backend().clone();
        let rows = self.model.capacity().rows;
        while self.len < end {
            let n = (end - self.len).min(rows);
            let positions: Vec<usize> = (self.len..self.len + n).collect();
            let last = self.len + n == end;
            let window = AttnWindow { prefix: self.len, region: n, queries: n };
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
