//! A launch, phase by phase, as events: preflight → (kernel-compile) → target-load →
//! kv-alloc → (target-graph-capture) → drafter-load → drafter-init → (draft-graph-capture)
//! → warmup → ready. Phases the CPU backend does not have are `Skipped`. A failure emits its
//! `Finding` and `Phase{failed}` and leaves the engine not ready; a relaunch keeps the target
//! resident when the new spec names the same target (only drafter, decoding or context
//! settings changed) and says so with `target-load` `Skipped` "kept resident".

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::backend::cuda::gemm::GEMV_MAX_ROWS;
use crate::backend::{Backend, BackendError};
use crate::engine::capture::capture_phase;
use crate::engine::compile::kernel_compile_phase;
use crate::engine::drafter::{Drafter, StandaloneDrafter};
use crate::engine::eagle3::{Eagle3Config, Eagle3Drafter};
use crate::engine::graph_sizes::DEFAULT_MAX_BS;
use crate::engine::handle::GenerateRequest;
use crate::engine::llama::{Capacity, LlamaConfig, LlamaModel};
use crate::engine::ranks::RankVote;
use crate::engine::spec_decode::{self, Decoding, Generation, OnTokens, Sampling, Target};
use crate::engine::tree::TreeShape;
use crate::engine::verify;
use crate::engine::weights::{FileProgress, Loader};
use crate::engine::EngineError;
use crate::event::{Event, EventSink, GenerationStats, LogLevel, PhaseId, PhaseState, ProgressUnit};
use crate::finding::{Evidence, Finding, Severity, Side, UNREADABLE_INPUT};
use crate::model::checkpoint::Checkpoint;
use crate::model::config::ModelConfig;
use crate::model::tokenizer::{TextStream, TextTokenizer};
use crate::preflight::context;
use crate::spec::{Algorithm, Device, LaunchSpec};

/// The CPU reference caps its KV cache (and so prompt + output) at this many tokens.
pub const CPU_MAX_TOKENS: usize = 4096;
/// Tokens per prefill forward: most prompts take one forward, with one set of launches. On
/// HumanEval prompts this measured as fast as 128 (BENCHMARKS.md, GPU run 10, ab-2): their
/// prefill time was attention's.
pub const PREFILL_CHUNK: usize = 512;
/// The largest verify tree (`--speculative-num-draft-tokens`): as many rows as the backend
/// sums like decode steps.
pub const MAX_TREE_TOKENS: usize = crate::backend::STEP_QUERIES_MAX;

pub const DEVICE_UNAVAILABLE: &str = "device-unavailable";
pub const UNSUPPORTED_ALGORITHM: &str = "unsupported-algorithm";
pub const OUT_OF_MEMORY: &str = "out-of-memory";
pub const BACKEND_ERROR: &str = "backend-error";

const SOURCE: &str = "engine";

#[derive(Clone, Debug, PartialEq)]
pub enum LaunchOutcome {
    Ready { elapsed_s: f64, reused_target: bool },
    Failed(Finding),
}

/// What identifies a loaded target: a relaunch with the same key keeps the weights.
#[derive(Clone, Debug, PartialEq)]
struct TargetKey {
    dir: PathBuf,
    dtype: Option<String>,
    tp: u32,
    device: Device,
}

struct LoadedTarget<B: Backend> {
    key: TargetKey,
    config: ModelConfig,
    tokenizer: TextTokenizer,
    /// The model alone between launches; with its KV cache once kv-alloc ran.
    model: Option<LlamaModel<B>>,
    target: Option<Target<B>>,
}

/// Most draft steps and top-k this engine sizes its buffers for.
pub const MAX_STEPS: usize = 32;
pub const MAX_TOPK: usize = 16;

/// The tree shape a spec asks for, SGLang's defaults filled in (S=3, K=1, N=S+1 for a chain).
pub fn tree_shape(spec: &LaunchSpec, events: &EventSink) -> TreeShape {
    let clamp = |flag: &str, asked: Option<u32>, default: usize, most: usize| {
        let v = asked.map_or(default, |v| v as usize);
        let used = v.clamp(1, most);
        if used != v {
            events.log(LogLevel::Warning, SOURCE, format!("{flag} {v} is outside 1..={most}; using {used}"));
        }
        used
    };
    let steps = clamp("--speculative-num-steps", spec.speculative_num_steps, 3, MAX_STEPS);
    let topk = clamp("--speculative-eagle-topk", spec.speculative_eagle_topk, 1, MAX_TOPK);
    let most = (TreeShape { steps, topk, draft_tokens: 0 }.candidates() + 1).min(MAX_TREE_TOKENS);
    let asked = spec.speculative_num_draft_tokens.map(|n| n as usize);
    let draft_tokens = match (topk, asked) {
        (1, _) => steps + 1,
        (_, Some(n)) => n.clamp(2, most),
        (_, None) => (steps * topk + 1).min(most),
    };
    if let Some(n) = asked.filter(|&n| n != draft_tokens) {
        events.log(
            LogLevel::Warning,
            SOURCE,
            format!("--speculative-num-draft-tokens {n} does not fit steps {steps} × topk {topk}; using {draft_tokens}"),
        );
    }
    TreeShape { steps, topk, draft_tokens }
}

/// A finding for an engine error in `phase`, citing the file and key or tensor it names.
pub fn error_finding(side: Side, phase: PhaseId, e: &EngineError) -> Finding {
    let id = match e {
        EngineError::Backend(BackendError::OutOfMemory { .. }) => OUT_OF_MEMORY,
        EngineError::Backend(BackendError::Device(_)) | EngineError::Request(_) => BACKEND_ERROR,
        _ => UNREADABLE_INPUT,
    };
    let mut f = Finding::new(id, Severity::Error, phase, e.to_string());
    if let Some((file, key)) = e.location() {
        f = f.with_evidence(Evidence::new(side, file, key, Value::Null));
    }
    f
}

fn missing_flag(flag: &str, what: &str) -> Finding {
    Finding::new(UNREADABLE_INPUT, Severity::Error, PhaseId::Preflight, format!("{flag} is required: the {what}"))
        .with_evidence(Evidence::new(Side::Launch, flag, flag, Value::Null))
}

fn phase(events: &EventSink, phase: PhaseId, state: PhaseState, detail: Option<String>) {
    events.emit(Event::Phase { phase, state, detail });
}

/// Emit a failure: the finding, then `Phase{failed}`.
fn fail(events: &EventSink, phase_id: PhaseId, finding: Finding) -> Finding {
    events.emit(Event::Finding(finding.clone()));
    phase(events, phase_id, PhaseState::Failed, None);
    finding
}

/// Run one phase: `Started`, then `Done`, or the finding and `Failed`.
fn run_phase<T>(events: &EventSink, id: PhaseId, side: Side, work: impl FnOnce() -> Result<T, EngineError>) -> Result<T, Finding> {
    phase(events, id, PhaseState::Started, None);
    match work() {
        Ok(v) => {
            phase(events, id, PhaseState::Done, None);
            Ok(v)
        }
        Err(e) => Err(fail(events, id, error_finding(side, id, &e))),
    }
}

/// What identifies a loaded drafter: a relaunch beside the same resident target with the
/// same folder and the same effective configuration keeps its weights, and only sizes its
/// caches for the new launch (a context clamp, a new tree shape).
#[derive(Clone, Debug, PartialEq)]
enum DrafterKey {
    Eagle3(PathBuf, Eagle3Config),
    Standalone(PathBuf, LlamaConfig),
}

/// The largest step (rows) replayed from a CUDA graph: `--cuda-graph-max-bs`, else the default.
fn graph_max_bs(spec: &LaunchSpec) -> u32 {
    spec.cuda_graph_max_bs.unwrap_or(DEFAULT_MAX_BS)
}

struct LoadedDrafter<B: Backend> {
    key: DrafterKey,
    drafter: Box<dyn Drafter<B>>,
}

pub struct Engine<B: Backend> {
    backend: Arc<B>,
    events: EventSink,
    attempt: u32,
    target: Option<LoadedTarget<B>>,
    drafter: Option<LoadedDrafter<B>>,
    shape: TreeShape,
    ready: bool,
    /// Set on each rank of a tensor-parallel group: the ranks agree that every one of them
    /// launched before any runs the warmup's collectives.
    vote: Option<Arc<RankVote>>,
}

impl<B: Backend> Engine<B> {
    pub fn new(backend: B, events: EventSink) -> Engine<B> {
        Engine {
            backend: Arc::new(backend),
            events,
            attempt: 0,
            target: None,
            drafter: None,
            shape: TreeShape { steps: 1, topk: 1, draft_tokens: 1 },
            ready: false,
            vote: None,
        }
    }

    /// Make this engine one rank of a tensor-parallel group that launches together.
    pub fn join_group(&mut self, vote: Arc<RankVote>) {
        self.vote = Some(vote);
    }

    /// The backend's name ("cpu", "cuda").
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    pub fn is_ready(&self) -> bool {
        self.ready
    }

    pub fn events(&self) -> &EventSink {
        &self.events
    }

    /// Bytes of weights one target step and one draft step read.
    pub fn weight_bytes(&self) -> (u64, Option<u64>) {
        let target = self.target.as_ref().and_then(|t| t.target.as_ref()).map_or(0, |t| t.model.weight_bytes());
        (target, self.drafter.as_ref().map(|d| d.drafter.weight_bytes()))
    }

    /// Start (or restart) with `spec`. `preflight` is the full rule set (`check_spec`).
    pub fn launch(&mut self, spec: &LaunchSpec, preflight: &dyn Fn(&LaunchSpec) -> Vec<Finding>) -> LaunchOutcome {
        let start = Instant::now();
        let events = self.events.clone();
        self.attempt += 1;
        self.ready = false;
        self.events.emit(Event::Launch { attempt: self.attempt, spec: spec.clone() });
        let launched = self.launch_phases(spec, preflight);
        let launched = self.agree(launched).and_then(|reused| self.warmup().map(|()| reused));
        match launched {
            Ok(reused_target) => {
                let elapsed_s = start.elapsed().as_secs_f64();
                self.ready = true;
                phase(&events, PhaseId::Ready, PhaseState::Done, None);
                self.events.emit(Event::Ready { elapsed_s, reused_target });
                LaunchOutcome::Ready { elapsed_s, reused_target }
            }
            Err(f) => LaunchOutcome::Failed(f),
        }
    }

    fn launch_phases(&mut self, spec: &LaunchSpec, preflight: &dyn Fn(&LaunchSpec) -> Vec<Finding>) -> Result<bool, Finding> {
        let events = self.events.clone();
        phase(&events, PhaseId::Preflight, PhaseState::Started, None);
        let mut findings = preflight(spec);
        findings.extend(self.device_findings(spec));
        for f in &findings {
            self.events.emit(Event::Finding(f.clone()));
        }
        if let Some(f) = findings.into_iter().find(Finding::is_error) {
            phase(&events, PhaseId::Preflight, PhaseState::Failed, None);
            return Err(f);
        }
        let Some(model_path) = spec.model_path.as_deref() else {
            return Err(fail(&events, PhaseId::Preflight, missing_flag("--model-path", "target model folder")));
        };
        phase(&events, PhaseId::Preflight, PhaseState::Done, None);
        kernel_compile_phase(&*self.backend, &events)?;

        let key = TargetKey { dir: PathBuf::from(model_path), dtype: spec.dtype.clone(), tp: spec.tp(), device: spec.device };
        let reused = self.target.as_ref().is_some_and(|t| t.key == key);
        // A drafter may stay only beside the target it was loaded against (EAGLE-3 shares
        // its embeddings); otherwise it goes first, so its memory is free for what loads next.
        let kept_drafter = self.drafter.take().filter(|_| reused);
        if reused {
            phase(&events, PhaseId::TargetLoad, PhaseState::Skipped, Some("kept resident".into()));
        } else {
            self.target = None;
            let loaded = run_phase(&events, PhaseId::TargetLoad, Side::Target, || self.load_target(key))?;
            self.target = Some(loaded);
        }
        self.shape = tree_shape(spec, &self.events);
        self.backend.set_deterministic(spec.deterministic);
        let algorithm = spec.speculative_algorithm.unwrap_or(Algorithm::None);
        let shape = self.shape;
        let tree_slots = if algorithm == Algorithm::None { 1 } else { shape.draft_tokens };
        let tokens = run_phase(&events, PhaseId::KvAlloc, Side::Target, || self.alloc_kv(spec, tree_slots))?;
        self.capture_target_graphs(spec, algorithm)?;

        let draft_dir = match algorithm {
            Algorithm::None => None,
            Algorithm::Eagle => {
                let f = Finding::new(
                    UNSUPPORTED_ALGORITHM,
                    Severity::Error,
                    PhaseId::DrafterLoad,
                    "This engine drafts with EAGLE-3 (fc over three target hidden states) or a STANDALONE model; an EAGLE (1/2) drafter reads one top-layer feature and has another checkpoint layout. Launch with --speculative-algorithm EAGLE3 or STANDALONE.",
                )
                .with_evidence(Evidence::new(Side::Launch, "launch flags", "--speculative-algorithm", "EAGLE"));
                return Err(fail(&events, PhaseId::DrafterLoad, f));
            }
            Algorithm::Eagle3 | Algorithm::Standalone => match spec.draft_model_path.as_deref() {
                Some(d) => Some(PathBuf::from(d)),
                None => return Err(fail(&events, PhaseId::DrafterLoad, missing_flag("--speculative-draft-model-path", "drafter folder"))),
            },
        };
        match &draft_dir {
            None => {
                phase(&events, PhaseId::DrafterLoad, PhaseState::Skipped, Some("no drafter (--speculative-algorithm NONE)".into()));
                phase(&events, PhaseId::DrafterInit, PhaseState::Skipped, None);
                let t = self.target.as_mut().expect("target loaded above");
                t.target
                    .as_mut()
                    .expect("kv allocated above")
                    .model
                    .set_capture(None)
                    .map_err(|e| error_finding(Side::Target, PhaseId::DrafterInit, &e.into()))?;
            }
            Some(dir) => {
                let (drafter, draft_cfg) = match self.keep_drafter(kept_drafter, dir, spec, algorithm, tokens) {
                    Some(kept) => {
                        kept.map_err(|e| fail(&events, PhaseId::DrafterLoad, error_finding(Side::Draft, PhaseId::DrafterLoad, &e)))?
                    }
                    None => run_phase(&events, PhaseId::DrafterLoad, Side::Draft, || self.load_drafter(dir, spec, algorithm, tokens))?,
                };
                self.drafter = Some(drafter);
                self.drafter_init(spec, algorithm, &draft_cfg)?;
            }
        }
        self.capture_draft_graphs(spec)?;
        Ok(reused)
    }

    /// The `target-graph-capture` phase: the greedy verify step of each size the launch
    /// uses (1 row for a decode, the draft tokens for a verify) recorded and captured, one
    /// progress event per size; sizes above `--cuda-graph-max-bs` stay eager.
    fn capture_target_graphs(&mut self, spec: &LaunchSpec, algorithm: Algorithm) -> Result<(), Finding> {
        if !self.backend.uses_graphs() {
            phase(&self.events, PhaseId::TargetGraphCapture, PhaseState::Skipped, Some("no CUDA graphs on this backend".into()));
            return Ok(());
        }
        let mut sizes = vec![1u32];
        if algorithm != Algorithm::None && self.shape.draft_tokens > 1 {
            sizes.push(self.shape.draft_tokens as u32);
        }
        let tree = !self.shape.is_chain();
        let max_bs = graph_max_bs(spec);
        let gpu = self.backend.gpu_ordinal();
        let target = self.target.as_mut().and_then(|t| t.target.as_mut()).expect("kv allocated before graph capture");
        capture_phase(&self.events, PhaseId::TargetGraphCapture, &sizes, max_bs, gpu, |bs| {
            target.capture_verify(bs as usize, tree && bs > 1).map_err(|e| match e {
                EngineError::Backend(b) => b,
                other => BackendError::Device(other.to_string()),
            })
        })
    }

    /// The `draft-graph-capture` phase: a short greedy generation that runs every draft
    /// step of the launch's tree twice, so each (rows, region) step is recorded and then
    /// captured; steps of more rows than `--cuda-graph-max-bs` stay eager.
    fn capture_draft_graphs(&mut self, spec: &LaunchSpec) -> Result<(), Finding> {
        let events = self.events.clone();
        let max_bs = graph_max_bs(spec) as usize;
        let skipped = if !self.backend.uses_graphs() {
            Some("no CUDA graphs on this backend")
        } else if max_bs == 0 {
            Some("--cuda-graph-max-bs 0")
        } else if self.drafter.is_none() {
            Some("no drafter")
        } else {
            None
        };
        if let Some(why) = skipped {
            if let Some(d) = self.drafter.as_mut() {
                d.drafter.set_graph_rows(0);
            }
            phase(&events, PhaseId::DraftGraphCapture, PhaseState::Skipped, Some(why.into()));
            return Ok(());
        }
        let drafter = self.drafter.as_mut().expect("checked above");
        drafter.drafter.set_graph_rows(max_bs);
        let shape = self.shape;
        // Each cycle drafts every level and emits at most steps + 1 tokens: this many new
        // tokens take at least two cycles.
        let max_new_tokens = 2 * (shape.steps + 1) + 1;
        run_phase(&events, PhaseId::DraftGraphCapture, Side::Draft, || {
            let decoding = Decoding { shape, sampling: None, max_new_tokens, stop: Vec::new() };
            self.run_generation(&[0, 0], &decoding, &mut |_, _| {}).map(drop)
        })
    }

    /// In a tensor-parallel group, wait until every rank has finished its launch phases and
    /// fail this one too when another failed (the warmup's all-reduces need every rank).
    fn agree(&self, launched: Result<bool, Finding>) -> Result<bool, Finding> {
        let Some(vote) = &self.vote else { return launched };
        let all = vote.vote(launched.is_ok());
        match launched {
            Ok(_) if !all => {
                let f = Finding::new(BACKEND_ERROR, Severity::Error, PhaseId::Warmup, "another tensor-parallel rank failed to launch");
                Err(fail(&self.events, PhaseId::Warmup, f))
            }
            other => other,
        }
    }

    fn warmup(&mut self) -> Result<(), Finding> {
        let shape = self.shape;
        let room = self.target.as_ref().and_then(|t| t.target.as_ref()).map_or(0, |t| t.max_tokens());
        let prompt = vec![0; warmup_prompt_tokens(self.backend.slow_first_shapes(), room)];
        run_phase(&self.events.clone(), PhaseId::Warmup, Side::Target, || {
            let decoding = Decoding { shape, sampling: None, max_new_tokens: 2, stop: Vec::new() };
            self.run_generation(&prompt, &decoding, &mut |_, _| {}).map(drop)
        })
    }

    /// `--device cuda` given to an engine built on the CPU reference (the device itself is
    /// chosen, and `auto`'s choice logged, where the backend is made: `ranks::engine_for`).
    fn device_findings(&self, spec: &LaunchSpec) -> Vec<Finding> {
        if spec.device != Device::Cuda || self.backend.name() != "cpu" {
            return Vec::new();
        }
        vec![Finding::new(
            DEVICE_UNAVAILABLE,
            Severity::Error,
            PhaseId::Preflight,
            "--device cuda, but this engine runs on the CPU reference backend; use --device cpu (or auto).",
        )
        .with_evidence(Evidence::new(Side::Launch, "launch flags", "--device", "cuda"))]
    }

    fn load_target(&self, key: TargetKey) -> Result<LoadedTarget<B>, EngineError> {
        let dir = key.dir.clone();
        let config = ModelConfig::load_dir(&dir)?;
        let llama = LlamaConfig::from_config(&config)?;
        let tokenizer = TextTokenizer::load_dir(&dir)?;
        let ck = Checkpoint::open(&dir).map_err(BackendError::from)?;
        let cap = Capacity { rows: PREFILL_CHUNK, logit_rows: MAX_TREE_TOKENS, positions: CPU_MAX_TOKENS + MAX_TREE_TOKENS };
        let model = self.load_weights(&ck, PhaseId::TargetLoad, |ld| Ok(LlamaModel::load(self.backend.clone(), llama, ld, cap)?))?;
        Ok(LoadedTarget { key, config, tokenizer, model: Some(model), target: None })
    }

    /// Load with byte progress events for `phase`.
    fn load_weights<T>(
        &self,
        ck: &Checkpoint,
        phase: PhaseId,
        load: impl FnOnce(&mut Loader<'_, B>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let events = self.events.clone();
        let gpu = self.backend.gpu_ordinal();
        let mut progress = |p: FileProgress| {
            events.emit(Event::Progress { phase, unit: ProgressUnit::Bytes, gpu, label: p.file, done: p.done, total: p.total })
        };
        let mut ld = Loader::new(&*self.backend, ck, &mut progress);
        let out = load(&mut ld)?;
        ld.finish();
        Ok(out)
    }

    /// Allocate the target's KV cache for this launch's context; returns the token capacity.
    fn alloc_kv(&mut self, spec: &LaunchSpec, tree_slots: usize) -> Result<usize, EngineError> {
        let t = self.target.as_mut().expect("target loaded before kv-alloc");
        let context = context::target_context(&t.config, spec)?.length as usize;
        let tokens = context.min(CPU_MAX_TOKENS);
        if tokens < context {
            self.events.log(
                LogLevel::Info,
                SOURCE,
                format!("context length {context}: the CPU reference keeps a KV cache of {tokens} tokens"),
            );
        }
        // The old cache's buffers may go away: no recorded graph may point into them.
        self.backend.graph_reset();
        let mut target = match t.target.take() {
            Some(old) => old.resized(tokens + tree_slots, tree_slots)?,
            None => Target::new(t.model.take().expect("a loaded target has its model"), tokens + tree_slots, tree_slots)?,
        };
        if self.backend.uses_graphs() {
            target.graph_rows = graph_max_bs(spec) as usize;
        }
        self.events.log(
            LogLevel::Info,
            SOURCE,
            format!("target KV cache: {} slots, {:.1} MiB", target.kv.slots, target.kv.bytes() as f64 / (1 << 20) as f64),
        );
        t.target = Some(target);
        Ok(tokens)
    }

    /// The drafter's identity for this launch, and its config as on disk (for drafter-init).
    fn drafter_key(dir: &Path, spec: &LaunchSpec, algorithm: Algorithm) -> Result<(DrafterKey, ModelConfig), EngineError> {
        let on_disk = ModelConfig::load_dir(dir)?;
        let cfg = on_disk.with_overrides(&spec.draft_overrides);
        let key = match algorithm {
            Algorithm::Eagle3 => DrafterKey::Eagle3(dir.to_path_buf(), Eagle3Config::from_config(&cfg)?),
            _ => DrafterKey::Standalone(dir.to_path_buf(), LlamaConfig::from_config(&cfg)?),
        };
        Ok((key, on_disk))
    }

    /// KV slots of the drafter: the committed sequence, the root and the draft tree.
    fn drafter_slots(&self, tokens: usize) -> usize {
        tokens + 1 + self.shape.draft_slots()
    }

    /// The previous drafter, when this launch leaves it valid: its caches sized for the new
    /// launch, and drafter-load shown as skipped. `None` when it must be loaded again.
    fn keep_drafter(
        &self,
        kept: Option<LoadedDrafter<B>>,
        dir: &Path,
        spec: &LaunchSpec,
        algorithm: Algorithm,
        tokens: usize,
    ) -> Option<Result<(LoadedDrafter<B>, ModelConfig), EngineError>> {
        let mut kept = kept?;
        let (key, on_disk) = Self::drafter_key(dir, spec, algorithm).ok()?;
        if key != kept.key {
            return None;
        }
        phase(&self.events, PhaseId::DrafterLoad, PhaseState::Skipped, Some("kept resident".into()));
        Some(kept.drafter.resize(self.drafter_slots(tokens), self.shape.topk).map(|()| (kept, on_disk)))
    }

    fn load_drafter(
        &self,
        dir: &Path,
        spec: &LaunchSpec,
        algorithm: Algorithm,
        tokens: usize,
    ) -> Result<(LoadedDrafter<B>, ModelConfig), EngineError> {
        let (key, on_disk) = Self::drafter_key(dir, spec, algorithm)?;
        let ck = Checkpoint::open(dir).map_err(BackendError::from)?;
        let target = self.target.as_ref().and_then(|t| t.target.as_ref()).expect("target ready before the drafter");
        let (kv_slots, topk) = (self.drafter_slots(tokens), self.shape.topk);
        let cap = Capacity { rows: PREFILL_CHUNK, logit_rows: MAX_TREE_TOKENS, positions: CPU_MAX_TOKENS + MAX_TREE_TOKENS };
        let drafter: Box<dyn Drafter<B>> = match &key {
            DrafterKey::Eagle3(_, config) => Box::new(self.load_weights(&ck, PhaseId::DrafterLoad, |ld| {
                Eagle3Drafter::load(config.clone(), ld, &target.model, cap, kv_slots, topk)
            })?),
            DrafterKey::Standalone(_, config) => {
                let model = self.load_weights(&ck, PhaseId::DrafterLoad, |ld| {
                    LlamaModel::load(self.backend.clone(), config.clone(), ld, cap).map_err(EngineError::from)
                })?;
                let file = on_disk.file_name();
                Box::new(StandaloneDrafter::new(model, target.model.config.vocab, kv_slots, topk, &file)?)
            }
        };
        Ok((LoadedDrafter { key, drafter }, on_disk))
    }

    /// SGLang's draft-worker check, then the target's hidden-state capture for EAGLE-3.
    fn drafter_init(&mut self, spec: &LaunchSpec, algorithm: Algorithm, draft_on_disk: &ModelConfig) -> Result<(), Finding> {
        let events = self.events.clone();
        phase(&events, PhaseId::DrafterInit, PhaseState::Started, None);
        let t = self.target.as_mut().expect("target loaded");
        let side_err = |side, e: EngineError| error_finding(side, PhaseId::DrafterInit, &e);
        let checked = context::check(&t.config, draft_on_disk, spec).map_err(|e| side_err(Side::Draft, e.into()));
        let finding = match checked {
            Ok(f) => f,
            Err(f) => return Err(fail(&events, PhaseId::DrafterInit, f)),
        };
        if let Some(f) = finding {
            if f.is_error() {
                return Err(fail(&events, PhaseId::DrafterInit, f));
            }
            self.events.emit(Event::Finding(f));
            self.events.log(LogLevel::Warning, SOURCE, "drafter positions extended to the target's context length");
        }
        let t = self.target.as_mut().expect("target loaded");
        let target = t.target.as_mut().expect("kv allocated");
        let capture = match algorithm {
            Algorithm::Eagle3 => Eagle3Config::from_config(&draft_on_disk.with_overrides(&spec.draft_overrides))
                .map_err(EngineError::from)
                .and_then(|c| c.capture_layers(target.model.config.layers))
                .map(Some),
            _ => Ok(None),
        };
        let result = capture.and_then(|layers| {
            if let Some(l) = &layers {
                self.events.log(LogLevel::Info, SOURCE, format!("EAGLE-3 capture: inputs of target layers {l:?}"));
            }
            target.model.set_capture(layers).map_err(EngineError::from)
        });
        match result {
            Ok(()) => {
                phase(&events, PhaseId::DrafterInit, PhaseState::Done, None);
                Ok(())
            }
            Err(e) => Err(fail(&events, PhaseId::DrafterInit, side_err(Side::Draft, e))),
        }
    }

    fn run_generation(&mut self, prompt: &[u32], decoding: &Decoding, on_tokens: OnTokens<'_>) -> Result<Generation, EngineError> {
        let t = self.target.as_mut().and_then(|t| t.target.as_mut()).ok_or_else(|| EngineError::Request("no target is loaded".into()))?;
        spec_decode::generate(t, self.drafter.as_mut().map(|d| d.drafter.as_mut() as &mut dyn Drafter<B>), prompt, decoding, on_tokens)
    }

    pub fn tokenizer(&self) -> Option<&TextTokenizer> {
        self.target.as_ref().map(|t| &t.tokenizer)
    }

    /// Decoding settings for a request on the launched engine.
    pub fn decoding(&self, max_new_tokens: usize, sampling: Option<Sampling>) -> Decoding {
        let stop = self.tokenizer().map(|t| t.stop_ids().to_vec()).unwrap_or_default();
        Decoding { shape: self.shape, sampling, max_new_tokens, stop }
    }

    /// Generate from token ids (no events): the engine's core, for tests and benchmarks.
    pub fn generate_ids(&mut self, prompt: &[u32], decoding: &Decoding) -> Result<Generation, EngineError> {
        if !self.ready {
            return Err(EngineError::Request("the engine is not ready: launch it first".into()));
        }
        self.run_generation(prompt, decoding, &mut |_, _| {})
    }

    /// Serve a request: `Token` events per committed group, then `Stats`.
    pub fn generate(&mut self, req: &GenerateRequest) -> Result<Generation, EngineError> {
        self.generate_with(req, true)
    }

    /// As `generate`; `use_drafter: false` decodes target-only with the drafter left loaded
    /// (a benchmark can then alternate both modes under the same machine load).
    pub fn generate_with(&mut self, req: &GenerateRequest, use_drafter: bool) -> Result<Generation, EngineError> {
        if !self.ready {
            return Err(EngineError::Request("the engine is not ready: launch it first".into()));
        }
        let tok = &self.target.as_ref().expect("ready implies a target").tokenizer;
        let text = if req.chat { tok.chat_prompt(&req.prompt)? } else { req.prompt.clone() };
        let prompt = tok.encode(&text, !req.chat)?;
        let sampling = (req.temperature > 0.0).then_some(Sampling { temperature: req.temperature, seed: req.seed, rule: verify::lossless });
        let decoding = self.decoding(req.max_new_tokens, sampling);
        let t = self.target.as_mut().expect("ready implies a target");
        let target = t.target.as_mut().expect("ready implies a KV cache");
        let (tok, events) = (&t.tokenizer, &self.events);
        let mut stream = TextStream::default();
        let mut failed = None;
        let mut on_tokens = |ids: &[u32], drafted: bool| {
            let text = stream.push(tok, ids).unwrap_or_else(|e| {
                failed.get_or_insert(e);
                String::new()
            });
            events.emit(Event::Token { ids: ids.to_vec(), text, drafted });
        };
        let drafter = self.drafter.as_mut().filter(|_| use_drafter).map(|d| d.drafter.as_mut() as &mut dyn Drafter<B>);
        let g = spec_decode::generate(target, drafter, &prompt, &decoding, &mut on_tokens)?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        self.events.emit(Event::Stats(GenerationStats {
            tokens: g.tokens.len(),
            tokens_per_s: g.tokens_per_s(),
            mean_accept_length: g.mean_accept_length(),
            accept_histogram: g.accept_histogram(),
        }));
        Ok(g)
    }
}

/// The warmup's prompt: two tokens; or, on a backend whose first run of a shape is slow
/// (`Backend::slow_first_shapes`), one whose prefill takes a full chunk and then the skinny
/// matmuls' widest step, so that the first request's prefill runs at its steady speed. Two
/// tokens of the `room` (prompt + output) stay for the two generated ones.
fn warmup_prompt_tokens(slow_first_shapes: bool, room: usize) -> usize {
    if !slow_first_shapes {
        return 2;
    }
    (PREFILL_CHUNK + GEMV_MAX_ROWS + 1).min(room.saturating_sub(2)).max(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 512 prefill rows through the large-matmul path, then 8 through the skinny kernels,
    /// then the root: the prefill kernels have run once before the first request.
    #[test]
    fn the_warmup_prompt_covers_a_prefill_chunk_where_first_shapes_are_slow() {
        assert_eq!(warmup_prompt_tokens(false, 4096), 2);
        assert_eq!(warmup_prompt_tokens(true, 4096), 521);
        assert_eq!(warmup_prompt_tokens(true, 100), 98);
        assert_eq!(warmup_prompt_tokens(true, 3), 2);
    }
}
