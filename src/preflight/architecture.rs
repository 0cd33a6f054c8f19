//! What the drafter is (EAGLE-3, EAGLE, or an ordinary model for STANDALONE), and
//! `draft-architecture`: its class is not a known EAGLE-3 or EAGLE drafter class.
//!
//! SGLang has no architecture mapping: `architectures[0]` of the drafter's config.json picks
//! the class (failure_catalogue §1.4-D). A drafter published under its training class
//! (`LlamaForCausalLM`, as the yuhuili EAGLE-3 configs are) is loaded as an ordinary model.

use serde_json::{json, Value};

use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::phase::PhaseId;
use crate::preflight::inputs::{Draft, InputError};
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::{Algorithm, SpecChange};

pub const ID: &str = "draft-architecture";
pub const SET_ARCHITECTURE: &str = "set-draft-architecture";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DraftFamily {
    /// fc over three captured target hidden states (EAGLE-3).
    Eagle3,
    /// EAGLE-1/2: one target hidden state, no aux capture.
    Eagle,
    /// An ordinary language model, drafting on its own (STANDALONE).
    Model,
}

impl DraftFamily {
    /// The `--speculative-algorithm` this kind of drafter needs.
    pub fn algorithm(self) -> Algorithm {
        match self {
            DraftFamily::Eagle3 => Algorithm::Eagle3,
            DraftFamily::Eagle => Algorithm::Eagle,
            DraftFamily::Model => Algorithm::Standalone,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            DraftFamily::Eagle3 => "an EAGLE-3 drafter",
            DraftFamily::Eagle => "an EAGLE (1/2) drafter",
            DraftFamily::Model => "an ordinary language model (a STANDALONE draft)",
        }
    }

    /// The class SGLang loads this kind of Llama-style drafter with.
    fn sglang_class(self) -> Option<&'static str> {
        match self {
            DraftFamily::Eagle3 => Some("LlamaForCausalLMEagle3"),
            DraftFamily::Eagle => Some("LlamaForCausalLMEagle"),
            DraftFamily::Model => None,
        }
    }
}

/// A drafter class specdeck knows by name.
struct DrafterClass {
    name: &'static str,
    family: DraftFamily,
    /// Why a launch cannot use it; None when it is runnable.
    problem: Option<&'static str>,
    /// The runnable class with the same layout, when there is one.
    same_layout_as: Option<&'static str>,
}

const DRAFTER_CLASSES: &[DrafterClass] = &[
    DrafterClass { name: "LlamaForCausalLMEagle3", family: DraftFamily::Eagle3, problem: None, same_layout_as: None },
    DrafterClass { name: "LlamaForCausalLMEagle", family: DraftFamily::Eagle, problem: None, same_layout_as: None },
    DrafterClass { name: "Qwen2ForCausalLMEagle", family: DraftFamily::Eagle, problem: None, same_layout_as: None },
    DrafterClass { name: "MistralForCausalLMEagle", family: DraftFamily::Eagle, problem: None, same_layout_as: None },
    DrafterClass {
        name: "Eagle3DeepseekV2ForCausalLM",
        family: DraftFamily::Eagle3,
        problem: Some(
            "an MLA drafter: SGLang 0.5.23 has this class (kimi_k25_eagle3.py), but specdeck's rules and engine \
             cover the Llama-style EAGLE-3 drafter only (one GQA decoder layer over 2×hidden)",
        ),
        same_layout_as: None,
    },
    DrafterClass {
        name: "Eagle3Speculator",
        family: DraftFamily::Eagle3,
        problem: Some(
            "vLLM's speculators format (transformer_layer_config + speculators_config): SGLang has no loader for it \
             (sglang#18216)",
        ),
        same_layout_as: None,
    },
    DrafterClass {
        name: "Eagle3LlamaForCausalLM",
        family: DraftFamily::Eagle3,
        problem: Some("vLLM's name for the Llama-style EAGLE-3 drafter: SGLang does not register it"),
        same_layout_as: Some("LlamaForCausalLMEagle3"),
    },
];

fn known_class(name: &str) -> Option<&'static DrafterClass> {
    DRAFTER_CLASSES.iter().find(|c| c.name == name)
}

/// What the drafter is, with the fact that decided it.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftKind {
    pub family: DraftFamily,
    pub evidence: Evidence,
}

impl DraftKind {
    /// Judge the drafter from its class, its config keys and its `fc.weight` header.
    /// Order matters: a known class decides; then the weights; then EAGLE-only config keys.
    pub fn detect(draft: &Draft) -> Result<DraftKind, InputError> {
        let cfg = &draft.effective;
        let file = cfg.file_name();
        let ev = |key: &str, value: Value| Evidence::new(Side::Draft, file.clone(), key, value);
        let class = cfg.architecture();
        if let Some(c) = class.as_ref().and_then(|a| known_class(&a.value)) {
            return Ok(DraftKind { family: c.family, evidence: ev("/architectures/0", json!(c.name)) });
        }
        for pointer in ["/eagle_config/use_aux_hidden_state", "/use_aux_hidden_state"] {
            if cfg.at(pointer).and_then(Value::as_bool) == Some(false) {
                return Ok(DraftKind { family: DraftFamily::Eagle, evidence: ev(pointer, json!(false)) });
            }
        }
        if let Some(fc) = draft.files.tensor("fc.weight") {
            // EAGLE-1/2 fuse [embedding; hidden] (2×H); EAGLE-3 fuses three target hidden states.
            let width = fc.shape.get(1).map(|w| *w as u64);
            let doubled_hidden = cfg.hidden_size()?.and_then(|h| h.value.checked_mul(2));
            let family = if width.is_some() && width == doubled_hidden { DraftFamily::Eagle } else { DraftFamily::Eagle3 };
            return Ok(DraftKind { family, evidence: Evidence::new(Side::Draft, fc.file, "fc.weight", json!(fc.shape)) });
        }
        for pointer in ["/eagle_config", "/draft_vocab_size", "/target_hidden_size"] {
            if let Some(v) = cfg.at(pointer) {
                return Ok(DraftKind { family: DraftFamily::Eagle3, evidence: ev(pointer, v.clone()) });
            }
        }
        let name = class.map(|c| c.value).unwrap_or_default();
        let family = if name.starts_with("Eagle3") || name.ends_with("Eagle3") {
            DraftFamily::Eagle3
        } else if name.starts_with("Eagle") || name.ends_with("Eagle") {
            DraftFamily::Eagle
        } else {
            DraftFamily::Model
        };
        let value = if name.is_empty() { Value::Null } else { json!(name) };
        Ok(DraftKind { family, evidence: ev("/architectures/0", value) })
    }
}

/// `draft-architecture`, for EAGLE and EAGLE-3 launches.
pub fn check(ctx: &RuleContext) -> RuleResult {
    let (Some(draft), Some(kind)) = (ctx.eagle_draft(), &ctx.draft_kind) else { return Ok(Vec::new()) };
    if kind.family == DraftFamily::Model {
        return Ok(Vec::new()); // algorithm-mismatch says what this drafter is
    }
    let cfg = &draft.effective;
    let class = cfg.architecture();
    let mut findings = Vec::new();
    match class.as_ref().map(|c| (c, known_class(&c.value))) {
        Some((_, Some(DrafterClass { problem: None, .. }))) => {}
        Some((c, Some(known))) => {
            let problem = known.problem.unwrap_or_default();
            let mut f = finding(format!("The drafter's class {} is {problem}.", c.value)).with_evidence(ctx.field_evidence(Side::Draft, c));
            if let Some(runnable) = known.same_layout_as {
                f = f.with_remedy(rename_remedy(runnable, None));
            }
            findings.push(f);
        }
        Some((c, None)) => {
            let wanted = kind.family.sglang_class().unwrap_or("LlamaForCausalLMEagle3");
            let model_type = cfg.model_type().filter(|t| t.value != "llama");
            let mut f = finding(format!(
                "The drafter's class {} is not an EAGLE-3 or EAGLE drafter class, though its files make it {} ({} = {}). \
                 SGLang has no architecture mapping: it would load {} as an ordinary model and fail on its weight names \
                 or its missing hot_token_id / set_embed (SGLang loads this layout as {wanted}).",
                c.value,
                kind.family.describe(),
                kind.evidence.key,
                kind.evidence.value,
                c.value,
            ))
            .with_evidence(ctx.field_evidence(Side::Draft, c))
            .with_evidence(kind.evidence.clone());
            if let Some(t) = &model_type {
                f = f.with_evidence(ctx.field_evidence(Side::Draft, t));
            }
            findings.push(f.with_remedy(rename_remedy(wanted, model_type.map(|t| t.pointer))));
        }
        None => {
            let wanted = kind.family.sglang_class().unwrap_or("LlamaForCausalLMEagle3");
            findings.push(
                finding(format!(
                    "The drafter's config.json has no architectures list, so SGLang cannot pick a class for {}.",
                    kind.family.describe()
                ))
                .with_evidence(ctx.draft_evidence("/architectures", Value::Null))
                .with_remedy(rename_remedy(wanted, None)),
            );
        }
    }
    if let Some(fc_norm) = cfg.bool("fc_norm").filter(|f| f.value) {
        findings.push(
            finding(
                "The drafter is an EAGLE3.1 export (fc_norm: three per-chunk RMSNorms before fc). SGLang's \
                 llama_eagle3.py does not know fc_norm, and specdeck's engine does not implement it."
                    .to_string(),
            )
            .with_evidence(ctx.field_evidence(Side::Draft, &fc_norm)),
        );
    }
    Ok(findings)
}

fn finding(message: String) -> Finding {
    Finding::new(ID, Severity::Error, PhaseId::DrafterLoad, message)
}

/// Load the drafter under a runnable class for this launch (in memory; the file is not touched).
fn rename_remedy(class: &str, model_type_pointer: Option<String>) -> Remedy {
    let mut changes = vec![SpecChange::OverrideDraftConfig { key: "/architectures".into(), value: json!([class]) }];
    if let Some(pointer) = model_type_pointer {
        changes.push(SpecChange::OverrideDraftConfig { key: pointer, value: json!("llama") });
    }
    Remedy::new(
        SET_ARCHITECTURE,
        "/architectures",
        format!(
            "Load the drafter as {class} for this launch (in memory). SGLang needs the same edit in the drafter's \
             config.json, or a re-upload with that class."
        ),
        changes,
    )
}
