//! A tensor-parallel engine: one `Engine` per rank, each on its own thread with its own
//! backend (one GPU, one stream), all given the same commands (`engine::tp` says why the
//! ranks are whole engines). Rank 0 reports to the caller's event stream; the other ranks'
//! load progress (tagged with their GPU), findings and warnings are forwarded to it.
//!
//! `Serve` is what a command needs from an engine, so `generate`, `bench` and the console's
//! engine thread drive one rank or N the same way.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::backend::cpu::CpuBackend;
use crate::backend::Backend;
use crate::engine::findings::BACKEND_ERROR;
use crate::engine::lifecycle::Engine;
use crate::engine::rank_batch::{serve_calls, BatchJob, GroupBatch};
use crate::engine::rank_vote::RankVote;
use crate::engine::request::{Cancel, GenerateRequest, LaunchOutcome, PreflightFn};
use crate::engine::scheduler::{Batch, SchedulerConfig};
use crate::engine::spec_decode::Generation;
use crate::engine::EngineError;
use crate::event::{Event, EventSink, LogLevel};
use crate::finding::{Finding, Severity};
use crate::phase::PhaseId;
use crate::spec::LaunchSpec;

/// What the headless commands and the console's engine thread need from an engine.
pub trait Serve {
    fn launch(&mut self, spec: &LaunchSpec, preflight: &PreflightFn) -> LaunchOutcome;
    /// Serve a request (`use_drafter: false` decodes target-only with the drafter loaded).
    fn generate_with(&mut self, req: &GenerateRequest, use_drafter: bool) -> Result<Generation, EngineError>;
    /// The prompt's token ids as `generate_with` reads the request.
    fn prompt_ids(&self, req: &GenerateRequest) -> Result<Vec<u32>, EngineError>;
    /// Bytes of weights one target step and one draft step read, on one rank.
    fn weight_bytes(&self) -> (u64, Option<u64>);
    /// Token ids to text with the loaded target's tokenizer.
    fn decode(&self, ids: &[u32]) -> Result<String, EngineError>;
    /// Where it runs: the backend's name and the tensor-parallel ranks.
    fn placement(&self) -> (&'static str, usize);
    /// The memory of the GPU it runs on (rank 0's), in bytes; `None` on the CPU.
    fn gpu_memory(&self) -> Option<u64>;
    /// Run `serve` on a continuous-batching scheduler (`engine::scheduler`) over the ready
    /// launch; the engine keeps its parts afterwards. An error, before `serve` runs, when
    /// this engine cannot serve batched.
    fn serve_batch(&mut self, cfg: SchedulerConfig, serve: &mut dyn FnMut(&mut dyn Batch)) -> Result<(), EngineError>;
}

impl<B: Backend> Serve for Engine<B> {
    fn launch(&mut self, spec: &LaunchSpec, preflight: &PreflightFn) -> LaunchOutcome {
        Engine::launch(self, spec, &**preflight)
    }

    fn generate_with(&mut self, req: &GenerateRequest, use_drafter: bool) -> Result<Generation, EngineError> {
        Engine::generate_with(self, req, use_drafter)
    }

    fn prompt_ids(&self, req: &GenerateRequest) -> Result<Vec<u32>, EngineError> {
        Engine::prompt_ids(self, req)
    }

    fn weight_bytes(&self) -> (u64, Option<u64>) {
        Engine::weight_bytes(self)
    }

    fn decode(&self, ids: &[u32]) -> Result<String, EngineError> {
        let tok = self.tokenizer().ok_or_else(|| EngineError::Request("no target is loaded".into()))?;
        Ok(tok.decode(ids)?)
    }

    fn placement(&self) -> (&'static str, usize) {
        (self.backend_name(), 1)
    }

    fn gpu_memory(&self) -> Option<u64> {
        Engine::gpu_memory(self)
    }

    fn serve_batch(&mut self, cfg: SchedulerConfig, serve: &mut dyn FnMut(&mut dyn Batch)) -> Result<(), EngineError> {
        Engine::serve_batch(self, cfg, serve)
    }
}

/// The engine `--device` and `--tp-size` ask for: the CPU reference (also `auto` without a
/// GPU), one CUDA rank, or a group of CUDA ranks. No GPU for `--device cuda`, or fewer GPUs
/// than `--tp-size`, is a finding.
pub fn engine_for(spec: &LaunchSpec, events: &EventSink, cancel: &Cancel) -> Result<Box<dyn Serve>, Finding> {
    Ok(match crate::engine::device::backends_for(spec, events)? {
        None => Box::new(Engine::new(CpuBackend, events.clone()).cancelled_by(cancel.clone())),
        Some(mut ranks) if ranks.len() == 1 => Box::new(Engine::new(ranks.remove(0), events.clone()).cancelled_by(cancel.clone())),
        Some(ranks) => Box::new(RankGroup::start(ranks, events.clone(), cancel)),
    })
}

type Job<B> = Box<dyn FnOnce(&mut Engine<B>) + Send>;

/// N engines, one per rank, each on its own thread.
pub struct RankGroup<B: Backend> {
    ranks: Vec<mpsc::Sender<Job<B>>>,
    threads: Vec<JoinHandle<()>>,
}

impl<B: Backend> RankGroup<B> {
    /// One engine per backend, rank `r` on `backends[r]`; `cancel` stops a generation on
    /// every rank at the same step.
    pub fn start(backends: Vec<B>, events: EventSink, cancel: &Cancel) -> RankGroup<B> {
        let vote = Arc::new(RankVote::new(backends.len()));
        let mut ranks = Vec::new();
        let mut threads = Vec::new();
        let cancels = cancel.for_ranks(backends.len());
        for ((rank, backend), cancel) in backends.into_iter().enumerate().zip(cancels) {
            let sink = if rank == 0 { events.clone() } else { forwarded(rank, events.clone(), &mut threads) };
            let (tx, rx) = mpsc::channel::<Job<B>>();
            let vote = vote.clone();
            let thread = std::thread::Builder::new()
                .name(format!("specdeck-rank-{rank}"))
                .spawn(move || {
                    let mut engine = Engine::new(backend, sink).cancelled_by(cancel);
                    engine.join_group(vote);
                    for job in rx {
                        job(&mut engine);
                    }
                })
                .expect("the OS can start a rank thread");
            ranks.push(tx);
            threads.push(thread);
        }
        RankGroup { ranks, threads }
    }

    pub fn world(&self) -> usize {
        self.ranks.len()
    }

    /// Run `f` on every rank's engine at once; the results in rank order.
    pub fn on_all<R: Send + 'static>(&self, f: impl Fn(&mut Engine<B>) -> R + Send + Sync + 'static) -> Result<Vec<R>, EngineError> {
        let f = Arc::new(f);
        let (tx, rx) = mpsc::channel();
        for (rank, r) in self.ranks.iter().enumerate() {
            let (f, tx) = (f.clone(), tx.clone());
            let _ = r.send(Box::new(move |e: &mut Engine<B>| {
                let _ = tx.send((rank, f(e)));
            }));
        }
        drop(tx);
        let mut out: Vec<Option<R>> = (0..self.ranks.len()).map(|_| None).collect();
        for (rank, r) in rx {
            out[rank] = Some(r);
        }
        out.into_iter()
            .enumerate()
            .map(|(rank, r)| r.ok_or_else(|| EngineError::Request(format!("tensor-parallel rank {rank} stopped"))))
            .collect()
    }
}

/// A sink for rank `rank` whose load progress, findings and warnings reach `main`.
fn forwarded(rank: usize, main: EventSink, threads: &mut Vec<JoinHandle<()>>) -> EventSink {
    let (sink, mut rx) = EventSink::channel();
    let thread = std::thread::Builder::new()
        .name(format!("specdeck-rank-{rank}-events"))
        .spawn(move || {
            while let Some(ev) = rx.blocking_recv() {
                let keep = match &ev.event {
                    Event::Progress { .. } | Event::Finding(_) => true,
                    Event::Log { level, .. } => *level >= LogLevel::Warning,
                    _ => false,
                };
                if keep {
                    main.emit(ev.event);
                }
            }
        })
        .expect("the OS can start a forwarding thread");
    threads.push(thread);
    sink
}

impl<B: Backend> Drop for RankGroup<B> {
    /// Every rank's engine is dropped (its GPU memory freed) before this returns.
    fn drop(&mut self) {
        self.ranks.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl<B: Backend> Serve for RankGroup<B> {
    fn launch(&mut self, spec: &LaunchSpec, preflight: &PreflightFn) -> LaunchOutcome {
        let (spec, preflight) = (spec.clone(), preflight.clone());
        match self.on_all(move |e| e.launch(&spec, &*preflight)) {
            Ok(mut outcomes) => {
                // A failing rank's own finding is forwarded; rank 0's outcome names the failure.
                outcomes.swap_remove(0)
            }
            Err(e) => LaunchOutcome::Failed(Finding::new(BACKEND_ERROR, Severity::Error, PhaseId::Warmup, e.to_string())),
        }
    }

    fn generate_with(&mut self, req: &GenerateRequest, use_drafter: bool) -> Result<Generation, EngineError> {
        let req = req.clone();
        let mut gens = self.on_all(move |e| e.generate_with(&req, use_drafter))?.into_iter();
        let first = gens.next().expect("a group has rank 0")?;
        for (rank, g) in gens.enumerate() {
            if g?.tokens != first.tokens {
                return Err(EngineError::Request(format!("tensor-parallel rank {} chose other tokens than rank 0", rank + 1)));
            }
        }
        Ok(first)
    }

    fn prompt_ids(&self, req: &GenerateRequest) -> Result<Vec<u32>, EngineError> {
        let req = req.clone();
        self.on_all(move |e| e.prompt_ids(&req))?.swap_remove(0)
    }

    fn weight_bytes(&self) -> (u64, Option<u64>) {
        self.on_all(|e| e.weight_bytes()).map(|mut w| w.swap_remove(0)).unwrap_or((0, None))
    }

    fn decode(&self, ids: &[u32]) -> Result<String, EngineError> {
        let ids = ids.to_vec();
        self.on_all(move |e| Serve::decode(e, &ids))?.swap_remove(0)
    }

    fn placement(&self) -> (&'static str, usize) {
        let name = self.on_all(|e| e.backend_name()).map_or("unknown", |mut n| n.swap_remove(0));
        (name, self.world())
    }

    fn gpu_memory(&self) -> Option<u64> {
        self.on_all(|e| e.gpu_memory()).ok().and_then(|mut m| m.swap_remove(0))
    }

    /// Every rank serves its own scheduler over its shard, called in lockstep through one
    /// `GroupBatch` (`engine::rank_batch`); the ranks keep their parts afterwards. A rank that
    /// cannot serve is the error, whatever the others said.
    fn serve_batch(&mut self, cfg: SchedulerConfig, serve: &mut dyn FnMut(&mut dyn Batch)) -> Result<(), EngineError> {
        let (done_tx, done) = mpsc::channel();
        let mut calls = Vec::with_capacity(self.ranks.len());
        for (rank, r) in self.ranks.iter().enumerate() {
            let (tx, rx) = mpsc::channel::<BatchJob>();
            let done_tx = done_tx.clone();
            let job: Job<B> = Box::new(move |e: &mut Engine<B>| {
                let mut rx = Some(rx);
                let served = e.serve_batch(cfg, &mut |batch| rx.take().into_iter().for_each(|rx| serve_calls(batch, rx)));
                let _ = done_tx.send((rank, served));
            });
            if r.send(job).is_err() {
                return Err(EngineError::Request(format!("tensor-parallel rank {rank} stopped")));
            }
            calls.push(tx);
        }
        drop(done_tx);
        // Dropping the group (its senders) ends every rank's serving.
        let grouped = GroupBatch::new(calls).map(|mut group| serve(&mut group));
        let mut served: Vec<(usize, Result<(), EngineError>)> = done.iter().collect();
        served.sort_by_key(|(rank, _)| *rank);
        if let Some((_, Err(e))) = served.iter_mut().find(|(_, r)| r.is_err()).map(|(rank, r)| (*rank, std::mem::replace(r, Ok(())))) {
            return Err(e);
        }
        if served.len() < self.ranks.len() {
            return Err(EngineError::Request("a tensor-parallel rank stopped while serving".into()));
        }
        grouped
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::backend::Shard;
    use crate::cudacheck::modelcheck::spec_for;
    use crate::engine::llama::{Capacity, Family, LlamaConfig, LlamaModel};
    use crate::engine::scheduler::SeqRequest;
    use crate::engine::tp_emulation::{group, RankCpu};
    use crate::engine::weights::Loader;
    use crate::model::checkpoint::Checkpoint;
    use crate::model::config::ModelConfig;
    use crate::spec::Algorithm;
    use crate::testkit::{TensorData, TinyDeepseek, TinyEagle3, TinyLlama, TinyStandalone};

    /// 8 query heads over 4 KV heads (GQA), splittable over 1, 2 and 4 ranks.
    fn target(kv_heads: usize) -> TinyLlama {
        TinyLlama { hidden: 64, heads: 8, kv_heads, intermediate: 128, ..TinyLlama::new(Family::Llama, 31) }
    }

    fn spec(dir: &Path, draft: Option<(&str, Algorithm, u32, u32, u32)>) -> LaunchSpec {
        let drafter = draft.map(|(sub, ..)| dir.join(sub));
        spec_for(&dir.join("target"), draft.zip(drafter.as_deref()).map(|((_, algo, steps, topk, n), d)| (d, algo, steps, topk, n)))
    }

    fn tokens(engine: &mut dyn Serve, spec: &LaunchSpec) -> (Vec<u32>, f64) {
        let preflight: PreflightFn = Arc::new(|_: &LaunchSpec| Vec::new());
        let outcome = engine.launch(spec, &preflight);
        assert!(matches!(outcome, LaunchOutcome::Ready { .. }), "{outcome:?}");
        let req = GenerateRequest { prompt: "w5 w9 w17 w33 w4".into(), max_new_tokens: 24, chat: false, temperature: 0.0, seed: 0 };
        let g = engine.generate_with(&req, true).unwrap();
        (g.tokens.clone(), g.mean_accept_length())
    }

    /// The engine's rank threads over 2 and 4 CPU ranks (sharded weights, summed
    /// all-reduce) choose the same greedy tokens as one rank: target-only, EAGLE-3 chain and
    /// STANDALONE tree, with relaunches keeping the target on every rank.
    #[test]
    fn tensor_parallel_greedy_equals_one_rank() {
        let dir = tempfile::tempdir().unwrap();
        let t = target(4);
        let weights = t.write(&dir.path().join("target")).unwrap();
        TinyEagle3 { head_dim: 16, intermediate: 64, ..TinyEagle3::new(32) }.write(&dir.path().join("eagle3"), &t, &weights).unwrap();
        TinyStandalone::new(33).write(&dir.path().join("standalone"), &t, &weights).unwrap();
        let reference = greedy_over_ranks_equals_one_rank(dir.path(), &[(2, 1), (4, 1)]);
        assert!(reference[1].1 > 1.0, "the EAGLE-3 drafter must be accepted sometimes: {:?}", reference[1]);
    }

    /// Target-only, EAGLE-3 chain and STANDALONE tree launches of `dir`'s `target` (with its
    /// `eagle3` and `standalone` drafters) over each `(ranks, --ep-size)` of `groups` give one
    /// rank's tokens and accept lengths, which it returns.
    fn greedy_over_ranks_equals_one_rank(dir: &Path, groups: &[(usize, u32)]) -> Vec<(Vec<u32>, f64)> {
        let specs = [
            spec(dir, None),
            spec(dir, Some(("eagle3", Algorithm::Eagle3, 3, 1, 4))),
            spec(dir, Some(("standalone", Algorithm::Standalone, 3, 2, 6))),
        ];
        let (sink, _rx) = EventSink::channel();
        let mut one = Engine::new(CpuBackend, sink);
        let reference: Vec<(Vec<u32>, f64)> = specs.iter().map(|s| tokens(&mut one, s)).collect();
        assert!(reference[0].0.len() > 8, "{:?}", reference[0]);
        for &(world, ep) in groups {
            let (sink, _rx) = EventSink::channel();
            let mut ranks = RankGroup::start(group(world), sink, &Cancel::default());
            for (s, (want, accept)) in specs.iter().zip(&reference) {
                let s = LaunchSpec { ep_size: Some(ep), ..s.clone() };
                let (got, got_accept) = tokens(&mut ranks, &s);
                assert_eq!(&got, want, "tp {world} ep {ep}, {:?}", s.speculative_algorithm);
                assert_eq!(got_accept, *accept, "tp {world} ep {ep}, {:?}", s.speculative_algorithm);
            }
        }
        reference
    }

    /// A DeepSeek-V3 target over 2, 4 and 8 CPU ranks (its heads and MLP widths split, its
    /// routed experts split as `--ep-size` says, partial sums all-reduced) chooses one rank's
    /// greedy tokens: target-only, with an EAGLE-3 chain and with a STANDALONE tree of its family.
    #[test]
    fn deepseek_tensor_and_expert_parallel_greedy_equals_one_rank() {
        let dir = tempfile::tempdir().unwrap();
        let target = TinyDeepseek::new(41);
        target.write(&dir.path().join("target")).unwrap();
        let weights = target.tensors();
        let f32s = |name: &str| match &weights[name].1 {
            TensorData::F32(v) => v.clone(),
            TensorData::I64(_) => unreachable!("{name} is a float tensor"),
        };
        let eagle = TinyEagle3 { head_dim: 8, aux_layer_ids: Some(vec![0, 1, 2]), ..TinyEagle3::new(43) };
        eagle.write_for(&dir.path().join("eagle3"), target.hidden, &f32s("model.norm.weight"), &f32s("lm_head.weight")).unwrap();
        TinyDeepseek { layers: 2, ..TinyDeepseek::new(42) }.write(&dir.path().join("standalone")).unwrap();
        // Experts split by width over all ranks (ep 1), whole over all ranks (ep = tp), and
        // both at once (8 ranks in 2 groups of 4).
        greedy_over_ranks_equals_one_rank(dir.path(), &[(2, 1), (2, 2), (4, 1), (4, 4), (8, 1), (8, 8), (8, 2)]);
    }

    /// Every prompt's tokens from the scheduler over the launched `engine`, all submitted at once.
    fn served(engine: &mut dyn Serve, spec: &LaunchSpec) -> Vec<Vec<u32>> {
        let preflight: PreflightFn = Arc::new(|_: &LaunchSpec| Vec::new());
        let outcome = engine.launch(spec, &preflight);
        assert!(matches!(outcome, LaunchOutcome::Ready { .. }), "{outcome:?}");
        let prompts: Vec<Vec<u32>> = (0..6u32).map(|i| (0..3 + 5 * i).map(|j| 3 + (i * 13 + j * 7) % 60).collect()).collect();
        let mut out = std::collections::BTreeMap::<u64, Vec<u32>>::new();
        let cfg = SchedulerConfig { max_running: 4, chunk: 16, graph_max_bs: 4 };
        engine
            .serve_batch(cfg, &mut |batch| {
                for p in &prompts {
                    let req = SeqRequest { prompt: p.clone(), max_tokens: 12, sampling: Default::default(), ignore_eos: true };
                    out.insert(batch.submit(req).unwrap(), Vec::new());
                }
                while !batch.is_idle() {
                    for u in batch.step().unwrap() {
                        out.get_mut(&u.id).unwrap().extend(u.tokens);
                    }
                }
                assert_eq!(batch.blocks().0, batch.blocks().1, "every block freed");
            })
            .unwrap();
        out.into_values().collect()
    }

    /// The scheduler over 2 and 4 CPU ranks (each rank's own scheduler over its shard, called
    /// in lockstep) serves every request one rank's scheduler serves, with more requests than
    /// places and prefill in chunks: a Llama target alone and with its EAGLE-3 drafter, and a
    /// DeepSeek-V3 target with expert parallel.
    #[test]
    fn serving_over_ranks_equals_one_rank() {
        let dir = tempfile::tempdir().unwrap();
        let (llama, deepseek) = (dir.path().join("llama"), dir.path().join("deepseek"));
        let t = target(4);
        let weights = t.write(&llama.join("target")).unwrap();
        TinyEagle3 { head_dim: 16, intermediate: 64, ..TinyEagle3::new(32) }.write(&llama.join("eagle3"), &t, &weights).unwrap();
        TinyDeepseek::new(41).write(&deepseek.join("target")).unwrap();
        // (the launch, whether its routed experts go whole to the ranks: --ep-size = tp)
        let specs = [
            (spec(&llama, None), false),
            (spec(&llama, Some(("eagle3", Algorithm::Eagle3, 3, 1, 4))), false),
            (spec(&deepseek, None), true),
        ];
        for (s, expert_parallel) in &specs {
            let (sink, _rx) = EventSink::channel();
            let want = served(&mut Engine::new(CpuBackend, sink), s);
            assert!(want.iter().all(|t| t.len() == 12), "{want:?}");
            for world in [2, 4] {
                let (sink, _rx) = EventSink::channel();
                let mut ranks = RankGroup::start(group(world), sink, &Cancel::default());
                let s = LaunchSpec { ep_size: expert_parallel.then_some(world as u32), ..s.clone() };
                assert_eq!(served(&mut ranks, &s), want, "tp {world}, {:?}", s.model_path);
            }
        }
    }

    /// What a DeepSeek-V3 rank holds over 1, 2, 4 and 8 ranks: the embeddings, norms,
    /// router, q LoRA down-projection and latent projection whole, every other weight (its
    /// heads' q, kv_b and o, the MLP widths, its part of the routed experts, whichever way
    /// `--ep-size` splits them) one world-th.
    #[test]
    fn a_deepseek_rank_holds_its_share_of_the_weights() {
        let dir = tempfile::tempdir().unwrap();
        let target = TinyDeepseek::new(41);
        target.write(dir.path()).unwrap();
        let whole = ["embed_tokens", "lm_head", "norm.weight", "layernorm", "mlp.gate.", "q_a_proj", "kv_a_proj_with_mqa"];
        let (mut replicated, mut split) = (0, 0);
        for (name, (shape, _)) in target.tensors() {
            let n: usize = shape.iter().product();
            if whole.iter().any(|w| name.contains(w)) {
                replicated += n;
            } else {
                split += n;
            }
        }
        let mut config = crate::engine::deepseek::DeepseekTargetConfig::from_config(&ModelConfig::load_dir(dir.path()).unwrap()).unwrap();
        let ck = Checkpoint::open(dir.path()).unwrap();
        for (world, ep) in [(1, 1), (2, 1), (2, 2), (4, 4), (8, 1), (8, 2), (8, 8)] {
            config.ep_size = ep;
            let b = Arc::new(group(world).swap_remove(world - 1));
            let mut progress = |_| {};
            let mut ld = Loader::new(&*b, &ck, &mut progress);
            let cap = Capacity { rows: 4, logit_rows: 4, positions: 16 };
            let model = crate::engine::deepseek::DeepseekModel::load(b.clone(), &config, &mut ld, cap).unwrap();
            assert_eq!(model.parameters(), (replicated + split / world) as u64, "tp {world} ep {ep}");
        }
    }

    /// Which tensors each rank splits, and how, for 1, 2, 4 and 8 ranks: q/k/v, gate and up
    /// by output rows, o and down by input columns, the rest whole.
    #[test]
    fn the_shard_plan_for_1_2_4_8_ranks() {
        let dir = tempfile::tempdir().unwrap();
        target(8).write(dir.path()).unwrap();
        let config = LlamaConfig::from_config(&ModelConfig::load_dir(dir.path()).unwrap()).unwrap();
        let ck = Checkpoint::open(dir.path()).unwrap();
        for world in [1, 2, 4, 8] {
            let rank: RankCpu = group(world).swap_remove(world - 1);
            let b = Arc::new(rank);
            let mut progress = |_| {};
            let mut ld = Loader::new(&*b, &ck, &mut progress);
            let model = LlamaModel::load(b.clone(), config.clone(), &mut ld, Capacity { rows: 4, logit_rows: 4, positions: 16 }).unwrap();
            ld.finish();
            let loaded = b.loaded.lock().unwrap();
            let of = |name: &str| loaded.iter().find(|(n, ..)| n == name).map(|(_, s, shape)| (*s, shape.clone())).unwrap();
            let p = "model.layers.3.";
            // head_dim 8: 8 heads = 64 rows of q, 8 KV heads = 64 rows of k and v.
            assert_eq!(of(&format!("{p}self_attn.q_proj.weight")), (Shard::Column, vec![64 / world, 64]));
            assert_eq!(of(&format!("{p}self_attn.k_proj.weight")), (Shard::Column, vec![64 / world, 64]));
            assert_eq!(of(&format!("{p}self_attn.v_proj.weight")), (Shard::Column, vec![64 / world, 64]));
            assert_eq!(of(&format!("{p}self_attn.o_proj.weight")), (Shard::Row, vec![64, 64 / world]));
            assert_eq!(of(&format!("{p}mlp.gate_proj.weight")), (Shard::Column, vec![128 / world, 64]));
            assert_eq!(of(&format!("{p}mlp.up_proj.weight")), (Shard::Column, vec![128 / world, 64]));
            assert_eq!(of(&format!("{p}mlp.down_proj.weight")), (Shard::Row, vec![64, 128 / world]));
            assert_eq!(of(&format!("{p}input_layernorm.weight")), (Shard::Replicated, vec![64]));
            assert_eq!(of("model.embed_tokens.weight"), (Shard::Replicated, vec![64, 64]));
            assert_eq!(of("model.norm.weight"), (Shard::Replicated, vec![64]));
            // The rank's KV cache holds its KV heads only.
            let kv = model.new_kv(10).unwrap();
            assert_eq!(kv.k[0].cols, 64 / world);
        }
    }

    /// A cancel during a long generation stops every rank at the same step (none is left
    /// waiting in an all-reduce), at once, with the same tokens on each; a later generation
    /// stops at its first step.
    #[test]
    fn a_cancel_stops_every_rank_at_the_same_step() {
        let dir = tempfile::tempdir().unwrap();
        TinyLlama { max_positions: 4096, ..target(4) }.write(&dir.path().join("target")).unwrap();
        let (sink, mut rx) = EventSink::channel();
        let cancel = Cancel::default();
        let mut ranks = RankGroup::start(group(2), sink, &cancel);
        let preflight: PreflightFn = Arc::new(|_: &LaunchSpec| Vec::new());
        assert!(matches!(ranks.launch(&spec(dir.path(), None), &preflight), LaunchOutcome::Ready { .. }));
        let req = GenerateRequest { prompt: "w5 w9 w17 w33 w4".into(), max_new_tokens: 4000, chat: false, temperature: 0.0, seed: 0 };
        let canceller = std::thread::spawn(move || {
            while let Some(ev) = rx.blocking_recv() {
                if matches!(ev.event, Event::Token { .. }) {
                    cancel.set();
                    return std::time::Instant::now();
                }
            }
            panic!("no token before the stream ended");
        });
        let g = ranks.generate_with(&req, false).expect("both ranks end with the same tokens");
        let took = canceller.join().unwrap().elapsed();
        assert!(g.cancelled && !g.tokens.is_empty() && g.tokens.len() < 4000, "{} tokens, cancelled {}", g.tokens.len(), g.cancelled);
        assert!(took < std::time::Duration::from_secs(1), "{took:?} from the cancel to the end");
        let again = ranks.generate_with(&req, false).unwrap();
        assert!(again.cancelled && again.tokens.is_empty(), "{again:?}");
    }

    /// A failing rank fails the launch of every rank, before any collective.
    #[test]
    fn a_rank_that_fails_fails_the_group_launch() {
        let dir = tempfile::tempdir().unwrap();
        target(4).write(&dir.path().join("target")).unwrap();
        // 8 heads do not split over 3 ranks: every rank fails in target-load, none hangs.
        let (sink, mut rx) = EventSink::channel();
        let mut ranks = RankGroup::start(group(3), sink, &Cancel::default());
        let preflight: PreflightFn = Arc::new(|_: &LaunchSpec| Vec::new());
        let LaunchOutcome::Failed(f) = ranks.launch(&spec(dir.path(), None), &preflight) else { panic!("launch must fail") };
        assert_eq!(f.phase, PhaseId::TargetLoad);
        assert!(f.message.contains("--tp-size 3 does not divide num_attention_heads 8"), "{}", f.message);
        drop(ranks);
        // Ranks 1 and 2 forwarded their own findings.
        let findings = std::iter::from_fn(|| rx.try_recv().ok()).filter(|e| matches!(e.event, Event::Finding(_))).count();
        assert_eq!(findings, 3);
    }
}
