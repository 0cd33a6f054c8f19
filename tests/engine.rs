//! The speculative engine on tiny real checkpoints written by `specdeck::testkit`.

use std::path::Path;

use specdeck::backend::cpu::CpuBackend;
use specdeck::engine::lifecycle::{Engine, LaunchOutcome};
use specdeck::engine::llama::Family;
use specdeck::engine::spec_decode::Generation;
use specdeck::event::EventSink;
use specdeck::spec::{Algorithm, LaunchSpec};
use specdeck::testkit::{TinyEagle3, TinyLlama, TinyStandalone};

fn no_preflight(_: &LaunchSpec) -> Vec<specdeck::finding::Finding> {
    Vec::new()
}

fn spec(target: &Path, draft: Option<(&Path, Algorithm)>, steps: u32, topk: u32, draft_tokens: u32) -> LaunchSpec {
    let mut s = LaunchSpec::default();
    s.model_path = Some(target.display().to_string());
    s.device = specdeck::spec::Device::Cpu;
    match draft {
        Some((d, a)) => {
            s.draft_model_path = Some(d.display().to_string());
            s.speculative_algorithm = Some(a);
            s.speculative_num_steps = Some(steps);
            s.speculative_eagle_topk = Some(topk);
            s.speculative_num_draft_tokens = Some(draft_tokens);
        }
        None => s.speculative_algorithm = Some(Algorithm::None),
    }
    s
}

fn launched(engine: &mut Engine<CpuBackend>, s: &LaunchSpec) {
    match engine.launch(s, &no_preflight) {
        LaunchOutcome::Ready { .. } => {}
        LaunchOutcome::Failed(f) => panic!("launch failed: {f:?}"),
    }
}

fn greedy(engine: &mut Engine<CpuBackend>, prompt: &[u32], n: usize) -> Generation {
    let mut d = engine.decoding(n, None);
    d.stop.clear();
    engine.generate_ids(prompt, &d).unwrap()
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("target");
    let e = dir.path().join("eagle");
    let s = dir.path().join("standalone");
    let tl = TinyLlama::new(Family::Llama, 1);
    let w = tl.write(&t).unwrap();
    TinyEagle3::new(2).write(&e, &tl, &w).unwrap();
    TinyStandalone::new(3).write(&s, &tl, &w).unwrap();
    let (sink, _rx) = EventSink::channel();
    let mut engine = Engine::new(CpuBackend, sink);
    launched(&mut engine, &spec(&t, None, 0, 0, 0));
    let prompt = [5u32, 9, 17, 33, 4];
    let base = greedy(&mut engine, &prompt, 40);
    for (dd, a) in [(&e, Algorithm::Eagle3), (&s, Algorithm::Standalone)] {
        for (st, k, n) in [(3, 1, 4), (4, 2, 6), (3, 4, 8)] {
            launched(&mut engine, &spec(&t, Some((dd, a)), st, k, n));
            let g = greedy(&mut engine, &prompt, 40);
            println!("{a:?} {st},{k},{n}: mean accept {:.2} hist {:?}", g.mean_accept_length(), g.accept_histogram());
            assert_eq!(g.tokens, base.tokens);
        }
    }
    println!("{:?}", base.tokens);
}

#[test]
fn explore() {
    for mixing in [0.5f32, 1.0, 1.5, 2.0] {
        for seed in [1u64, 2, 3] {
            let dir = tempfile::tempdir().unwrap();
            let t = dir.path().join("target");
            let e = dir.path().join("eagle");
            let s = dir.path().join("standalone");
            let mut tl = TinyLlama::new(Family::Qwen2, seed);
            tl.mixing = mixing;
            let w = tl.write(&t).unwrap();
            TinyEagle3::new(seed + 10).write(&e, &tl, &w).unwrap();
            TinyStandalone::new(seed + 20).write(&s, &tl, &w).unwrap();
            let (sink, _rx) = EventSink::channel();
            let mut engine = Engine::new(CpuBackend, sink);
            launched(&mut engine, &spec(&t, None, 0, 0, 0));
            let prompt = [5u32, 9, 17, 33, 4];
            let base = greedy(&mut engine, &prompt, 60);
            print!("mix {mixing} seed {seed}: {:?}\n   ", &base.tokens[..30]);
            for (dd, a) in [(&e, Algorithm::Eagle3), (&s, Algorithm::Standalone)] {
                launched(&mut engine, &spec(&t, Some((dd, a)), 3, 1, 4));
                let g = greedy(&mut engine, &prompt, 60);
                print!(" {a:?} {:.2} {:?}", g.mean_accept_length(), g.accept_histogram());
                assert_eq!(g.tokens, base.tokens);
            }
            println!();
        }
    }
}
