//! Relaunch after a drafter-only remedy, as a ratio to a cold start, on the demo pair
//! (CPU engine). The story's order, as SGLang runs it: the target loads, the draft worker
//! finds its positions shorter than the target's context, and the launch fails at
//! drafter-init; the remedy relaunches in-process. The reference, measured in the same
//! run: a cold start of the remedied spec in a fresh engine.
//!
//! `cargo bench --bench relaunch` prints one line per remedy with the medians and ratio.

use std::time::Instant;

use specdeck::backend::cpu::CpuBackend;
use specdeck::engine::context;
use specdeck::engine::lifecycle::Engine;
use specdeck::engine::request::LaunchOutcome;
use specdeck::event::{Event, EventReceiver, EventSink, PhaseTimer};
use specdeck::finding::Finding;
use specdeck::spec::{Algorithm, LaunchSpec};

const ROUNDS: usize = 15;

/// The runtime check alone, as in SGLang: no preflight, so the weights load first.
fn no_preflight(_: &LaunchSpec) -> Vec<Finding> {
    Vec::new()
}

fn demo_spec() -> LaunchSpec {
    let root = env!("CARGO_MANIFEST_DIR");
    LaunchSpec {
        model_path: Some(format!("{root}/testdata/demo/target")),
        draft_model_path: Some(format!("{root}/testdata/demo/draft")),
        speculative_algorithm: Some(Algorithm::Eagle3),
        ..LaunchSpec::default()
    }
}

fn ready_seconds(outcome: LaunchOutcome, what: &str) -> (f64, bool) {
    match outcome {
        LaunchOutcome::Ready { elapsed_s, reused_target } => (elapsed_s, reused_target),
        LaunchOutcome::Failed(f) => panic!("{what}: {} ({})", f.id, f.message),
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Milliseconds per finished phase of the last launch in `events`, in order.
fn phase_times(events: &mut EventReceiver) -> String {
    let mut timer = PhaseTimer::default();
    while let Ok(ev) = events.try_recv() {
        if matches!(ev.event, Event::Launch { .. }) {
            timer = PhaseTimer::default();
        }
        timer.observe(&ev);
    }
    timer.ended.iter().map(|(phase, s)| format!("{phase} {:.1}", s * 1e3)).collect::<Vec<_>>().join(", ")
}

/// Seconds of (relaunch, cold start), and the phases of each in ms, as text.
type Round = ((f64, f64), (String, String));

/// One round: the failing launch, then the remedy's relaunch in the same engine, then a
/// cold start of the remedied spec in a fresh engine.
fn round(remedy: &str) -> Round {
    let spec = demo_spec();
    let (sink, mut events) = EventSink::channel();
    let mut engine = Engine::new(CpuBackend, sink);
    let LaunchOutcome::Failed(finding) = engine.launch(&spec, &no_preflight) else {
        panic!("the demo pair must fail at drafter-init without the remedy")
    };
    assert_eq!(finding.id, context::ID);
    let mut fixed = spec.clone();
    fixed.apply_remedy(remedy, &finding.remedy(remedy).expect("the finding offers it").changes).unwrap();
    let (relaunch, reused) = ready_seconds(engine.launch(&fixed, &no_preflight), remedy);
    assert!(reused, "{remedy}: the relaunch keeps the target");
    let relaunch_phases = phase_times(&mut events);
    drop(engine);

    let (sink, mut events) = EventSink::channel();
    let mut fresh = Engine::new(CpuBackend, sink);
    let (cold, reused) = ready_seconds(fresh.launch(&fixed, &no_preflight), "cold start");
    assert!(!reused);
    ((relaunch, cold), (relaunch_phases, phase_times(&mut events)))
}

fn main() {
    let started = Instant::now();
    println!("relaunch after a drafter-only remedy vs cold start, demo pair, CPU engine, median of {ROUNDS}");
    for remedy in [context::CLAMP, context::ALLOW] {
        round(remedy); // warm the page cache and the allocator
        let (times, phases): (Vec<_>, Vec<(String, String)>) = (0..ROUNDS).map(|_| round(remedy)).unzip();
        let (relaunches, colds): (Vec<f64>, Vec<f64>) = times.into_iter().unzip();
        let (r, c) = (median(relaunches), median(colds));
        println!("{remedy:<22} relaunch {:>7.2} ms   cold start {:>7.2} ms   relaunch/cold {:.3}", r * 1e3, c * 1e3, r / c);
        let (relaunch_phases, cold_phases) = &phases[ROUNDS / 2];
        println!("  a relaunch's phases (ms): {relaunch_phases}\n  a cold start's phases (ms): {cold_phases}");
    }
    println!("({:.1} s)", started.elapsed().as_secs_f64());
}
