//! The speculative decoding loop (one request), after SGLang's EAGLE worker:
//!
//! 1. Prefill the prompt except its last token, which becomes the root of the first tree; the
//!    drafter reads each prefill chunk (with the target's captured hiddens for EAGLE-3).
//! 2. Repeat: draft a tree from the drafter's top-k after the root; run the target once over
//!    the whole tree (positions `committed + depth`, tree mask); accept a path (greedy or
//!    rejection sampling) plus one token of the target's own; keep the path's KV and drop
//!    the rest; let the drafter read the accepted tokens; the target's token is the next root.
//!
//! Without a drafter every tree is the root alone, which is plain target-only decoding
//! through the same code. The first generated token already goes through verification, so
//! even it is sampled by the speculative rule.

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::backend::{AttnWindow, Backend, Mask};
use crate::engine::batch_buffers::BatchBuffers;
use crate::engine::drafter::{AuxRows, Candidate, Drafter};
use crate::engine::kv::KvCache;
use crate::engine::llama::Logits;
use crate::engine::request::Cancel;
use crate::engine::target_model::TargetModel;
use crate::engine::tree::{self, Tree, TreeShape};
use crate::engine::verify::{self, AcceptRule, Walk};
use crate::engine::EngineError;

/// The target with its KV cache and verify buffers.
pub struct Target<B: Backend> {
    pub model: TargetModel<B>,
    pub kv: KvCache<B>,
    /// Verify-tree slots reserved after the committed tokens.
    pub tree_slots: usize,
    /// The longest sequence a request may reach when the cache holds more (a KV pool sized
    /// from memory, longer than the context).
    pub context: Option<usize>,
    mask: B::Ids,
    argmax: B::Ids,
    /// Greedy verify steps (target-only decode included) of at most this many rows run as
    /// graph steps, recorded once per row count and shape and replayed after
    /// (`Backend::graph_step`, a GPU backend; 0: none).
    pub graph_rows: usize,
    /// The continuous-batching scheduler's buffers, kept between servings (and from the
    /// launch's graph capture on) so that its graph steps replay.
    pub batch: Option<BatchBuffers<B>>,
}

impl<B: Backend> Target<B> {
    /// `kv_slots` = the longest sequence plus `tree_slots`.
    pub fn new(model: TargetModel<B>, kv_slots: usize, tree_slots: usize) -> Result<Self, EngineError> {
        let b = model.backend().clone();
        let rows = model.capacity().logit_rows;
        Ok(Target {
            kv: model.new_kv(kv_slots)?,
            mask: b.ids(rows * rows)?,
            argmax: b.ids(rows)?,
            tree_slots,
            context: None,
            graph_rows: 0,
            batch: None,
            model,
        })
    }

    /// Give the KV cache back and keep the model (a relaunch sizes a new cache).
    pub fn into_model(self) -> TargetModel<B> {
        self.model
    }

    /// The same target for a relaunch that needs `kv_slots` and `tree_slots`: the cache is
    /// kept when its size is unchanged (a request overwrites the slots it reads), so a
    /// relaunch neither frees nor zeroes it again.
    pub fn resized(self, kv_slots: usize, tree_slots: usize) -> Result<Self, EngineError> {
        if self.kv.slots == kv_slots && self.tree_slots == tree_slots && self.kv.dtype == self.model.kv_dtype() {
            return Ok(self);
        }
        Target::new(self.into_model(), kv_slots, tree_slots)
    }

    /// The longest sequence (prompt + output) a request may reach.
    pub fn max_tokens(&self) -> usize {
        let room = self.kv.slots - self.tree_slots;
        self.context.map_or(room, |c| c.min(room))
    }

    /// Run the target over a verify tree rooted at position `base` and accept a path.
    fn verify(&mut self, tree: &Tree, base: usize, sampling: Option<(&Sampling, &mut ChaCha8Rng)>) -> Result<(Walk, u32), EngineError> {
        let b = self.model.backend().clone();
        let n = tree.len();
        let positions = tree.positions(base);
        let tree_mask = (!tree.is_chain()).then(|| tree.mask());
        let window = AttnWindow { prefix: base, region: n, queries: n };
        self.model.prepare_forward(window, tree_mask.as_deref());
        let (model, kv, mask_ids, argmax) = (&mut self.model, &mut self.kv, &mut self.mask, &mut self.argmax);
        let greedy = sampling.is_none();
        let mut failed = Ok(());
        // Everything up to the argmax only enqueues work, so a greedy step can be a graph.
        let mut step = || {
            model.inputs().set(&*b, &tree.tokens, &positions);
            let mask = match &tree_mask {
                None => Mask::Causal,
                Some(m) => {
                    b.write_ids(mask_ids, m);
                    Mask::Explicit(&*mask_ids)
                }
            };
            failed = model.forward(kv, window, mask, Logits::All);
            if greedy && failed.is_ok() {
                b.argmax(model.logits(), n, argmax);
            }
        };
        if greedy && n <= self.graph_rows {
            let shape = if tree_mask.is_some() { "tree" } else { "chain" };
            b.graph_step(&format!("target-verify/{n}/{shape}"), &mut step);
        } else {
            step();
        }
        failed?;
        let Some((s, rng)) = sampling else {
            let argmax: Vec<u32> = b.read_ids(&self.argmax, n)?.into_iter().map(|t| t as u32).collect();
            return Ok(verify::greedy(tree, &argmax));
        };
        let coins: Vec<f32> = (0..n).map(|_| rng.random::<f32>()).collect();
        let final_coin: f32 = rng.random();
        b.softmax(self.model.logits_mut(), n, s.temperature);
        let coords: Vec<(usize, usize)> =
            (1..n).map(|i| (tree.parent[i].expect("non-root nodes have parents"), tree.tokens[i] as usize)).collect();
        let mut child_prob = vec![0.0];
        child_prob.extend(b.read_elements(self.model.logits(), &coords)?);
        let walk = verify::sample(tree, &child_prob, &coins, s.rule);
        let next = b.sample(self.model.logits(), walk.last(), &walk.rejected, final_coin)?;
        Ok((walk, next))
    }

    /// Record and capture the greedy verify step of `n` rows (a chain, or a tree when
    /// `tree`) as a graph: the step run twice on placeholder tokens at the start of the cache,
    /// whose slots a generation overwrites from its prefill on.
    pub fn capture_verify(&mut self, n: usize, tree: bool) -> Result<(), EngineError> {
        let placeholder = Tree {
            tokens: vec![0; n],
            parent: (0..n).map(|i| if tree { (i > 0).then_some(0) } else { i.checked_sub(1) }).collect(),
            depth: (0..n).map(|i| if tree { i.min(1) } else { i }).collect(),
        };
        for _ in 0..2 {
            self.verify(&placeholder, 0, None)?;
        }
        Ok(())
    }

    fn aux(&self) -> Option<&B::Tensor> {
        self.model.aux()
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    pub temperature: f32,
    pub seed: u64,
    pub rule: AcceptRule,
}

#[derive(Clone, Debug)]
pub struct Decoding {
    /// The draft tree shape (ignored without a drafter).
    pub shape: TreeShape,
    /// `None`: greedy.
    pub sampling: Option<Sampling>,
    pub max_new_tokens: usize,
    /// Token ids that end generation (not emitted).
    pub stop: Vec<u32>,
    /// Checked before each prefill chunk and each decode step: once set, the generation
    /// ends there with the tokens it has (`Generation::cancelled`).
    pub cancel: Cancel,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// Tokens each verify step produced (accepted drafts + the target's own, a stop token
    /// counted), so 1 ..= steps + 1.
    pub accept_lengths: Vec<usize>,
    /// Accepted draft tokens in `tokens`.
    pub drafted: usize,
    pub stopped: bool,
    /// Ended early by `Decoding::cancel`.
    pub cancelled: bool,
    pub prefill_seconds: f64,
    /// Decode time spent drafting (the tree and the drafter reading the accepted tokens);
    /// each ends on a read-back, so the host clock sees the device's time.
    pub draft_seconds: f64,
    pub seconds: f64,
}

impl Generation {
    pub fn mean_accept_length(&self) -> f64 {
        if self.accept_lengths.is_empty() {
            0.0
        } else {
            self.accept_lengths.iter().sum::<usize>() as f64 / self.accept_lengths.len() as f64
        }
    }

    pub fn tokens_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.tokens.len() as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Verify steps that emitted `n` tokens, indexed by `n`.
    pub fn accept_histogram(&self) -> Vec<u64> {
        let mut h = vec![0u64; self.accept_lengths.iter().max().map_or(0, |m| m + 1)];
        for &a in &self.accept_lengths {
            h[a] += 1;
        }
        h
    }
}

fn extend<B: Backend>(
    drafter: &mut dyn Drafter<B>,
    target: &Target<B>,
    seq: &[u32],
    committed: usize,
    rows: &[usize],
) -> Result<Option<Vec<Candidate>>, EngineError> {
    let aux = match (drafter.wants_aux(), target.aux()) {
        (true, Some(tensor)) => Some(AuxRows { tensor, rows }),
        (true, None) => return Err(EngineError::Request("the target is not capturing hidden states for the drafter".into())),
        (false, _) => None,
    };
    drafter.extend(seq, committed, aux)
}

/// The callback that sees each committed group of tokens as it lands.
pub type OnTokens<'a> = &'a mut (dyn FnMut(&[u32], bool) + Send);

/// Generate from `prompt`; `on_tokens(ids, drafted)` sees each committed group as it lands.
pub fn generate<B: Backend>(
    target: &mut Target<B>,
    drafter: Option<&mut dyn Drafter<B>>,
    prompt: &[u32],
    d: &Decoding,
    on_tokens: OnTokens<'_>,
) -> Result<Generation, EngineError> {
    let b = target.model.backend().clone();
    b.run(|| generate_here(target, drafter, prompt, d, on_tokens))
}

fn generate_here<B: Backend>(
    target: &mut Target<B>,
    mut drafter: Option<&mut dyn Drafter<B>>,
    prompt: &[u32],
    d: &Decoding,
    on_tokens: OnTokens<'_>,
) -> Result<Generation, EngineError> {
    let start = Instant::now();
    if prompt.is_empty() {
        return Err(EngineError::Request("the prompt has no tokens".into()));
    }
    if prompt.len().checked_add(d.max_new_tokens).is_none_or(|n| n > target.max_tokens()) {
        return Err(EngineError::Request(format!(
            "the prompt ({} tokens) plus --max-new-tokens ({}) exceed the KV cache ({} tokens)",
            prompt.len(),
            d.max_new_tokens,
            target.max_tokens()
        )));
    }
    let vocab = target.model.vocab();
    if let Some(t) = prompt.iter().find(|&&t| t as usize >= vocab) {
        return Err(EngineError::Request(format!("prompt token {t} is outside the target's vocabulary ({vocab})")));
    }
    let b = target.model.backend().clone();
    if let Some(dr) = drafter.as_deref_mut() {
        dr.reset();
    }
    let mut seq = prompt.to_vec();
    let mut committed = 0;
    let mut head = None;
    let rows = target.model.capacity().rows;
    while committed + 1 < seq.len() {
        if d.cancel.stops_here() {
            return Ok(Generation { cancelled: true, seconds: start.elapsed().as_secs_f64(), ..Generation::default() });
        }
        let n = (seq.len() - 1 - committed).min(rows);
        let positions: Vec<usize> = (committed..committed + n).collect();
        target.model.inputs().set(&*b, &seq[committed..committed + n], &positions);
        let window = AttnWindow { prefix: committed, region: n, queries: n };
        target.model.forward(&mut target.kv, window, Mask::Causal, Logits::None)?;
        committed += n;
        if let Some(dr) = drafter.as_deref_mut() {
            head = extend(dr, target, &seq, committed, &(0..n).collect::<Vec<_>>())?;
        }
    }
    b.sync()?;
    let mut out = Generation { prefill_seconds: start.elapsed().as_secs_f64(), ..Generation::default() };
    let mut rng = ChaCha8Rng::seed_from_u64(d.sampling.map_or(0, |s| s.seed));
    while out.tokens.len() < d.max_new_tokens {
        if d.cancel.stops_here() {
            out.cancelled = true;
            break;
        }
        let root = seq[committed];
        let tree = match (drafter.as_deref_mut(), head.take()) {
            (Some(dr), Some(h)) => {
                let drafting = Instant::now();
                let tree = tree::draft(dr, root, committed, h, d.shape)?;
                out.draft_seconds += drafting.elapsed().as_secs_f64();
                tree
            }
            _ => Tree::root(root),
        };
        let (walk, next) = target.verify(&tree, committed, d.sampling.as_ref().map(|s| (s, &mut rng)))?;
        target.kv.commit_path(&*b, committed, &walk.path);
        committed += walk.path.len();
        let produced: Vec<u32> = walk.path[1..].iter().map(|&i| tree.tokens[i]).chain([next]).collect();
        seq.extend_from_slice(&produced);
        let room = d.max_new_tokens - out.tokens.len();
        let stop_at = produced.iter().position(|t| d.stop.contains(t)).filter(|&s| s < room);
        let keep = stop_at.unwrap_or(produced.len()).min(room);
        out.accept_lengths.push(stop_at.map_or(keep, |s| s + 1));
        let accepted = keep.min(walk.path.len() - 1);
        if accepted > 0 {
            on_tokens(&produced[..accepted], true);
        }
        if keep > accepted {
            on_tokens(&produced[accepted..keep], false);
        }
        out.drafted += accepted;
        out.tokens.extend_from_slice(&produced[..keep]);
        if stop_at.is_some() {
            out.stopped = true;
            break;
        }
        if out.tokens.len() >= d.max_new_tokens {
            break;
        }
        if let Some(dr) = drafter.as_deref_mut() {
            let drafting = Instant::now();
            head = extend(dr, target, &seq, committed, &walk.path)?;
            out.draft_seconds += drafting.elapsed().as_secs_f64();
        }
    }
    b.sync()?;
    out.seconds = start.elapsed().as_secs_f64();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::cpu::CpuBackend;
    use crate::engine::llama::{Capacity, Family, LlamaConfig, LlamaModel};
    use crate::engine::weights::Loader;
    use crate::model::checkpoint::Checkpoint;
    use crate::model::config::ModelConfig;
    use crate::testkit::TinyLlama;

    /// The graph-capture phase runs verify steps on placeholder tokens at the start of the
    /// cache; the generation after it must be the one a fresh cache gives.
    #[test]
    fn capturing_verify_steps_leaves_no_trace_in_a_generation() {
        let dir = tempfile::tempdir().unwrap();
        TinyLlama::new(Family::Llama, 41).write(dir.path()).unwrap();
        let config = LlamaConfig::from_config(&ModelConfig::load_dir(dir.path()).unwrap()).unwrap();
        let ck = Checkpoint::open(dir.path()).unwrap();
        let b = Arc::new(CpuBackend);
        let mut progress = |_| {};
        let mut ld = Loader::new(&*b, &ck, &mut progress);
        let model = LlamaModel::load(b.clone(), config, &mut ld, Capacity { rows: 16, logit_rows: 8, positions: 128 }).unwrap();
        ld.finish();
        let decoding = Decoding {
            shape: TreeShape { steps: 1, topk: 1, draft_tokens: 1 },
            sampling: None,
            max_new_tokens: 20,
            stop: Vec::new(),
            cancel: Cancel::default(),
        };
        let prompt = [5, 9, 17, 33];
        let mut fresh = Target::new(model.into(), 64, 8).unwrap();
        let want = generate(&mut fresh, None, &prompt, &decoding, &mut |_, _| {}).unwrap().tokens;
        let mut captured = Target::new(fresh.into_model(), 64, 8).unwrap();
        captured.capture_verify(1, false).unwrap();
        captured.capture_verify(6, true).unwrap();
        let got = generate(&mut captured, None, &prompt, &decoding, &mut |_, _| {}).unwrap().tokens;
        assert_eq!(got, want);
        assert_eq!(got.len(), 20);
    }
}
