//! Preflight: rules over config.json files, safetensors headers and tokenizer files, one
//! file per concern. Never reads tensor data, never writes the user's files.
//!
//! `check_spec` is the one entry point for `check`, the engine's preflight phase and the
//! console. Each rule sees a `RuleContext` (the spec, the loaded inputs, the GPU inventory,
//! the algorithm the launch runs and what kind of drafter it has) and returns findings; a
//! rule that meets a value it cannot read returns the error, which becomes
//! `unreadable-input`.

pub(crate) mod algorithm;
pub(crate) mod apply;
pub(crate) mod architecture;
pub(crate) mod aux_layers;
pub(crate) mod capture;
pub(crate) mod data_parallel;
pub(crate) mod divisors;
pub(crate) mod draft_layers;
pub(crate) mod draft_vocab;
pub(crate) mod dtype;
pub(crate) mod env_typo;
pub(crate) mod expert_parallel;
#[cfg(test)]
mod fixture;
pub mod gpu;
pub(crate) mod inputs;
pub(crate) mod memory;
pub(crate) mod mla_backend;
pub(crate) mod paging;
pub(crate) mod parallel;
pub(crate) mod quantization;
pub(crate) mod render;
pub(crate) mod report;
pub(crate) mod rope;
pub(crate) mod shapes;
pub(crate) mod sizes;
pub(crate) mod spec_args;
pub(crate) mod tokenizer;
pub(crate) mod tokenizer_files;
pub(crate) mod unreadable;
pub(crate) mod vocab;

use serde_json::Value;

use crate::engine::context;
use crate::finding::{Evidence, Finding, Side};
use crate::model::config::Field;
use crate::spec::{Algorithm, LaunchSpec};
use architecture::DraftKind;
use gpu::GpuInventory;
use inputs::{Draft, InputError, Inputs, ModelFiles};

/// Flags of `FLAGS` that the spec holds but no rule reads yet: echoed as not checked.
const UNREAD_FLAGS: &[&str] = &["--served-model-name", "--max-total-tokens"];

/// The launch's flags that no rule checks, as (flag, value): every flag specdeck does not
/// read, and those it holds but no rule reads. Shown so a pasted flag is never dropped
/// without a word.
pub fn not_checked(spec: &LaunchSpec) -> Vec<(String, Option<String>)> {
    let unread = spec.flags().into_iter().filter(|(f, _)| UNREAD_FLAGS.contains(f)).map(|(f, v)| (f.to_string(), Some(v)));
    unread.chain(spec.extra_flags.iter().cloned()).collect()
}

/// All rules, with this machine's GPU inventory (NVML when present).
pub fn check_spec(spec: &LaunchSpec) -> Vec<Finding> {
    check_with_gpus(spec, &gpu::inventory(spec))
}

/// All rules against a given GPU inventory (tests and tools that plan for another machine).
pub fn check_with_gpus(spec: &LaunchSpec, gpus: &GpuInventory) -> Vec<Finding> {
    let mut findings = env_typo::check(spec);
    match Inputs::load(spec) {
        Err(errors) => findings.extend(errors.iter().map(|(side, e)| unreadable::finding(*side, e))),
        Ok(inputs) => match RuleContext::new(spec, &inputs, gpus) {
            Err(e) => findings.push(unreadable::finding(inputs.side_of(&e.subject()), &e)),
            Ok(ctx) => {
                for rule in RULES {
                    match rule(&ctx) {
                        Ok(found) => findings.extend(found),
                        // Several rules can trip on the same bad value: report it once.
                        Err(e) => {
                            let f = unreadable::finding(inputs.side_of(&e.subject()), &e);
                            if !findings.contains(&f) {
                                findings.push(f);
                            }
                        }
                    }
                }
            }
        },
    }
    // Errors first, unreadable input first among them (it decides exit 2); within a
    // severity, rule order (stable sort).
    findings.sort_by_key(|f| (std::cmp::Reverse(f.severity), f.id != unreadable::ID));
    findings
}

pub type RuleResult = Result<Vec<Finding>, InputError>;

/// Every rule, in the order findings are listed within a severity.
const RULES: &[fn(&RuleContext) -> RuleResult] = &[
    context_rule,
    sizes::check,
    algorithm::check,
    architecture::check,
    draft_layers::check,
    capture::check,
    shapes::check,
    aux_layers::check,
    vocab::check,
    draft_vocab::check,
    tokenizer::check,
    spec_args::check,
    paging::check,
    mla_backend::check,
    parallel::check,
    expert_parallel::check,
    data_parallel::check,
    memory::check,
    dtype::check,
    quantization::check,
    rope::check,
];

/// `context-length-exceeds-draft`, against the drafter's trained length as on disk.
fn context_rule(ctx: &RuleContext) -> RuleResult {
    let Some(draft) = ctx.draft else { return Ok(Vec::new()) };
    Ok(context::check(&ctx.target.config, &draft.files.config, ctx.spec)?.into_iter().collect())
}

/// What every rule can see.
pub struct RuleContext<'a> {
    pub spec: &'a LaunchSpec,
    pub target: &'a ModelFiles,
    pub draft: Option<&'a Draft>,
    pub gpus: &'a GpuInventory,
    /// What the drafter is, judged from its files (None without a drafter).
    pub draft_kind: Option<DraftKind>,
    /// The algorithm the rules assume: the flag when given (and not NONE), else the one the
    /// drafter implies (`algorithm-mismatch` says when it was inferred).
    pub algorithm: Algorithm,
}

impl<'a> RuleContext<'a> {
    pub fn new(spec: &'a LaunchSpec, inputs: &'a Inputs, gpus: &'a GpuInventory) -> Result<Self, InputError> {
        let draft = inputs.draft.as_ref();
        let draft_kind = match draft {
            Some(d) => Some(DraftKind::detect(d)?),
            None => None,
        };
        let algorithm = match (spec.speculative_algorithm, &draft_kind) {
            (Some(a), _) if a != Algorithm::None => a,
            (_, Some(kind)) => kind.family.algorithm(),
            (given, None) => given.unwrap_or(Algorithm::None),
        };
        Ok(RuleContext { spec, target: &inputs.target, draft, gpus, draft_kind, algorithm })
    }

    /// The drafter, when the launch speculates with it (it then loads beside the target).
    pub fn running_draft(&self) -> Option<&'a Draft> {
        self.draft.filter(|_| self.algorithm != Algorithm::None)
    }

    /// The drafter, when the launch runs EAGLE-3 (the rules specific to its format).
    pub fn eagle3_draft(&self) -> Option<&'a Draft> {
        self.draft.filter(|_| self.algorithm == Algorithm::Eagle3)
    }

    /// The drafter, when the launch runs EAGLE or EAGLE-3 (it consumes target hidden states).
    pub fn eagle_draft(&self) -> Option<&'a Draft> {
        self.draft.filter(|_| matches!(self.algorithm, Algorithm::Eagle3 | Algorithm::Eagle))
    }

    /// Evidence from the target's config.json.
    pub fn target_evidence(&self, pointer: &str, value: impl Into<Value>) -> Evidence {
        Evidence::new(Side::Target, self.target.config.file_name(), pointer, value)
    }

    /// Evidence from the drafter's config; an in-memory override says so in `file`.
    pub fn draft_evidence(&self, pointer: &str, value: impl Into<Value>) -> Evidence {
        let file = self.draft.map(|d| d.files.config.file_name()).unwrap_or_default();
        let file = if self.spec.draft_overrides.contains_key(pointer) { format!("{file} (overridden in memory)") } else { file };
        Evidence::new(Side::Draft, file, pointer, value)
    }

    /// Evidence for a config field of either side.
    pub fn field_evidence<T: Clone + Into<Value>>(&self, side: Side, field: &Field<T>) -> Evidence {
        match side {
            Side::Draft => self.draft_evidence(&field.pointer, field.value.clone()),
            _ => self.target_evidence(&field.pointer, field.value.clone()),
        }
    }

    /// Evidence for a launch flag or env var.
    pub fn launch_evidence(&self, key: &str, value: impl Into<Value>) -> Evidence {
        let file = if key.starts_with("--") { "launch flags" } else { "environment" };
        Evidence::new(Side::Launch, file, key, value)
    }
}
