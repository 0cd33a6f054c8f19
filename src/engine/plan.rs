//! The launch resolved once: both configs read, and everything the phases derive from them
//! and the spec (the context, the KV sizes, the tree shape, the capture layers, the graph
//! sizes) worked out before any phase runs. The phases in `lifecycle` consume the plan
//! instead of reading files; a relaunch resolves a new plan and keeps what the plan's keys
//! say is still valid.
//!
//! A value the plan cannot resolve is the finding of the phase that uses it, and that phase
//! reports it after the phases before it ran, as a launch always has (SGLang's draft worker
//! fails only after the target loaded): resolving up front changes what is read, not what
//! a launch shows.

use std::path::{Path, PathBuf};

use crate::backend::KvDtype;
use crate::engine::context::{self, TargetContext};
use crate::engine::eagle3::Eagle3Config;
use crate::engine::findings::{error_finding, missing_flag, UNSUPPORTED_ALGORITHM};
use crate::engine::graph_sizes::DEFAULT_MAX_BS;
use crate::engine::target_model::TargetConfig;
use crate::engine::tree::TreeShape;
use crate::engine::EngineError;
use crate::finding::{Evidence, Finding, Severity, Side, UNREADABLE_INPUT};
use crate::model::config::ModelConfig;
use crate::model::hub;
use crate::phase::PhaseId;
use crate::spec::{Algorithm, Device, LaunchSpec};

/// Tokens per prefill forward: most prompts take one forward, with one set of launches. On
/// HumanEval prompts this measured as fast as 128 (testdata/gpu/run-10/NOTES.md, ab-2): their
/// prefill time was attention's.
pub const PREFILL_CHUNK: usize = 512;

/// The largest verify tree (`--speculative-num-draft-tokens`): as many rows as the backend
/// sums like decode steps.
pub const MAX_TREE_TOKENS: usize = crate::backend::STEP_QUERIES_MAX;
/// Most draft steps and top-k this engine sizes its buffers for.
pub const MAX_STEPS: usize = 32;
pub const MAX_TOPK: usize = 16;

/// Everything a launch's phases need, resolved from its spec and the two config files.
#[derive(Debug)]
pub struct LaunchPlan {
    pub target: TargetPlan,
    pub algorithm: Algorithm,
    pub shape: TreeShape,
    /// What the tree flags asked for and could not have, each with what is used instead.
    pub shape_warnings: Vec<String>,
    /// The largest step (rows) replayed from a CUDA graph: `--cuda-graph-max-bs`, else the default.
    pub graph_max_bs: u32,
    /// The KV caches kv-alloc and drafter-load size; unresolved when the target's config
    /// gives no usable context (kv-alloc's failure).
    pub memory: Result<MemoryPlan, Finding>,
    /// The target's KV dtype as `--kv-cache-dtype` asks; `None` (auto) is the backend's.
    pub kv_dtype: Option<KvDtype>,
    pub drafter: DraftPlan,
}

/// What identifies a loaded target: a relaunch with the same key keeps the weights.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetKey {
    pub dir: PathBuf,
    pub dtype: Option<String>,
    pub tp: u32,
    /// `--ep-size`: how the routed experts of an MoE target split over the `tp` ranks.
    pub ep: u32,
    pub device: Device,
}

#[derive(Debug)]
pub struct TargetPlan {
    pub key: TargetKey,
    /// `config.json` as read for this launch.
    pub config: ModelConfig,
    pub model: TargetConfig,
}

/// What kv-alloc and drafter-load size the caches for.
#[derive(Debug)]
pub struct MemoryPlan {
    /// The context the target runs at (`--context-length`, else its derived length), with the
    /// evidence drafter-init's context check cites.
    pub context: TargetContext,
    /// Committed tokens one request may reach: the context. The KV pool kv-alloc sizes
    /// (`engine::kv_budget`) holds at least this many plus `tree_slots`.
    pub kv_tokens: usize,
    /// KV slots past the committed tokens for one verify step: the draft tree, or the one
    /// decoded token without a drafter.
    pub tree_slots: usize,
    /// KV slots of the drafter: the committed sequence, the root and the draft tree.
    pub drafter_slots: usize,
}

impl MemoryPlan {
    pub fn target_slots(&self) -> usize {
        self.kv_tokens + self.tree_slots
    }
}

/// The drafter side of the plan, in the ways drafter-load can end before it loads weights.
#[derive(Debug)]
pub enum DraftPlan {
    /// `--speculative-algorithm NONE`: target-only decoding.
    None,
    /// The spec rules the drafter out (an algorithm this engine does not run, no drafter
    /// folder): drafter-load fails without starting.
    Refused(Finding),
    /// The drafter's config cannot be read or used: drafter-load fails reading it.
    Unreadable(Finding),
    Resolved(Box<DrafterPlan>),
}

/// What identifies a loaded drafter: a relaunch beside the same resident target with the
/// same folder and the same effective configuration keeps its weights, and only sizes its
/// caches for the new launch (a context clamp, a new tree shape).
#[derive(Clone, Debug, PartialEq)]
pub enum DrafterKey {
    Eagle3(PathBuf, Eagle3Config),
    Standalone(PathBuf, TargetConfig),
}

#[derive(Debug)]
pub struct DrafterPlan {
    pub key: DrafterKey,
    /// `config.json` as on disk: its trained length is what drafter-init's context check
    /// compares, even when a remedy extends the positions in memory.
    pub on_disk: ModelConfig,
    /// The target layers whose inputs EAGLE-3 captures (`None` for STANDALONE); unresolved
    /// when they do not fit the target (drafter-init's failure).
    pub capture_layers: Result<Option<Vec<usize>>, Finding>,
}

impl LaunchPlan {
    /// Resolve `spec`. Fails only where nothing else can be resolved: no target folder (a
    /// preflight finding) or a target config the model cannot be built from (target-load's).
    pub fn resolve(spec: &LaunchSpec) -> Result<LaunchPlan, Finding> {
        let given = spec.model_path.as_deref().ok_or_else(|| missing_flag("--model-path", "target model folder"))?;
        let dir = local_folder("--model-path", given, spec.revision.as_deref())?;
        let kv_dtype = KvDtype::from_flag(spec.kv_cache_dtype.as_deref()).map_err(|message| {
            let value = serde_json::Value::from(spec.kv_cache_dtype.clone());
            Finding::new(UNREADABLE_INPUT, Severity::Error, PhaseId::Preflight, message).with_evidence(Evidence::new(
                Side::Launch,
                "--kv-cache-dtype",
                "--kv-cache-dtype",
                value,
            ))
        })?;
        let key = TargetKey { dir, dtype: spec.dtype.clone(), tp: spec.tp(), ep: spec.ep(), device: spec.device };
        let target = TargetPlan::read(key).map_err(|e| error_finding(Side::Target, PhaseId::TargetLoad, &e))?;
        let (shape, shape_warnings) = tree_shape(spec);
        let algorithm = spec.speculative_algorithm.unwrap_or(Algorithm::None);
        let tree_slots = if algorithm == Algorithm::None { 1 } else { shape.draft_tokens };
        let memory = context::target_context(&target.config, spec)
            .map(|context| {
                let kv_tokens = context.length as usize;
                MemoryPlan { context, kv_tokens, tree_slots, drafter_slots: kv_tokens + 1 + shape.draft_slots() }
            })
            .map_err(|e| error_finding(Side::Target, PhaseId::KvAlloc, &e.into()));
        let drafter = DraftPlan::resolve(spec, algorithm, target.model.layers());
        Ok(LaunchPlan {
            target,
            algorithm,
            shape,
            shape_warnings,
            graph_max_bs: spec.cuda_graph_max_bs.unwrap_or(DEFAULT_MAX_BS),
            memory,
            kv_dtype,
            drafter,
        })
    }
}

/// The folder a model flag names, a Hugging Face repo id resolved in the local cache as
/// preflight resolves it; a repo that is not there is an unreadable-input finding.
fn local_folder(flag: &str, given: &str, revision: Option<&str>) -> Result<PathBuf, Finding> {
    hub::local_folder(given, revision).map(|(dir, _)| dir).map_err(|e| {
        Finding::new(UNREADABLE_INPUT, Severity::Error, PhaseId::Preflight, e.to_string()).with_evidence(Evidence::new(
            Side::Launch,
            "launch flags",
            flag,
            given,
        ))
    })
}

impl TargetPlan {
    fn read(key: TargetKey) -> Result<TargetPlan, EngineError> {
        let config = ModelConfig::load_dir(&key.dir)?;
        let mut model = TargetConfig::from_config(&config)?;
        if let TargetConfig::Deepseek(c) = &mut model {
            c.ep_size = key.ep as usize;
        }
        Ok(TargetPlan { key, config, model })
    }
}

impl DraftPlan {
    fn resolve(spec: &LaunchSpec, algorithm: Algorithm, target_layers: usize) -> DraftPlan {
        let dir = match algorithm {
            Algorithm::None => return DraftPlan::None,
            Algorithm::Eagle => {
                let f = Finding::new(
                    UNSUPPORTED_ALGORITHM,
                    Severity::Error,
                    PhaseId::DrafterLoad,
                    "This engine drafts with EAGLE-3 (fc over three target hidden states) or a STANDALONE model; an EAGLE (1/2) drafter reads one top-layer feature and has another checkpoint layout. Launch with --speculative-algorithm EAGLE3 or STANDALONE.",
                )
                .with_evidence(Evidence::new(Side::Launch, "launch flags", "--speculative-algorithm", "EAGLE"));
                return DraftPlan::Refused(f);
            }
            Algorithm::Eagle3 | Algorithm::Standalone => match spec.draft_model_path.as_deref() {
                Some(d) => match local_folder("--speculative-draft-model-path", d, spec.draft_revision.as_deref()) {
                    Ok(dir) => dir,
                    Err(f) => return DraftPlan::Refused(f),
                },
                None => return DraftPlan::Refused(missing_flag("--speculative-draft-model-path", "drafter folder")),
            },
        };
        match DrafterPlan::read(&dir, spec, algorithm, target_layers) {
            Ok(plan) => DraftPlan::Resolved(Box::new(plan)),
            Err(e) => DraftPlan::Unreadable(error_finding(Side::Draft, PhaseId::DrafterLoad, &e)),
        }
    }
}

impl DrafterPlan {
    fn read(dir: &Path, spec: &LaunchSpec, algorithm: Algorithm, target_layers: usize) -> Result<DrafterPlan, EngineError> {
        let on_disk = ModelConfig::load_dir(dir)?;
        let effective = on_disk.with_overrides(&spec.draft_overrides);
        let (key, capture_layers) = match algorithm {
            Algorithm::Eagle3 => {
                let config = Eagle3Config::from_config(&effective)?;
                let layers =
                    config.capture_layers(target_layers).map(Some).map_err(|e| error_finding(Side::Draft, PhaseId::DrafterInit, &e));
                (DrafterKey::Eagle3(dir.to_path_buf(), config), layers)
            }
            _ => (DrafterKey::Standalone(dir.to_path_buf(), TargetConfig::from_config(&effective)?), Ok(None)),
        };
        Ok(DrafterPlan { key, on_disk, capture_layers })
    }

    /// Bytes of KV one token takes in the drafter's cache on each of `tp` ranks (as
    /// `kv::KvCache` holds them, in `dtype`).
    pub fn kv_bytes_per_token(&self, tp: usize, dtype: KvDtype) -> u64 {
        match &self.key {
            DrafterKey::Eagle3(_, c) => crate::engine::kv::bytes_per_token(1, c.kv_heads.div_ceil(tp.max(1)) * c.head_dim, dtype),
            DrafterKey::Standalone(_, c) => c.kv_bytes_per_token(tp, dtype),
        }
    }

    /// The drafter's weights as the files hold them: what a GPU must still fit beside the
    /// KV pool when kv-alloc sizes it, before the drafter loads.
    pub fn weight_file_bytes(&self) -> u64 {
        let Ok(entries) = std::fs::read_dir(self.dir()) else { return 0 };
        entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    }

    /// The drafter's folder.
    pub fn dir(&self) -> &Path {
        match &self.key {
            DrafterKey::Eagle3(dir, _) | DrafterKey::Standalone(dir, _) => dir,
        }
    }
}

/// The tree shape a spec asks for, SGLang's defaults filled in (S=3, K=1, N=S+1 for a chain),
/// and a warning for each value outside what the engine sizes for.
pub fn tree_shape(spec: &LaunchSpec) -> (TreeShape, Vec<String>) {
    let mut warnings = Vec::new();
    let mut clamp = |flag: &str, asked: Option<u32>, default: usize, most: usize| {
        let v = asked.map_or(default, |v| v as usize);
        let used = v.clamp(1, most);
        if used != v {
            warnings.push(format!("{flag} {v} is outside 1..={most}; using {used}"));
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
        warnings.push(format!("--speculative-num-draft-tokens {n} does not fit steps {steps} × topk {topk}; using {draft_tokens}"));
    }
    (TreeShape { steps, topk, draft_tokens }, warnings)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::engine::llama::Family;
    use crate::finding::UNREADABLE_INPUT;
    use crate::testkit::{TinyEagle3, TinyLlama};

    /// A target folder and an EAGLE-3 drafter folder beside it: config.json files only,
    /// which is all a plan reads.
    struct Pair {
        dir: tempfile::TempDir,
        target: TinyLlama,
    }

    impl Pair {
        fn new(draft: &TinyEagle3) -> Pair {
            let pair = Pair { dir: tempfile::tempdir().unwrap(), target: TinyLlama::new(Family::Llama, 1) };
            pair.write("target", &pair.target.config());
            pair.write("draft", &draft.config(&pair.target));
            pair
        }

        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        fn write(&self, name: &str, config: &Value) -> String {
            std::fs::create_dir_all(self.path(name)).unwrap();
            let file = self.path(name).join("config.json");
            std::fs::write(&file, config.to_string()).unwrap();
            file.display().to_string()
        }

        fn spec(&self, algorithm: Algorithm) -> LaunchSpec {
            LaunchSpec {
                model_path: Some(self.path("target").display().to_string()),
                draft_model_path: Some(self.path("draft").display().to_string()),
                speculative_algorithm: Some(algorithm),
                ..LaunchSpec::default()
            }
        }
    }

    fn resolved(spec: &LaunchSpec) -> LaunchPlan {
        LaunchPlan::resolve(spec).unwrap_or_else(|f| panic!("{f:?}"))
    }

    fn drafter(plan: &LaunchPlan) -> &DrafterPlan {
        match &plan.drafter {
            DraftPlan::Resolved(d) => d,
            other => panic!("{other:?}"),
        }
    }

    fn unusable(file: &str, key: &str, message: String, phase: PhaseId, side: Side) -> Finding {
        Finding::new(UNREADABLE_INPUT, Severity::Error, phase, message).with_evidence(Evidence::new(side, file, key, Value::Null))
    }

    /// The context is the target's derived length, or `--context-length` (the launch's
    /// evidence then); the KV caches hold it, plus the tree, on every backend.
    #[test]
    fn the_context_and_the_kv_sizes_are_derived_once_from_the_target() {
        let pair = Pair::new(&TinyEagle3::new(2));
        let plan = resolved(&pair.spec(Algorithm::Eagle3));
        let memory = plan.memory.as_ref().unwrap();
        let file = pair.path("target").join("config.json").display().to_string();
        assert_eq!(memory.context.length, 512);
        assert_eq!(memory.context.evidence, Evidence::new(Side::Target, file, "/max_position_embeddings", 512));
        // Chain S=3: 4 draft tokens a verify step; the drafter's tree takes S-1 = 2 slots.
        assert_eq!((memory.kv_tokens, memory.tree_slots, memory.target_slots(), memory.drafter_slots), (512, 4, 516, 515));

        let long = LaunchSpec { context_length: Some(8192), ..pair.spec(Algorithm::Eagle3) };
        let memory = resolved(&long).memory.unwrap();
        assert_eq!(memory.context.length, 8192);
        assert_eq!(memory.context.evidence, Evidence::new(Side::Launch, "launch flags", "--context-length", 8192));
        assert_eq!((memory.kv_tokens, memory.drafter_slots), (8192, 8192 + 3));

        let alone = resolved(&pair.spec(Algorithm::None));
        assert!(matches!(alone.drafter, DraftPlan::None));
        assert_eq!(alone.memory.unwrap().tree_slots, 1);
    }

    #[test]
    fn the_tree_shape_fills_in_sglangs_defaults_and_clamps_what_does_not_fit() {
        let spec = |steps, topk, draft_tokens| LaunchSpec {
            speculative_num_steps: steps,
            speculative_eagle_topk: topk,
            speculative_num_draft_tokens: draft_tokens,
            ..LaunchSpec::default()
        };
        let shape = |steps, topk, draft_tokens| TreeShape { steps, topk, draft_tokens };
        assert_eq!(tree_shape(&spec(None, None, None)), (shape(3, 1, 4), vec![]));
        // A chain has S + 1 draft tokens whatever N asks.
        assert_eq!(
            tree_shape(&spec(Some(5), Some(1), Some(4))),
            (shape(5, 1, 6), vec!["--speculative-num-draft-tokens 4 does not fit steps 5 × topk 1; using 6".to_string()])
        );
        // A tree: N defaults to S·K + 1, and at most every candidate and the root.
        assert_eq!(tree_shape(&spec(Some(3), Some(2), None)), (shape(3, 2, 7), vec![]));
        assert_eq!(
            tree_shape(&spec(Some(3), Some(2), Some(100))),
            (shape(3, 2, 11), vec!["--speculative-num-draft-tokens 100 does not fit steps 3 × topk 2; using 11".to_string()])
        );
        let (clamped, warnings) = tree_shape(&spec(Some(40), Some(0), None));
        assert_eq!(clamped, shape(MAX_STEPS, 1, MAX_STEPS + 1));
        assert_eq!(
            warnings,
            ["--speculative-num-steps 40 is outside 1..=32; using 32", "--speculative-eagle-topk 0 is outside 1..=16; using 1"]
        );
        // The widest tree is as many rows as a step takes.
        assert_eq!(tree_shape(&spec(Some(8), Some(8), Some(64))).0, shape(8, 8, MAX_TREE_TOKENS));
    }

    /// The drafter's config is read once, with the launch's overrides in its key and as on
    /// disk for the context check; EAGLE-3's capture layers are resolved against the target.
    #[test]
    fn the_drafter_is_resolved_with_its_key_and_capture_layers() {
        let pair = Pair::new(&TinyEagle3::new(2));
        let mut spec = pair.spec(Algorithm::Eagle3);
        spec.draft_overrides.insert("/rope_theta".into(), json!(500000.0));
        let plan = resolved(&spec);
        let d = drafter(&plan);
        assert_eq!(d.dir(), pair.path("draft"));
        assert_eq!(d.on_disk.at("/rope_theta"), None);
        let DrafterKey::Eagle3(dir, config) = &d.key else { panic!("{:?}", d.key) };
        assert_eq!((dir.as_path(), config.rope.theta), (pair.path("draft").as_path(), 500000.0));
        // SGLang's default for the 8-layer target: inputs of layers 2, L/2 and L-3.
        assert_eq!(d.capture_layers, Ok(Some(vec![2, 4, 5])));
        // The same spec resolves to the same key: a relaunch keeps the drafter.
        assert_eq!(drafter(&resolved(&spec)).key, d.key);

        let standalone = resolved(&pair.spec(Algorithm::Standalone));
        assert!(matches!(drafter(&standalone).key, DrafterKey::Standalone(..)));
        assert_eq!(drafter(&standalone).capture_layers, Ok(None));
    }

    /// What cannot be resolved is the finding the phase that uses it has always reported.
    #[test]
    fn what_cannot_be_resolved_is_the_finding_of_the_phase_that_uses_it() {
        let pair = Pair::new(&TinyEagle3::new(2));

        let no_target = LaunchSpec { model_path: None, ..pair.spec(Algorithm::None) };
        let f = LaunchPlan::resolve(&no_target).unwrap_err();
        assert_eq!((f.id.as_str(), f.phase, f.evidence[0].key.as_str()), (UNREADABLE_INPUT, PhaseId::Preflight, "--model-path"));

        let mut config = pair.target.config();
        config.as_object_mut().unwrap().remove("num_hidden_layers");
        let file = pair.write("target", &config);
        let f = LaunchPlan::resolve(&pair.spec(Algorithm::None)).unwrap_err();
        let message = format!("{file}: /num_hidden_layers is missing");
        assert_eq!(f, unusable(&file, "/num_hidden_layers", message, PhaseId::TargetLoad, Side::Target));

        config["num_hidden_layers"] = json!(8);
        config["max_sequence_length"] = json!("long");
        pair.write("target", &config);
        let f = resolved(&pair.spec(Algorithm::None)).memory.unwrap_err();
        let message = format!("{file}: /max_sequence_length = \"long\" is not a non-negative integer");
        let mut want = unusable(&file, "/max_sequence_length", message, PhaseId::KvAlloc, Side::Target);
        // The evidence cites the value as the file has it.
        want.evidence[0].value = json!("long");
        assert_eq!(f, want);
        pair.write("target", &pair.target.config());

        let refused = |spec: &LaunchSpec| match resolved(spec).drafter {
            DraftPlan::Refused(f) => (f.id, f.phase),
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(&pair.spec(Algorithm::Eagle)), (UNSUPPORTED_ALGORITHM.to_string(), PhaseId::DrafterLoad));
        let no_drafter = LaunchSpec { draft_model_path: None, ..pair.spec(Algorithm::Eagle3) };
        assert_eq!(refused(&no_drafter), (UNREADABLE_INPUT.to_string(), PhaseId::Preflight));

        let unreadable = |spec: &LaunchSpec| match resolved(spec).drafter {
            DraftPlan::Unreadable(f) => f,
            other => panic!("{other:?}"),
        };
        let mut draft = TinyEagle3::new(2).config(&pair.target);
        draft.as_object_mut().unwrap().remove("hidden_size");
        let file = pair.write("draft", &draft);
        let message = format!("{file}: /hidden_size is missing");
        assert_eq!(unreadable(&pair.spec(Algorithm::Eagle3)), unusable(&file, "/hidden_size", message, PhaseId::DrafterLoad, Side::Draft));
        std::fs::remove_file(&file).unwrap();
        let f = unreadable(&pair.spec(Algorithm::Standalone));
        assert!(f.message.starts_with(&format!("{file}: cannot read: ")), "{}", f.message);
        assert_eq!(
            (f.id.as_str(), f.phase, f.evidence[0].side, f.evidence[0].key.as_str()),
            (UNREADABLE_INPUT, PhaseId::DrafterLoad, Side::Draft, "")
        );

        let past = Pair::new(&TinyEagle3 { aux_layer_ids: Some(vec![1, 4, 7]), ..TinyEagle3::new(2) });
        let file = past.path("draft").join("config.json").display().to_string();
        let message = format!(
            "{file}: /eagle_config/eagle_aux_hidden_state_layer_ids: capture layers [2, 5, 8] ([1, 4, 7] + 1) must be 3 distinct inputs of target layers 1..=7"
        );
        let key = "/eagle_config/eagle_aux_hidden_state_layer_ids";
        assert_eq!(
            drafter(&resolved(&past.spec(Algorithm::Eagle3))).capture_layers,
            Err(unusable(&file, key, message, PhaseId::DrafterInit, Side::Draft))
        );
    }
}
