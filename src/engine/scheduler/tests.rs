use std::collections::BTreeMap;

use super::*;
use crate::backend::cpu::CpuBackend;
use crate::engine::lifecycle::Engine;
use crate::engine::llama::Family;
use crate::engine::request::LaunchOutcome;
use crate::event::{EventReceiver, EventSink};
use crate::spec::{Algorithm, Device};
use crate::testkit::{TinyEagle3, TinyLlama, TinyStandalone};

struct Launched {
    _dir: tempfile::TempDir,
    _events: EventReceiver,
    engine: Engine<CpuBackend>,
}

/// The tiny target (and its EAGLE-3 or STANDALONE drafter unless `algorithm` is NONE),
/// launched on the CPU.
fn launched(algorithm: Algorithm, edit: impl FnOnce(&mut LaunchSpec)) -> Launched {
    let dir = tempfile::tempdir().unwrap();
    let (target, draft) = (dir.path().join("target"), dir.path().join("draft"));
    let t = TinyLlama::new(Family::Llama, 7);
    let w = t.write(&target).unwrap();
    match algorithm {
        Algorithm::Standalone => TinyStandalone::new(8).write(&draft, &t, &w).unwrap(),
        _ => TinyEagle3::new(8).write(&draft, &t, &w).unwrap(),
    }
    let mut spec = LaunchSpec {
        model_path: Some(target.display().to_string()),
        draft_model_path: Some(draft.display().to_string()),
        speculative_algorithm: Some(algorithm),
        device: Device::Cpu,
        ..LaunchSpec::default()
    };
    edit(&mut spec);
    let (sink, events) = EventSink::channel();
    let mut engine = Engine::new(CpuBackend, sink);
    let outcome = engine.launch(&spec, &|_| Vec::new());
    assert!(matches!(outcome, LaunchOutcome::Ready { .. }), "{outcome:?}");
    Launched { _dir: dir, _events: events, engine }
}

fn prompts() -> Vec<Vec<u32>> {
    (0..8u32).map(|i| (0..5 + 7 * i).map(|j| (i * 31 + j * 17 + 3) % 64).collect()).collect()
}

fn request(prompt: &[u32], sampling: SamplingParams) -> SeqRequest {
    SeqRequest { prompt: prompt.to_vec(), max_tokens: 12, sampling, ignore_eos: false }
}

/// The batch-1 path's answers (`Engine::generate_ids`).
fn sequential(engine: &mut Engine<CpuBackend>, prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let decoding = engine.decoding(12, None);
    prompts.iter().map(|p| engine.generate_ids(p, &decoding).unwrap().tokens).collect()
}

/// `f` on a scheduler over the launched engine (`Engine::serve_batch`).
fn scheduled<R>(engine: &mut Engine<CpuBackend>, cfg: SchedulerConfig, f: impl FnOnce(&mut dyn Batch) -> R) -> R {
    let (mut f, mut out) = (Some(f), None);
    engine.serve_batch(cfg, &mut |b| out = f.take().map(|f| f(b))).unwrap();
    out.expect("serve_batch runs its closure")
}

/// The batch-1 path's answers with the accept length of each verify step.
fn sequential_accepts(engine: &mut Engine<CpuBackend>, prompts: &[Vec<u32>]) -> Vec<(Vec<u32>, Vec<usize>)> {
    let decoding = engine.decoding(12, None);
    prompts
        .iter()
        .map(|p| {
            let g = engine.generate_ids(p, &decoding).unwrap();
            (g.tokens, g.accept_lengths)
        })
        .collect()
}

/// What the scheduler gave one request.
#[derive(Debug, Default)]
struct Answer {
    tokens: Vec<u32>,
    finish: Option<Finish>,
    /// The accept length of each of its verify steps.
    accepts: Vec<usize>,
}

/// Every request's answer, by id, once the scheduler has run them all.
fn run(s: &mut dyn Batch) -> BTreeMap<u64, Answer> {
    let mut out: BTreeMap<u64, Answer> = BTreeMap::new();
    while !s.is_idle() {
        for u in s.step().unwrap() {
            let a = out.entry(u.id).or_default();
            a.tokens.extend(u.tokens);
            a.finish = a.finish.or(u.finished);
            a.accepts.extend(u.accept_length);
        }
    }
    assert!(out.values().all(|a| a.finish.is_some()), "every request finishes: {out:?}");
    out
}

/// The answers, the (free, total) blocks afterwards and the scheduler's settings.
fn batched(
    engine: &mut Engine<CpuBackend>,
    cfg: SchedulerConfig,
    prompts: &[Vec<u32>],
) -> (Vec<Vec<u32>>, (usize, usize), SchedulerConfig) {
    scheduled(engine, cfg, |s| {
        for p in prompts {
            s.submit(request(p, SamplingParams::default())).unwrap();
        }
        let out = run(s);
        (out.into_values().map(|a| a.tokens).collect(), s.blocks(), s.config())
    })
}

const EIGHT: SchedulerConfig = SchedulerConfig { max_running: 8, chunk: 512, graph_max_bs: 8 };

#[test]
fn eight_concurrent_requests_each_equal_their_sequential_answer() {
    for algorithm in [Algorithm::None, Algorithm::Eagle3] {
        let mut l = launched(algorithm, |_| {});
        let want = sequential(&mut l.engine, &prompts());
        assert!(want.iter().all(|t| !t.is_empty()));
        let (got, (free, total), _) = batched(&mut l.engine, EIGHT, &prompts());
        assert_eq!(got, want, "{algorithm:?}");
        // Everything finished: every block is free again.
        assert_eq!(free, total);
        // The engine has its parts back: the batch-1 path answers as before.
        assert_eq!(sequential(&mut l.engine, &prompts()), want, "{algorithm:?}");
    }
}

/// Chains drafted for the whole batch at once, over the drafter's pool, are the chains each
/// sequence drafts alone in the drafter's own cache: every request accepts, step by step,
/// what the batch-1 path accepts (EAGLE-3 and STANDALONE). With the drafter's levels padded
/// to the captured sizes (a graph step runs its ops eagerly on the CPU) nothing changes.
#[test]
fn batched_chains_accept_what_each_sequence_accepts_alone() {
    for algorithm in [Algorithm::Eagle3, Algorithm::Standalone] {
        for padded in [false, true] {
            let mut l = launched(algorithm, |_| {});
            let want = sequential_accepts(&mut l.engine, &prompts());
            assert!(want.iter().any(|(_, a)| a.iter().any(|&n| n > 1)), "{algorithm:?}: no draft accepted: {want:?}");
            if padded {
                l.engine.target_mut().unwrap().graph_rows = 8;
                l.engine.drafter_mut().unwrap().set_graph_rows(8);
            }
            let got = scheduled(&mut l.engine, EIGHT, |s| {
                for p in &prompts() {
                    s.submit(request(p, SamplingParams::default())).unwrap();
                }
                run(s).into_values().map(|a| (a.tokens, a.accepts)).collect::<Vec<_>>()
            });
            assert_eq!(got, want, "{algorithm:?}, padded {padded}");
        }
    }
}

#[test]
fn a_tree_at_batch_one_equals_the_batch_one_path() {
    let mut l = launched(Algorithm::Eagle3, |s| {
        s.speculative_eagle_topk = Some(2);
        s.speculative_num_draft_tokens = Some(5);
    });
    let want = sequential(&mut l.engine, &prompts()[..3]);
    let (got, _, cfg) = batched(&mut l.engine, EIGHT, &prompts()[..3]);
    assert_eq!(cfg.max_running, 1);
    assert_eq!(got, want);
}

#[test]
fn chunked_prefill_equals_unchunked() {
    let unchunked = batched(&mut launched(Algorithm::Eagle3, |_| {}).engine, EIGHT, &prompts()).0;
    let chunked =
        batched(&mut launched(Algorithm::Eagle3, |_| {}).engine, SchedulerConfig { max_running: 3, chunk: 7, graph_max_bs: 3 }, &prompts())
            .0;
    assert_eq!(chunked, unchunked);
}

/// `--chunked-prefill-size -1` (SGLang's "no chunking") prefills each prompt whole: the
/// buffers are sized by the context, not by an unbounded chunk.
#[test]
fn prefill_without_chunking_is_sized_by_the_context() {
    for algorithm in [Algorithm::None, Algorithm::Eagle3] {
        let mut l = launched(algorithm, |s| s.chunked_prefill_size = Some(-1));
        let want = sequential(&mut l.engine, &prompts());
        let cfg = SchedulerConfig::from_spec(&LaunchSpec { chunked_prefill_size: Some(-1), ..LaunchSpec::default() }, None);
        assert_eq!(cfg.chunk, usize::MAX);
        let (got, _, served) = batched(&mut l.engine, cfg, &prompts());
        assert_eq!(got, want, "{algorithm:?}");
        assert!(served.chunk <= 512, "{algorithm:?}: a chunk of {} tokens", served.chunk);
    }
}

/// Without the flag the chunk is SGLang's for the GPU's memory (an H200 reports 139.8 GiB),
/// and the CPU reference's own size on the CPU; the flag wins on either.
#[test]
fn the_default_chunk_follows_the_gpus_memory() {
    const GIB: u64 = 1 << 30;
    let none = LaunchSpec::default();
    let chunk = |spec: &LaunchSpec, memory| SchedulerConfig::from_spec(spec, memory).chunk;
    assert_eq!(chunk(&none, None), 512);
    assert_eq!(chunk(&none, Some(24 * GIB)), 2048);
    assert_eq!(chunk(&none, Some(80 * GIB)), 8192);
    assert_eq!(chunk(&none, Some(150_119_202_816)), 8192);
    assert_eq!(chunk(&none, Some(180 * GIB)), 16384);
    let asked = LaunchSpec { chunked_prefill_size: Some(1024), ..LaunchSpec::default() };
    assert_eq!(chunk(&asked, Some(80 * GIB)), 1024);
    assert_eq!(chunk(&asked, None), 1024);
}

#[test]
fn finished_and_cancelled_requests_free_their_blocks_at_once() {
    let mut l = launched(Algorithm::Eagle3, |_| {});
    scheduled(&mut l.engine, SchedulerConfig { max_running: 2, chunk: 512, graph_max_bs: 2 }, |s| {
        let (free, total) = s.blocks();
        assert_eq!(free, total);
        // 40 prompt + 12 output + 4 verify slots = 56 tokens: 4 blocks; 5 + 12 + 4 = 21: 2 blocks.
        let long = s.submit(request(&prompts()[5], SamplingParams::default())).unwrap();
        let short = s.submit(request(&prompts()[0], SamplingParams::default())).unwrap();
        let queued = s.submit(request(&prompts()[1], SamplingParams::default())).unwrap();
        s.step().unwrap();
        assert_eq!((s.running(), s.queued(), s.blocks().0), (2, 1, total - 6));
        assert!(s.cancel(long));
        assert_eq!(s.blocks().0, total - 2);
        assert!(s.cancel(queued));
        assert!(!s.cancel(queued));
        assert_eq!((s.running(), s.queued()), (1, 0));
        let out = run(s);
        assert_eq!(out.keys().copied().collect::<Vec<_>>(), [short]);
        assert_eq!(s.blocks().0, total);
    });
}

#[test]
fn a_seed_reproduces_a_sampled_answer_alone_batched_and_through_the_batch_one_path() {
    let sampling = SamplingParams { temperature: 0.8, seed: Some(42), ..Default::default() };
    let mut l = launched(Algorithm::Eagle3, |_| {});
    let decoding = l.engine.decoding(12, Some(crate::engine::spec_decode::Sampling { temperature: 0.8, seed: 42, rule: verify::lossless }));
    let want = l.engine.generate_ids(&prompts()[3], &decoding).unwrap().tokens;
    let got = scheduled(&mut l.engine, EIGHT, |s| {
        let id = s.submit(request(&prompts()[3], sampling)).unwrap();
        for p in &prompts() {
            s.submit(request(p, SamplingParams { seed: Some(7), ..sampling })).unwrap();
        }
        run(s).remove(&id).unwrap().tokens
    });
    assert_eq!(got, want);
    let other = SamplingParams { seed: Some(43), ..sampling };
    let (again, reseeded) = scheduled(&mut launched(Algorithm::Eagle3, |_| {}).engine, EIGHT, |s| {
        let again = s.submit(request(&prompts()[3], sampling)).unwrap();
        let reseeded = s.submit(request(&prompts()[3], other)).unwrap();
        let mut out = run(s);
        (out.remove(&again).unwrap().tokens, out.remove(&reseeded).unwrap().tokens)
    });
    assert_eq!(again, want);
    assert_ne!(reseeded, want);
}

#[test]
fn requests_past_the_context_are_refused() {
    let mut l = launched(Algorithm::None, |_| {});
    scheduled(&mut l.engine, EIGHT, |s| {
        // The tiny target's context is 512 tokens.
        assert_eq!(s.context(), 512);
        let e = s.submit(SeqRequest { prompt: vec![3; 500], max_tokens: 13, sampling: SamplingParams::default(), ignore_eos: false });
        assert_eq!(e.unwrap_err().to_string(), "the prompt (500 tokens) plus max_tokens (13) exceed the context (512 tokens)");
        assert!(s.submit(request(&[], SamplingParams::default())).is_err());
    });
}

#[test]
fn a_9k_token_prompt_runs_in_a_32k_context_with_default_flags() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    TinyLlama { max_positions: 32768, layers: 2, ..TinyLlama::new(Family::Llama, 9) }.write(&target).unwrap();
    let spec = LaunchSpec { model_path: Some(target.display().to_string()), device: Device::Cpu, ..LaunchSpec::default() };
    let (sink, _events) = EventSink::channel();
    let mut engine = Engine::new(CpuBackend, sink);
    assert!(matches!(engine.launch(&spec, &|_| Vec::new()), LaunchOutcome::Ready { .. }));
    let prompt: Vec<u32> = (0..9000u32).map(|i| (i * 7 + 1) % 64).collect();
    let want = engine.generate_ids(&prompt, &engine.decoding(4, None)).unwrap().tokens;
    scheduled(&mut engine, EIGHT, |s| {
        assert_eq!(s.context(), 32768);
        let id = s.submit(SeqRequest { prompt, max_tokens: 4, sampling: SamplingParams::default(), ignore_eos: false }).unwrap();
        assert_eq!(run(s)[&id].tokens, want);
        let full =
            s.submit(SeqRequest { prompt: vec![3; 32760], max_tokens: 8, sampling: SamplingParams::default(), ignore_eos: false }).unwrap();
        s.step().unwrap();
        // 32760 + 8 + 1 verify slot = 32769 tokens: 2049 blocks, until cancelled.
        assert_eq!(s.blocks().1 - s.blocks().0, 2049);
        assert!(s.cancel(full));
        assert_eq!(s.blocks().0, s.blocks().1);
    });
}

/// Serving sizes the target's forwards for the scheduler's steps (a 512-token chunk and the
/// rows of 8 sequences' steps: 520 target-only, 544 verifying chains of 4), past the EAGLE-3
/// drafter's 512: the batch-1 path then prefills 544 rows a forward, and the drafter reads
/// them in two pieces.
#[test]
fn after_serving_the_batch_one_path_reads_a_long_prompt_in_the_drafters_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let (target, draft) = (dir.path().join("target"), dir.path().join("draft"));
    let t = TinyLlama { max_positions: 2048, ..TinyLlama::new(Family::Llama, 7) };
    let w = t.write(&target).unwrap();
    TinyEagle3 { max_positions: 2048, ..TinyEagle3::new(8) }.write(&draft, &t, &w).unwrap();
    let spec = |algorithm| LaunchSpec {
        model_path: Some(target.display().to_string()),
        draft_model_path: Some(draft.display().to_string()),
        speculative_algorithm: Some(algorithm),
        device: Device::Cpu,
        ..LaunchSpec::default()
    };
    let prompt: Vec<u32> = (0..700u32).map(|i| (i * 13 + 5) % 64).collect();
    let mut answers = Vec::new();
    for (algorithm, rows) in [(Algorithm::None, 520), (Algorithm::Eagle3, 544)] {
        let (sink, _events) = EventSink::channel();
        let mut engine = Engine::new(CpuBackend, sink);
        let outcome = engine.launch(&spec(algorithm), &|_| Vec::new());
        assert!(matches!(outcome, LaunchOutcome::Ready { .. }), "{outcome:?}");
        batched(&mut engine, EIGHT, &prompts()[..1]);
        assert_eq!(engine.target_mut().unwrap().model.capacity().rows, rows);
        answers.push(engine.generate_ids(&prompt, &engine.decoding(8, None)).unwrap().tokens);
    }
    assert_eq!(answers[1], answers[0]);
    assert_eq!(answers[0].len(), 8);
}

/// Graph steps pad their batch up to a captured size (SGLang's list: 1, 2, 4, 8) with
/// sequences of their own on the scheduler's pad block. On the CPU a graph step runs its ops
/// eagerly, so this checks what padding does to the real rows (nothing) and to the pool (one
/// block, not counted), after the launch-time capture of every size has run on the padding.
#[test]
fn padded_graph_steps_keep_every_answer_and_the_pool() {
    for algorithm in [Algorithm::None, Algorithm::Eagle3] {
        let mut l = launched(algorithm, |_| {});
        let want = sequential(&mut l.engine, &prompts()[..7]);
        let shape = (algorithm == Algorithm::Eagle3).then_some(l.engine.decoding(1, None).shape);
        let target = l.engine.target_mut().unwrap();
        target.graph_rows = 8;
        let layout = batch_layout(&EIGHT, shape, target.max_tokens(), true);
        assert_eq!(layout.graph_sizes, vec![1, 2, 4, 8]);
        for seqs in [1, 2, 4, 8] {
            capture_steps(target, &layout, seqs).unwrap();
        }
        let (got, (free, total), padding) = scheduled(&mut l.engine, EIGHT, |s| {
            let total = s.blocks().1;
            for p in &prompts()[..7] {
                s.submit(request(p, SamplingParams::default())).unwrap();
            }
            let out = run(s);
            (out.into_values().map(|a| a.tokens).collect::<Vec<_>>(), (s.blocks().0, total), s.step_times().padding_seqs)
        });
        assert_eq!(got, want, "{algorithm:?}");
        assert_eq!(free, total, "{algorithm:?}");
        // Seven running (or fewer, as they finish) pad up to 8 and to 4.
        assert!(padding > 0, "{algorithm:?}");
        assert_eq!(sequential(&mut l.engine, &prompts()[..7]), want, "{algorithm:?}");
    }
}
