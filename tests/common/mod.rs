//! Shared inputs of the console tests: the event sequences contract 1 describes, built
//! around the real `context-length-exceeds-draft` rule run on real config files.

#![allow(dead_code)] // each test binary uses a different part

pub mod binary;
pub mod tiny_pair;

use specdeck::console::{EngineControl, GenerateParams};
use specdeck::engine::context;
use specdeck::event::{Event, GenerationStats, GpuSample, LogLevel, PhaseState, ProgressUnit, TimedEvent};
use specdeck::finding::Finding;
use specdeck::model::config::ModelConfig;
use specdeck::phase::PhaseId;
use specdeck::spec::{Algorithm, LaunchSpec};
use specdeck::telemetry::no_gpu_note;
use tokio::sync::mpsc::UnboundedSender;

pub const TARGET: &str = "testdata/console/pair/target";
pub const DRAFT: &str = "testdata/console/pair/draft";
pub const TARGET_BYTES: u64 = 13_644_312;
pub const DRAFT_BYTES: u64 = 3_300_752;

pub fn spec() -> LaunchSpec {
    LaunchSpec {
        model_path: Some(TARGET.into()),
        draft_model_path: Some(DRAFT.into()),
        speculative_algorithm: Some(Algorithm::Eagle3),
        ..LaunchSpec::default()
    }
}

/// The real rule on the real files.
pub fn preflight(spec: &LaunchSpec) -> Vec<Finding> {
    let target = ModelConfig::load_dir(std::path::Path::new(TARGET)).unwrap();
    let draft = ModelConfig::load_dir(std::path::Path::new(DRAFT)).unwrap();
    context::check(&target, &draft, spec).unwrap().into_iter().collect()
}

/// Builds a timed event sequence with a running clock.
#[derive(Default)]
pub struct Story {
    pub t: f64,
    pub events: Vec<TimedEvent>,
}

impl Story {
    pub fn new() -> Story {
        Story::default()
    }

    pub fn at(&mut self, dt: f64, event: Event) -> &mut Story {
        self.t += dt;
        self.events.push(TimedEvent { t: (self.t * 1e6).round() / 1e6, event });
        self
    }

    fn phase(&mut self, dt: f64, phase: PhaseId, state: PhaseState, detail: Option<&str>) -> &mut Story {
        self.at(dt, Event::Phase { phase, state, detail: detail.map(str::to_string) })
    }

    fn bytes(&mut self, dt: f64, phase: PhaseId, gpu: Option<u32>, label: &str, done: u64, total: u64) -> &mut Story {
        self.at(dt, Event::Progress { phase, unit: ProgressUnit::Bytes, gpu, label: label.into(), done, total })
    }

    /// A launch up to preflight; returns whether preflight passed. An error finding stops
    /// the launch there, as the engine does (no weights move).
    pub fn preflight(&mut self, attempt: u32, spec: &LaunchSpec) -> bool {
        self.at(0.0, Event::Launch { attempt, spec: spec.clone() });
        self.phase(0.0005, PhaseId::Preflight, PhaseState::Started, None);
        let findings = preflight(spec);
        let failed = findings.iter().any(Finding::is_error);
        for f in findings {
            self.at(0.002, Event::Finding(f));
        }
        let state = if failed { PhaseState::Failed } else { PhaseState::Done };
        self.phase(0.0005, PhaseId::Preflight, state, None);
        !failed
    }

    /// A whole launch on the CPU backend that reaches ready.
    pub fn launch_to_ready(&mut self, attempt: u32, spec: &LaunchSpec, reuse_target: bool) -> &mut Story {
        let start = self.t;
        assert!(self.preflight(attempt, spec), "the spec must pass preflight");
        self.phase(0.001, PhaseId::KernelCompile, PhaseState::Skipped, Some("CPU backend"));
        if reuse_target {
            self.phase(0.001, PhaseId::TargetLoad, PhaseState::Skipped, Some("kept resident"));
        } else {
            self.phase(0.001, PhaseId::TargetLoad, PhaseState::Started, None);
            for quarter in 1..=4 {
                self.bytes(0.4, PhaseId::TargetLoad, None, "model.safetensors", TARGET_BYTES * quarter / 4, TARGET_BYTES);
            }
            self.phase(0.01, PhaseId::TargetLoad, PhaseState::Done, None);
        }
        self.phase(0.001, PhaseId::KvAlloc, PhaseState::Started, None);
        self.phase(0.05, PhaseId::KvAlloc, PhaseState::Done, None);
        self.phase(0.001, PhaseId::TargetGraphCapture, PhaseState::Skipped, Some("CPU backend"));
        self.phase(0.001, PhaseId::DrafterLoad, PhaseState::Started, None);
        self.bytes(0.1, PhaseId::DrafterLoad, None, "model.safetensors", DRAFT_BYTES, DRAFT_BYTES);
        self.phase(0.001, PhaseId::DrafterLoad, PhaseState::Done, None);
        self.phase(0.001, PhaseId::DrafterInit, PhaseState::Started, None);
        self.phase(0.02, PhaseId::DrafterInit, PhaseState::Done, None);
        self.phase(0.001, PhaseId::DraftGraphCapture, PhaseState::Skipped, Some("CPU backend"));
        self.phase(0.001, PhaseId::Warmup, PhaseState::Started, None);
        self.phase(0.08, PhaseId::Warmup, PhaseState::Done, None);
        self.phase(0.001, PhaseId::Ready, PhaseState::Done, None);
        let elapsed_s = ((self.t - start) * 1e6).round() / 1e6;
        self.at(0.0, Event::Ready { elapsed_s, reused_target: reuse_target })
    }

    /// Committed groups: (text, accepted draft tokens) then the target's own token, as the
    /// engine emits them per verify step.
    pub fn generate(&mut self, steps: &[(&str, &str)]) -> &mut Story {
        let mut id = 100;
        let mut next_ids = |n: usize| {
            let ids: Vec<u32> = (id..id + n as u32).collect();
            id += n as u32;
            ids
        };
        for (drafted, own) in steps {
            let n = drafted.split_inclusive(' ').count();
            if !drafted.is_empty() {
                self.at(0.004, Event::Token { ids: next_ids(n), text: drafted.to_string(), drafted: true });
            }
            self.at(0.004, Event::Token { ids: next_ids(1), text: own.to_string(), drafted: false });
        }
        self
    }

    pub fn stats(&mut self, stats: GenerationStats) -> &mut Story {
        self.at(0.001, Event::Stats(stats))
    }

    pub fn log(&mut self, level: LogLevel, source: &str, line: &str) -> &mut Story {
        self.at(0.001, Event::Log { level, source: source.into(), line: line.into() })
    }

    pub fn no_gpu(&mut self) -> &mut Story {
        let note = no_gpu_note("libnvidia-ml.so.1 not found");
        self.at(0.0, Event::Telemetry { gpus: Vec::new(), note: Some(note) })
    }

    pub fn gpus(&mut self, n: u32) -> &mut Story {
        self.at(0.0, Event::Telemetry { gpus: (0..n).map(h200).collect(), note: None })
    }
}

/// A plausible H200 sample, different per index.
pub fn h200(index: u32) -> GpuSample {
    GpuSample {
        index,
        name: "NVIDIA H200".into(),
        memory_used_bytes: (60 + 9 * u64::from(index)) << 30,
        memory_total_bytes: 143_771_009_024,
        utilization_pct: 40 + 7 * index,
        temperature_c: 41 + 3 * index,
        power_w: 180.0 + 35.5 * f64::from(index),
    }
}

/// The demo story: the failed launch, clamp applied, a cold start, a relaunch that kept the
/// target, and a generation. Events only; `upto` picks how far.
pub fn demo_story(upto: Stage) -> Story {
    let mut s = Story::new();
    s.no_gpu();
    s.log(LogLevel::Info, "engine", "CPU reference backend (no CUDA device)");
    assert!(!s.preflight(1, &spec()));
    if upto == Stage::Diagnosis {
        return s;
    }
    let mut clamped = spec();
    let remedy = preflight(&spec())[0].remedies[0].clone();
    s.at(0.8, Event::RemedyApplied { id: remedy.id.clone(), changes: remedy.changes.clone() });
    clamped.apply_remedy(&remedy.id, &remedy.changes).unwrap();
    s.launch_to_ready(2, &clamped, false);
    s.log(LogLevel::Warning, "engine", "tokenizer has no chat template; prompts are sent as plain text");
    s.t += 1.5; // the user reads the output, then presses r
    s.launch_to_ready(3, &clamped, true);
    s.generate(&[
        ("To be,", " or"),
        (" not to", " be,"),
        ("", " that"),
        (" is the question:\n", "Whether"),
        (" 'tis nobler", " in"),
        (" the mind to", " suffer"),
    ]);
    s.stats(GenerationStats { tokens: 18, tokens_per_s: 412.5, mean_accept_length: 3.0, accept_histogram: vec![0, 1, 1, 2, 1, 1] });
    s
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Diagnosis,
    Relaunched,
}

/// A tensor-parallel launch caught mid graph capture: per-GPU load gauges, per-batch-size
/// capture gauges, and telemetry for 8 GPUs.
pub fn sharded_capture_story() -> Story {
    let mut s = Story::new();
    s.gpus(8);
    let mut spec = spec();
    spec.tp_size = Some(8);
    spec.context_length = Some(131072);
    assert!(s.preflight(1, &spec));
    s.at(0.001, Event::Phase { phase: PhaseId::KernelCompile, state: PhaseState::Started, detail: None });
    s.at(0.9, Event::Phase { phase: PhaseId::KernelCompile, state: PhaseState::Done, detail: Some("12 kernels, cached".into()) });
    s.at(0.001, Event::Phase { phase: PhaseId::TargetLoad, state: PhaseState::Started, detail: None });
    let per_gpu = 68_400_000_000u64;
    for step in 1..=4u64 {
        for gpu in 0..8 {
            // GPU 7 lags behind: its gauge shows a remaining ETA.
            let done = if gpu == 7 && step == 4 { per_gpu * 3 / 4 } else { per_gpu * step / 4 };
            s.bytes(0.0, PhaseId::TargetLoad, Some(gpu), &format!("model-0000{}-of-00064.safetensors", gpu + 1), done, per_gpu);
        }
        s.t += 20.0;
    }
    s.at(0.0, Event::Phase { phase: PhaseId::KvAlloc, state: PhaseState::Started, detail: None });
    s.at(1.2, Event::Phase { phase: PhaseId::KvAlloc, state: PhaseState::Done, detail: Some("118.2 GiB KV cache".into()) });
    s.at(0.001, Event::Phase { phase: PhaseId::TargetGraphCapture, state: PhaseState::Started, detail: None });
    for (i, bs) in [1, 2, 4, 8, 16, 32].iter().enumerate() {
        let done = match i {
            0..=2 => 1,
            _ => 0,
        };
        s.at(
            0.3,
            Event::Progress {
                phase: PhaseId::TargetGraphCapture,
                unit: ProgressUnit::BatchSize,
                gpu: None,
                label: bs.to_string(),
                done,
                total: 1,
            },
        );
    }
    s
}

/// Commands the console sent, as the engine would receive them.
#[allow(clippy::large_enum_variant)] // a handful per test
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Launch(LaunchSpec),
    Generate(GenerateParams),
    Shutdown,
}

/// The console's side of contract 2 over a channel, so a test plays the engine: it sees
/// each command and answers with the events contract 1 describes.
pub struct ChannelEngine(pub UnboundedSender<Command>);

impl EngineControl for ChannelEngine {
    fn launch(&mut self, spec: LaunchSpec) {
        let _ = self.0.send(Command::Launch(spec));
    }

    fn generate(&mut self, params: GenerateParams) {
        let _ = self.0.send(Command::Generate(params));
    }

    fn shutdown(&mut self) {
        let _ = self.0.send(Command::Shutdown);
    }
}
