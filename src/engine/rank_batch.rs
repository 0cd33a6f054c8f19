//! The continuous-batching scheduler over a tensor-parallel group: every rank runs its own
//! scheduler (`engine::scheduler`) over its shard of the target, on its own thread, and the
//! group gives each of them the same call at once, so that their forwards meet in the same
//! all-reduces. The ranks' answers must agree (ids, tokens); rank 0's are the group's.

use std::cell::Cell;
use std::sync::{mpsc, Arc};

use crate::engine::scheduler::{Batch, BatchStatus, SchedulerConfig, SeqRequest, SeqUpdate, StepTimes};
use crate::engine::EngineError;
use crate::model::tokenizer::TextTokenizer;

/// One call for a rank's scheduler, run on that rank's thread.
pub type BatchJob = Box<dyn FnOnce(&mut dyn Batch) + Send>;

/// Runs on a rank's thread inside its engine's `serve_batch`: every call the group sends,
/// until the group is done (its sender dropped).
pub fn serve_calls(batch: &mut dyn Batch, calls: mpsc::Receiver<BatchJob>) {
    for call in calls {
        call(batch);
    }
}

/// The group's scheduler as one `Batch`.
pub struct GroupBatch {
    ranks: Vec<mpsc::Sender<BatchJob>>,
    /// Rank 0's, which do not change while it serves.
    config: SchedulerConfig,
    context: usize,
    tokenizer: Arc<TextTokenizer>,
    /// Rank 0's status as its last step left it, until a submit or cancel changes it: the
    /// serving thread reads it after every step, and asking again would cost the hot path
    /// a second round trip to the ranks.
    status: Cell<Option<BatchStatus>>,
}

fn stopped(rank: usize) -> EngineError {
    EngineError::Request(format!("tensor-parallel rank {rank} stopped serving"))
}

impl GroupBatch {
    /// The group over the ranks' call channels (each rank serving them in `serve_calls`).
    pub fn new(ranks: Vec<mpsc::Sender<BatchJob>>) -> Result<GroupBatch, EngineError> {
        let (tx, rx) = mpsc::channel();
        ranks[0]
            .send(Box::new(move |b: &mut dyn Batch| {
                let _ = tx.send((b.config(), b.context(), b.tokenizer()));
            }))
            .map_err(|_| stopped(0))?;
        let (config, context, tokenizer) = rx.recv().map_err(|_| stopped(0))?;
        Ok(GroupBatch { ranks, config, context, tokenizer, status: Cell::new(None) })
    }

    /// `f` on every rank's scheduler at once; the answers in rank order.
    fn on_all<R: Send + 'static>(&self, f: impl Fn(&mut dyn Batch) -> R + Send + Sync + 'static) -> Result<Vec<R>, EngineError> {
        let f = Arc::new(f);
        let (tx, rx) = mpsc::channel();
        for (rank, r) in self.ranks.iter().enumerate() {
            let (f, tx) = (f.clone(), tx.clone());
            r.send(Box::new(move |b: &mut dyn Batch| {
                let _ = tx.send((rank, f(b)));
            }))
            .map_err(|_| stopped(rank))?;
        }
        drop(tx);
        let mut out: Vec<Option<R>> = (0..self.ranks.len()).map(|_| None).collect();
        for (rank, r) in rx {
            out[rank] = Some(r);
        }
        out.into_iter().enumerate().map(|(rank, r)| r.ok_or_else(|| stopped(rank))).collect()
    }

    /// `f` on rank 0's scheduler (what every rank holds alike: counts, sizes, the tokenizer).
    fn on_first<R: Send + 'static>(&self, f: impl FnOnce(&mut dyn Batch) -> R + Send + 'static) -> Result<R, EngineError> {
        let (tx, rx) = mpsc::channel();
        self.ranks[0]
            .send(Box::new(move |b: &mut dyn Batch| {
                let _ = tx.send(f(b));
            }))
            .map_err(|_| stopped(0))?;
        rx.recv().map_err(|_| stopped(0))
    }

    /// Rank 0's answer, once every rank gave the same.
    fn agreed<T: PartialEq>(answers: Vec<T>, what: &str) -> Result<T, EngineError> {
        let mut answers = answers.into_iter();
        let first = answers.next().expect("a group has rank 0");
        match answers.position(|a| a != first) {
            None => Ok(first),
            Some(r) => Err(EngineError::Request(format!("tensor-parallel rank {} {what} other than rank 0's", r + 1))),
        }
    }
}

impl Batch for GroupBatch {
    fn config(&self) -> SchedulerConfig {
        self.config
    }

    fn context(&self) -> usize {
        self.context
    }

    fn running(&self) -> usize {
        self.status().running
    }

    fn queued(&self) -> usize {
        self.status().queued
    }

    fn blocks(&self) -> (usize, usize) {
        let s = self.status();
        (s.kv_blocks_free, s.kv_blocks_total)
    }

    fn is_idle(&self) -> bool {
        self.status().is_idle()
    }

    fn submit(&mut self, req: SeqRequest) -> Result<u64, EngineError> {
        self.status.set(None);
        let ids = self.on_all(move |b| b.submit(req.clone()).map_err(|e| e.to_string()))?;
        Self::agreed(ids, "queued the request under an id")?.map_err(EngineError::Request)
    }

    fn cancel(&mut self, id: u64) -> bool {
        self.status.set(None);
        self.on_all(move |b| b.cancel(id)).is_ok_and(|c| c.into_iter().all(|c| c))
    }

    fn step(&mut self) -> Result<Vec<SeqUpdate>, EngineError> {
        self.status.set(None);
        let answers = self.on_all(|b| b.step().map_err(|e| e.to_string()).map(|u| (u, b.status())))?;
        let status = answers.first().and_then(|a| a.as_ref().ok()).map(|(_, s)| *s);
        let updates = answers.into_iter().map(|a| a.map(|(u, _)| u)).collect();
        let updates = Self::agreed(updates, "stepped to tokens")?.map_err(EngineError::Request)?;
        self.status.set(status);
        Ok(updates)
    }

    fn tokenizer(&self) -> Arc<TextTokenizer> {
        self.tokenizer.clone()
    }

    fn step_times(&self) -> StepTimes {
        self.status().times
    }

    fn status(&self) -> BatchStatus {
        if let Some(s) = self.status.get() {
            return s;
        }
        // A group whose rank 0 stopped shows as idle and empty; its next step reports why.
        let s = self.on_first(|b| b.status()).unwrap_or_default();
        self.status.set(Some(s));
        s
    }
}
