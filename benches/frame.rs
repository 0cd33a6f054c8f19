//! Time to draw one console frame at 200x60 with 8 GPUs and 10,000 log lines, on ratatui's
//! TestBackend, against a same-run reference: drawing an empty frame.
//!
//!   cargo bench --bench frame
//!
//! Two cases: the same state redrawn, and a new log line before every frame (the log pane
//! scrolls, so every frame differs from the last, as when an engine is streaming).

use std::hint::black_box;
use std::time::Instant;

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use specdeck::console::app::{Effect, Input, Options, State};
use specdeck::console::keymap::Keymap;
use specdeck::console::layout::Layout;
use specdeck::console::panes;
use specdeck::console::run::read_source;
use specdeck::console::theme::Theme;
use specdeck::engine::context;
use specdeck::event::{Event, GpuSample, LogLevel, PhaseState, ProgressUnit, TimedEvent};
use specdeck::model::config::ModelConfig;
use specdeck::phase::PhaseId;
use specdeck::spec::LaunchSpec;

const FRAMES: usize = 2000;
const LOG_LINES: usize = 10_000;

fn apply(state: &mut State, t: f64, event: Event) {
    let mut queue = vec![Input::Event(TimedEvent { t, event })];
    while let Some(input) = queue.pop() {
        for effect in state.apply(input) {
            if let Effect::ReadFile(path) = effect {
                let text = read_source(&path);
                queue.push(Input::FileLoaded { path, text });
            }
        }
    }
}

/// A failed 8-GPU launch: load gauges per GPU, the diagnosis with both configs quoted,
/// telemetry for 8 GPUs and a long log.
fn busy_state() -> State {
    let spec = LaunchSpec {
        model_path: Some("testdata/console/pair/target".into()),
        draft_model_path: Some("testdata/console/pair/draft".into()),
        tp_size: Some(8),
        ..LaunchSpec::default()
    };
    let options = Options { engine_attached: true, max_new_tokens: 64, ..Options::default() };
    let layouts = Layout::cycle_starting_with(Layout::builtin("default").expect("built-in"));
    let mut state = State::new(spec.clone(), options, Keymap::default(), layouts);
    let gpus = (0..8)
        .map(|index| GpuSample {
            index,
            name: "NVIDIA H200".into(),
            memory_used_bytes: (70 + u64::from(index)) << 30,
            memory_total_bytes: 141 << 30,
            utilization_pct: 90,
            temperature_c: 60 + index,
            power_w: 500.0,
        })
        .collect();
    apply(&mut state, 0.0, Event::Telemetry { gpus, note: None });
    apply(&mut state, 0.0, Event::Launch { attempt: 1, spec: spec.clone() });
    apply(&mut state, 0.0, Event::Phase { phase: PhaseId::TargetLoad, state: PhaseState::Started, detail: None });
    for gpu in 0..8 {
        let ev = Event::Progress {
            phase: PhaseId::TargetLoad,
            unit: ProgressUnit::Bytes,
            gpu: Some(gpu),
            label: format!("model-{gpu:05}.safetensors"),
            done: 40 << 30,
            total: 64 << 30,
        };
        apply(&mut state, 30.0, ev);
    }
    let target = ModelConfig::load_dir(std::path::Path::new("testdata/console/pair/target")).expect("target config");
    let draft = ModelConfig::load_dir(std::path::Path::new("testdata/console/pair/draft")).expect("draft config");
    let finding = context::check(&target, &draft, &spec).expect("rule runs").expect("the pair mismatches");
    apply(&mut state, 31.0, Event::Finding(finding));
    for i in 0..LOG_LINES {
        let line = format!("[TP{}] Load weight begin. avail mem={:.2} GB, step {i}", i % 8, 120.0 - i as f64 * 0.001);
        apply(&mut state, 31.0 + i as f64 * 0.01, Event::Log { level: LogLevel::Info, source: "engine".into(), line });
    }
    state
}

/// Median and 99th percentile of per-frame times in microseconds.
fn time_frames(mut frame: impl FnMut(usize)) -> (f64, f64) {
    let mut micros: Vec<f64> = (0..FRAMES)
        .map(|i| {
            let start = Instant::now();
            frame(i);
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    micros.sort_by(f64::total_cmp);
    (micros[FRAMES / 2], micros[FRAMES * 99 / 100])
}

fn main() {
    let theme = Theme::colored();
    let mut state = busy_state();
    let lines_at_start = state.log().len();
    let mut terminal = Terminal::new(TestBackend::new(200, 60)).expect("test backend");
    let (empty_median, empty_p99) = time_frames(|_| {
        terminal
            .draw(|f| {
                black_box(f);
            })
            .expect("draw");
    });
    let (static_median, static_p99) = time_frames(|_| {
        terminal.draw(|f| panes::draw(black_box(&state), &theme, f)).expect("draw");
    });
    let (stream_median, stream_p99) = time_frames(|i| {
        let line = format!("decode step {i}: accepted 3 draft tokens");
        apply(&mut state, 200.0 + i as f64, Event::Log { level: LogLevel::Info, source: "engine".into(), line });
        terminal.draw(|f| panes::draw(black_box(&state), &theme, f)).expect("draw");
    });
    println!("frame 200x60, default layout, 8 GPUs, {lines_at_start} log lines (+1 a frame when streaming), {FRAMES} frames each:");
    println!("  empty frame (reference):   median {empty_median:8.1} µs   p99 {empty_p99:8.1} µs");
    println!(
        "  console, same state:       median {static_median:8.1} µs   p99 {static_p99:8.1} µs   ×{:.1} empty",
        static_median / empty_median
    );
    println!(
        "  console, a new log line:   median {stream_median:8.1} µs   p99 {stream_p99:8.1} µs   ×{:.1} empty",
        stream_median / empty_median
    );
}
