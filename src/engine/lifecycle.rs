//! A launch, phase by phase, as events: preflight → (kernel-compile) → target-load →
//! kv-alloc → (target-graph-capture) → drafter-load → drafter-init → (draft-graph-capture)
//! → warmup → ready. Phases the CPU backend does not have are `Skipped`. A failure emits its
//! `Finding` and `Phase{failed}` and leaves the engine not ready; a relaunch keeps the target
//! resident when the new spec names the same target (only drafter, decoding or context
//! settings changed) and says so with `target-load` `Skipped` "kept resident". The phases read
//! no config: each launch is resolved first into a `plan::LaunchPlan`, which they consume.

use std::sync::Arc;
use std::time::Instant;

use crate::backend::cuda::gemm::GEMV_MAX_ROWS;
use crate::backend::{Backend, BackendError, KvDtype};
use crate::engine::capture::capture_phase;
use crate::engine::compile::kernel_compile_phase;
use crate::engine::context;
use crate::engine::drafter::Drafter;
use crate::engine::eagle3::Eagle3Drafter;
use crate::engine::findings::{error_finding, BACKEND_ERROR, DEVICE_UNAVAILABLE};
use crate::engine::kv_budget::{self, KvMemory, KvRequest, KvSizing};
use crate::engine::llama::Capacity;
use crate::engine::plan::{
    DraftPlan, DrafterKey, DrafterPlan, LaunchPlan, MemoryPlan, TargetKey, TargetPlan, MAX_TREE_TOKENS, PREFILL_CHUNK,
};
use crate::engine::rank_vote::RankVote;
use crate::engine::request::{Cancel, GenerateRequest, LaunchOutcome};
use crate::engine::scheduler::{self, Batch, EngineParts, Scheduler, SchedulerConfig};
use crate::engine::spec_decode::{self, Decoding, Generation, OnTokens, Sampling, Target};
use crate::engine::standalone::StandaloneDrafter;
use crate::engine::target_model::TargetModel;
use crate::engine::tree::TreeShape;
use crate::engine::verify;
use crate::engine::weights::{FileProgress, Loader};
use crate::engine::EngineError;
use crate::event::{Event, EventSink, GenerationStats, LogLevel, PhaseState, ProgressUnit};
use crate::finding::{Evidence, Finding, Severity, Side};
use crate::model::checkpoint::Checkpoint;
use crate::model::tokenizer::{TextStream, TextTokenizer};
use crate::phase::PhaseId;
use crate::spec::{Algorithm, Device, LaunchSpec};

const SOURCE: &str = "engine";

struct LoadedTarget<B: Backend> {
    key: TargetKey,
    /// Shared with the scheduler that serves from this target (`Engine::serve_batch`).
    tokenizer: Arc<TextTokenizer>,
    /// The model alone between launches; with its KV cache once kv-alloc ran.
    model: Option<TargetModel<B>>,
    target: Option<Target<B>>,
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

/// Report a value the plan could not resolve in the phase that uses it, as that phase
/// reports a file it cannot use: `Started`, the finding, `Failed`.
fn unresolved(events: &EventSink, finding: &Finding) -> Finding {
    phase(events, finding.phase, PhaseState::Started, None);
    fail(events, finding.phase, finding.clone())
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
    /// Ends a running generation at its next step (`cancelled_by`).
    cancel: Cancel,
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
            cancel: Cancel::default(),
        }
    }

    /// Generations stop at the next step once `cancel` is set (for a rank of a group, a
    /// `Cancel::for_ranks` of the group's, so every rank stops at the same step).
    pub fn cancelled_by(mut self, cancel: Cancel) -> Engine<B> {
        self.cancel = cancel;
        self
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
        // Resolved here, reported where each part is used; only a missing flag stops preflight.
        let plan = match LaunchPlan::resolve(spec) {
            Err(f) if f.phase == PhaseId::Preflight => return Err(fail(&events, PhaseId::Preflight, f)),
            resolved => resolved,
        };
        phase(&events, PhaseId::Preflight, PhaseState::Done, None);
        kernel_compile_phase(&*self.backend, &events)?;

        let plan = match plan {
            Ok(plan) => plan,
            Err(f) => {
                // A target its config cannot build fails target-load, and nothing loaded stays.
                self.target = None;
                self.drafter = None;
                return Err(unresolved(&events, &f));
            }
        };
        let reused = self.target.as_ref().is_some_and(|t| t.key == plan.target.key);
        // A drafter may stay only beside the target it was loaded against (EAGLE-3 shares
        // its embeddings); otherwise it goes first, so its memory is free for what loads next.
        let kept_drafter = self.drafter.take().filter(|_| reused);
        if reused {
            phase(&events, PhaseId::TargetLoad, PhaseState::Skipped, Some("kept resident".into()));
        } else {
            self.target = None;
            let loaded = run_phase(&events, PhaseId::TargetLoad, Side::Target, || self.load_target(&plan.target))?;
            self.target = Some(loaded);
        }
        for warning in &plan.shape_warnings {
            self.events.log(LogLevel::Warning, SOURCE, warning.clone());
        }
        self.shape = plan.shape;
        self.backend.set_deterministic(spec.deterministic);
        let memory = plan.memory.as_ref().map_err(|f| unresolved(&events, f))?;
        phase(&events, PhaseId::KvAlloc, PhaseState::Started, None);
        self.set_kv_dtype(plan.kv_dtype);
        let sizing = self.size_kv(spec, &plan).map_err(|f| fail(&events, PhaseId::KvAlloc, f))?;
        self.alloc_kv(memory, sizing, plan.graph_max_bs)
            .map_err(|e| fail(&events, PhaseId::KvAlloc, error_finding(Side::Target, PhaseId::KvAlloc, &e)))?;
        phase(&events, PhaseId::KvAlloc, PhaseState::Done, Some(sizing.describe()));
        self.capture_target_graphs(spec, &plan)?;

        match &plan.drafter {
            DraftPlan::None => {
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
            DraftPlan::Refused(f) => return Err(fail(&events, PhaseId::DrafterLoad, f.clone())),
            DraftPlan::Unreadable(f) => return Err(unresolved(&events, f)),
            DraftPlan::Resolved(drafter) => {
                let loaded = match self.keep_drafter(kept_drafter, drafter, memory) {
                    Some(kept) => {
                        kept.map_err(|e| fail(&events, PhaseId::DrafterLoad, error_finding(Side::Draft, PhaseId::DrafterLoad, &e)))?
                    }
                    None => run_phase(&events, PhaseId::DrafterLoad, Side::Draft, || self.load_drafter(drafter, memory))?,
                };
                self.drafter = Some(loaded);
                self.drafter_init(spec, drafter, memory)?;
            }
        }
        self.capture_draft_graphs(plan.graph_max_bs)?;
        Ok(reused)
    }

    /// The `target-graph-capture` phase, one progress event per batch size: the greedy
    /// verify step of one sequence at each length the launch uses (1 row for a decode, the
    /// draft tokens for a verify), and the scheduler's steps at each size of SGLang's list
    /// (`scheduler::batch_layout`); sizes above `--cuda-graph-max-bs` stay eager.
    fn capture_target_graphs(&mut self, spec: &LaunchSpec, plan: &LaunchPlan) -> Result<(), Finding> {
        if !self.backend.uses_graphs() {
            phase(&self.events, PhaseId::TargetGraphCapture, PhaseState::Skipped, Some("no CUDA graphs on this backend".into()));
            return Ok(());
        }
        if self.target.as_ref().and_then(|t| t.target.as_ref()).is_some_and(|t| !t.model.graphs_capture()) {
            phase(&self.events, PhaseId::TargetGraphCapture, PhaseState::Skipped, Some("this target's forward runs eagerly".into()));
            return Ok(());
        }
        let speculative = plan.algorithm != Algorithm::None;
        let mut single = vec![1u32];
        if speculative && self.shape.draft_tokens > 1 {
            single.push(self.shape.draft_tokens as u32);
        }
        single.retain(|&rows| rows <= plan.graph_max_bs);
        let tree = !self.shape.is_chain();
        let gpu = self.backend.gpu_ordinal();
        let cfg = SchedulerConfig::from_spec(spec, self.gpu_memory());
        let target = self.target.as_mut().and_then(|t| t.target.as_mut()).expect("kv allocated before graph capture");
        let layout = scheduler::batch_layout(&cfg, speculative.then_some(self.shape), target.max_tokens(), target.graph_rows > 0);
        let mut sizes: Vec<u32> = single.iter().copied().chain(layout.graph_sizes.iter().map(|&s| s as u32)).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let max_bs = plan.graph_max_bs.max(cfg.graph_max_bs.try_into().unwrap_or(u32::MAX));
        capture_phase(&self.events, PhaseId::TargetGraphCapture, &sizes, max_bs, gpu, |bs| {
            let captured = (|| {
                // The scheduler's steps first: they size its buffers, and growing those after
                // would move what the single-sequence graphs point into (size 1 is in both
                // lists whenever graphs run, so this happens at the first size).
                if layout.graph_sizes.contains(&(bs as usize)) {
                    scheduler::capture_steps(target, &layout, bs as usize)?;
                }
                if single.contains(&bs) {
                    target.capture_verify(bs as usize, tree && bs > 1)?;
                }
                Ok(())
            })();
            captured.map_err(|e| match e {
                EngineError::Backend(b) => b,
                other => BackendError::Device(other.to_string()),
            })
        })
    }

    /// The `draft-graph-capture` phase: a short greedy generation that runs every draft
    /// step of the launch's tree twice, so each (rows, region) step is recorded and then
    /// captured; steps of more rows than `--cuda-graph-max-bs` stay eager.
    fn capture_draft_graphs(&mut self, max_bs: u32) -> Result<(), Finding> {
        let events = self.events.clone();
        let max_bs = max_bs as usize;
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
            let decoding = Decoding { shape, sampling: None, max_new_tokens, stop: Vec::new(), cancel: self.cancel.clone() };
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
            let decoding = Decoding { shape, sampling: None, max_new_tokens: 2, stop: Vec::new(), cancel: self.cancel.clone() };
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

    fn load_target(&self, plan: &TargetPlan) -> Result<LoadedTarget<B>, EngineError> {
        let dir = &plan.key.dir;
        let tokenizer = Arc::new(TextTokenizer::load_dir(dir)?);
        let ck = Checkpoint::open(dir).map_err(BackendError::from)?;
        // kv-alloc extends the RoPE table to the launch's context.
        let cap = Capacity { rows: PREFILL_CHUNK, logit_rows: MAX_TREE_TOKENS, positions: MAX_TREE_TOKENS };
        // A family that needs x to f32 precision asks for it as it loads (DeepSeek's routers).
        self.backend.set_precise_inputs(false);
        let model = self.load_weights(&ck, PhaseId::TargetLoad, |ld| Ok(TargetModel::load(self.backend.clone(), &plan.model, ld, cap)?))?;
        Ok(LoadedTarget { key: plan.key.clone(), tokenizer, model: Some(model), target: None })
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

    /// The loaded target keeps its KV in what `--kv-cache-dtype` asked (auto: the backend's).
    fn set_kv_dtype(&mut self, asked: Option<KvDtype>) {
        let dtype = asked.unwrap_or(self.backend.kv_dtype());
        let t = self.target.as_mut().expect("target loaded before kv-alloc");
        if let Some(model) = t.model.as_mut().or(t.target.as_mut().map(|t| &mut t.model)) {
            model.set_kv_dtype(dtype);
        }
    }

    /// How many tokens the KV pool holds (`kv_budget`): from the device's memory after the
    /// target loaded, or the CPU's budget; the `memory-budget` finding when one request of
    /// the full context does not fit.
    fn size_kv(&self, spec: &LaunchSpec, plan: &LaunchPlan) -> Result<KvSizing, Finding> {
        let memory = plan.memory.as_ref().expect("sized only once the memory plan resolved");
        let model = self.target.as_ref().and_then(|t| t.model.as_ref().or(t.target.as_ref().map(|t| &t.model)));
        let model = model.expect("target loaded before kv-alloc");
        let drafter = match &plan.drafter {
            DraftPlan::Resolved(d) => Some(d),
            _ => None,
        };
        let tp = self.backend.tp_world();
        let per_token = model.kv_bytes_per_token() + drafter.map_or(0, |d| d.kv_bytes_per_token(tp, self.backend.kv_dtype()));
        let memory_source = match self.backend.device_memory() {
            Some((free, total)) => {
                // A kept drafter is already in `free`; one still to load is not.
                let to_load = drafter.filter(|d| self.drafter.as_ref().is_none_or(|k| k.key != d.key)).map_or(0, |d| d.weight_file_bytes());
                KvMemory::Gpu { total, free, still_to_load: to_load / tp as u64 + kv_budget::GPU_RESERVE_BYTES }
            }
            None => KvMemory::Cpu { budget: (spec.cpu_kv_cache_gib.unwrap_or(kv_budget::DEFAULT_CPU_KV_GIB) * (1u64 << 30) as f64) as u64 },
        };
        let req = KvRequest { per_token, min_tokens: memory.target_slots(), memory: memory_source };
        kv_budget::size(&req, spec)
    }

    /// Allocate the target's KV pool as `sizing` says; one request may reach the context.
    fn alloc_kv(&mut self, memory: &MemoryPlan, sizing: KvSizing, graph_max_bs: u32) -> Result<(), EngineError> {
        let t = self.target.as_mut().expect("target loaded before kv-alloc");
        // The old cache's buffers may go away: no recorded graph may point into them.
        self.backend.graph_reset();
        let mut target = match t.target.take() {
            Some(old) => old.resized(sizing.tokens, memory.tree_slots)?,
            None => Target::new(t.model.take().expect("a loaded target has its model"), sizing.tokens, memory.tree_slots)?,
        };
        target.context = Some(memory.kv_tokens);
        target.model.ensure_positions(memory.target_slots())?;
        if self.backend.uses_graphs() && target.model.graphs_capture() {
            target.graph_rows = graph_max_bs as usize;
        }
        self.events.log(LogLevel::Info, SOURCE, sizing.describe());
        t.target = Some(target);
        Ok(())
    }

    /// The previous drafter, when the plan leaves it valid: its caches sized for the new
    /// launch, and drafter-load shown as skipped. `None` when it must be loaded again.
    fn keep_drafter(
        &self,
        kept: Option<LoadedDrafter<B>>,
        plan: &DrafterPlan,
        memory: &MemoryPlan,
    ) -> Option<Result<LoadedDrafter<B>, EngineError>> {
        let mut kept = kept.filter(|k| k.key == plan.key)?;
        phase(&self.events, PhaseId::DrafterLoad, PhaseState::Skipped, Some("kept resident".into()));
        Some(kept.drafter.resize(memory.drafter_slots, self.shape.topk).map(|()| kept))
    }

    fn load_drafter(&self, plan: &DrafterPlan, memory: &MemoryPlan) -> Result<LoadedDrafter<B>, EngineError> {
        let ck = Checkpoint::open(plan.dir()).map_err(BackendError::from)?;
        let target = self.target.as_ref().and_then(|t| t.target.as_ref()).expect("target ready before the drafter");
        let (kv_slots, topk) = (memory.drafter_slots, self.shape.topk);
        let cap = Capacity { rows: PREFILL_CHUNK, logit_rows: MAX_TREE_TOKENS, positions: kv_slots };
        let drafter: Box<dyn Drafter<B>> = match &plan.key {
            DrafterKey::Eagle3(_, config) => {
                let head = target.model.head()?;
                Box::new(
                    self.load_weights(&ck, PhaseId::DrafterLoad, |ld| Eagle3Drafter::load(config.clone(), ld, &head, cap, kv_slots, topk))?,
                )
            }
            DrafterKey::Standalone(_, config) => {
                let model = self.load_weights(&ck, PhaseId::DrafterLoad, |ld| {
                    TargetModel::load(self.backend.clone(), config, ld, cap).map_err(EngineError::from)
                })?;
                let file = plan.on_disk.file_name();
                Box::new(StandaloneDrafter::new(model, target.model.vocab(), kv_slots, topk, &file)?)
            }
        };
        Ok(LoadedDrafter { key: plan.key.clone(), drafter })
    }

    /// SGLang's draft-worker check, then the target's hidden-state capture for EAGLE-3.
    fn drafter_init(&mut self, spec: &LaunchSpec, plan: &DrafterPlan, memory: &MemoryPlan) -> Result<(), Finding> {
        let events = self.events.clone();
        phase(&events, PhaseId::DrafterInit, PhaseState::Started, None);
        let draft_err = |e: EngineError| fail(&events, PhaseId::DrafterInit, error_finding(Side::Draft, PhaseId::DrafterInit, &e));
        let finding = context::check_against(memory.context.clone(), &plan.on_disk, spec).map_err(|e| draft_err(e.into()))?;
        if let Some(f) = finding {
            if f.is_error() {
                return Err(fail(&events, PhaseId::DrafterInit, f));
            }
            self.events.emit(Event::Finding(f));
            self.events.log(LogLevel::Warning, SOURCE, "drafter positions extended to the target's context length");
        }
        let layers = plan.capture_layers.clone().map_err(|f| fail(&events, PhaseId::DrafterInit, f))?;
        if let Some(l) = &layers {
            self.events.log(LogLevel::Info, SOURCE, format!("EAGLE-3 capture: inputs of target layers {l:?}"));
        }
        let target = self.target.as_mut().and_then(|t| t.target.as_mut()).expect("kv allocated");
        target.model.set_capture(layers).map_err(|e| draft_err(e.into()))?;
        phase(&events, PhaseId::DrafterInit, PhaseState::Done, None);
        Ok(())
    }

    fn run_generation(&mut self, prompt: &[u32], decoding: &Decoding, on_tokens: OnTokens<'_>) -> Result<Generation, EngineError> {
        let t = self.target.as_mut().and_then(|t| t.target.as_mut()).ok_or_else(|| EngineError::Request("no target is loaded".into()))?;
        spec_decode::generate(t, self.drafter.as_mut().map(|d| d.drafter.as_mut() as &mut dyn Drafter<B>), prompt, decoding, on_tokens)
    }

    /// Serve from the launched target (with its KV pool), drafter and tree shape through the
    /// continuous-batching scheduler (`engine::scheduler`): `serve` runs with it, and the
    /// parts come back into this engine afterwards, so that a later relaunch still keeps what
    /// stays valid. An error, before `serve` runs, when no launch is ready or the target
    /// cannot run batched.
    /// The total memory of this engine's GPU; `None` on the CPU.
    pub fn gpu_memory(&self) -> Option<u64> {
        self.backend.device_memory().map(|(_, total)| total)
    }

    pub fn serve_batch(&mut self, cfg: SchedulerConfig, serve: &mut dyn FnMut(&mut dyn Batch)) -> Result<(), EngineError> {
        let not_ready = || EngineError::Request("the engine is not ready: launch it first".into());
        let loaded = self.target.as_mut().filter(|_| self.ready).ok_or_else(not_ready)?;
        let target = loaded.target.take().ok_or_else(not_ready)?;
        let (key, drafter) = self.drafter.take().map(|d| (d.key, d.drafter)).unzip();
        let parts = EngineParts { target, drafter, tokenizer: loaded.tokenizer.clone(), shape: self.shape };
        let (served, parts) = match Scheduler::new(parts, cfg) {
            Ok(mut scheduler) => {
                serve(&mut scheduler);
                let (parts, restored) = scheduler.into_parts();
                (restored, parts)
            }
            Err(failed) => {
                let (e, parts) = *failed;
                (Err(e), parts)
            }
        };
        loaded.target = Some(parts.target);
        self.drafter = key.zip(parts.drafter).map(|(key, drafter)| LoadedDrafter { key, drafter });
        served
    }

    /// The launched target with its KV pool (tests reach into it).
    #[cfg(test)]
    pub(crate) fn target_mut(&mut self) -> Option<&mut Target<B>> {
        self.target.as_mut().and_then(|t| t.target.as_mut())
    }

    /// The launched drafter (tests reach into it).
    #[cfg(test)]
    pub(crate) fn drafter_mut(&mut self) -> Option<&mut dyn Drafter<B>> {
        self.drafter.as_mut().map(|d| d.drafter.as_mut() as &mut dyn Drafter<B>)
    }

    pub fn tokenizer(&self) -> Option<&TextTokenizer> {
        self.target.as_ref().map(|t| &*t.tokenizer)
    }

    /// Decoding settings for a request on the launched engine.
    pub fn decoding(&self, max_new_tokens: usize, sampling: Option<Sampling>) -> Decoding {
        let stop = self.tokenizer().map(|t| t.stop_ids().to_vec()).unwrap_or_default();
        Decoding { shape: self.shape, sampling, max_new_tokens, stop, cancel: self.cancel.clone() }
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

    /// The prompt's token ids as a generation reads them: the chat template applied when
    /// asked, a BOS added otherwise.
    pub fn prompt_ids(&self, req: &GenerateRequest) -> Result<Vec<u32>, EngineError> {
        let tok = self.tokenizer().ok_or_else(|| EngineError::Request("no target is loaded".into()))?;
        let text = if req.chat { tok.chat_prompt(&req.prompt)? } else { req.prompt.clone() };
        Ok(tok.encode(&text, !req.chat)?)
    }

    /// As `generate`; `use_drafter: false` decodes target-only with the drafter left loaded
    /// (a benchmark can then alternate both modes under the same machine load).
    pub fn generate_with(&mut self, req: &GenerateRequest, use_drafter: bool) -> Result<Generation, EngineError> {
        if !self.ready {
            return Err(EngineError::Request("the engine is not ready: launch it first".into()));
        }
        let prompt = self.prompt_ids(req)?;
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
