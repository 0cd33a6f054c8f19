//! `context-length-exceeds-draft`: the target's context against the drafter's positions.
//!
//! This mirrors SGLang's draft-worker check (`ModelConfig._derive_context_length` with
//! `is_draft_model=True`): the draft is built with the target's context length, and when
//! that exceeds the draft's derived length SGLang raises unless
//! `SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN` is truthy. The engine runs the same check at
//! drafter-init, so `check` and a live launch report the identical finding; the rule lives with
//! the engine, whose launch plan derives the context once, and preflight runs it early.

use serde_json::json;

use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::model::config::{ConfigError, DerivedContext, ModelConfig};
use crate::phase::PhaseId;
use crate::spec::{LaunchSpec, Server, SpecChange, ALLOW_LONGER_CONTEXT_ENV};

pub const ID: &str = "context-length-exceeds-draft";
pub const CLAMP: &str = "clamp-context-length";
pub const ALLOW: &str = "allow-longer-context";

/// The context the target runs at: `--context-length`, else its derived length.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetContext {
    pub length: u64,
    pub evidence: Evidence,
}

pub fn target_context(target: &ModelConfig, spec: &LaunchSpec) -> Result<TargetContext, ConfigError> {
    if let Some(len) = spec.context_length {
        return Ok(TargetContext { length: len, evidence: Evidence::new(Side::Launch, "launch flags", "--context-length", len) });
    }
    let derived = target.derived_context_length()?;
    Ok(TargetContext { length: derived.length, evidence: derived_evidence(Side::Target, target, &derived) })
}

fn derived_evidence(side: Side, cfg: &ModelConfig, d: &DerivedContext) -> Evidence {
    match &d.source {
        Some(f) => Evidence::new(side, cfg.file_name(), f.pointer.clone(), f.value),
        // SGLang falls back to 2048 when no context key exists; cite the absence.
        None => Evidence::new(side, cfg.file_name(), "/max_position_embeddings", json!(null)),
    }
}

/// The finding, if the target context exceeds the drafter's trained positions.
///
/// `draft` is the drafter's config as on disk: its trained length is what acceptance depends
/// on, even when a remedy has extended the positions in memory.
pub fn check(target: &ModelConfig, draft: &ModelConfig, spec: &LaunchSpec) -> Result<Option<Finding>, ConfigError> {
    check_against(target_context(target, spec)?, draft, spec)
}

/// As `check`, for a target context already derived (a launch plan's).
pub fn check_against(tgt: TargetContext, draft: &ModelConfig, spec: &LaunchSpec) -> Result<Option<Finding>, ConfigError> {
    let trained = draft.derived_context_length()?;
    if tgt.length <= trained.length {
        return Ok(None);
    }
    // vLLM never refuses: its EAGLE proposer runs at the target's max_model_len whatever the
    // drafter's config says (vllm/config/speculative.py, v1 spec_decode), so the mismatch only
    // costs acceptance.
    let vllm = spec.server == Server::Vllm;
    let allowed = vllm || spec.env_truthy(ALLOW_LONGER_CONTEXT_ENV);
    let draft_key = trained.source.as_ref().map(|f| f.pointer.clone()).unwrap_or_else(|| "/max_position_embeddings".into());
    let message = if vllm {
        format!(
            "The target's context length ({}) is greater than the drafter's derived context length ({}). vLLM runs \
             the drafter at the target's max_model_len ({}) and does not refuse; acceptance drops for positions past \
             {} (the drafter's trained length).",
            tgt.length, trained.length, tgt.length, trained.length
        )
    } else if allowed {
        format!(
            "The target's context length ({}) is greater than the drafter's derived context length ({}). \
             {ALLOW_LONGER_CONTEXT_ENV} is set, so the drafter's positions are extended to {}; \
             acceptance drops for positions past {} (the drafter's trained length).",
            tgt.length, trained.length, tgt.length, trained.length
        )
    } else {
        format!(
            "The target's context length ({}) is greater than the drafter's derived context length ({}). \
             SGLang's draft worker raises at drafter init (\"Target model's context_length ({}) is greater than \
             the derived context_length ({})\"), after the target has loaded and captured its graphs.",
            tgt.length, trained.length, tgt.length, trained.length
        )
    };
    let severity = if allowed { Severity::Warning } else { Severity::Error };
    let mut finding = Finding::new(ID, severity, PhaseId::DrafterInit, message)
        .with_evidence(tgt.evidence)
        .with_evidence(derived_evidence(Side::Draft, draft, &trained));
    if allowed && !vllm {
        let value = spec.env.get(ALLOW_LONGER_CONTEXT_ENV).cloned().unwrap_or_default();
        finding = finding.with_evidence(Evidence::new(Side::Launch, "environment", ALLOW_LONGER_CONTEXT_ENV, value));
    }
    finding = finding.with_remedy(Remedy::new(
        CLAMP,
        "--context-length",
        format!("Run the target at the drafter's context length: --context-length {}.", trained.length),
        vec![SpecChange::SetFlag { flag: "--context-length".into(), value: trained.length.to_string() }],
    ));
    if !allowed {
        finding = finding.with_remedy(Remedy::new(
            ALLOW,
            ALLOW_LONGER_CONTEXT_ENV,
            format!(
                "Keep the target's {} context: set {ALLOW_LONGER_CONTEXT_ENV}=1 and extend the drafter's \
                 positions to {} in memory. Acceptance drops past {} tokens, the drafter's trained length.",
                tgt.length, tgt.length, trained.length
            ),
            vec![
                SpecChange::SetEnv { name: ALLOW_LONGER_CONTEXT_ENV.into(), value: "1".into() },
                SpecChange::OverrideDraftConfig { key: draft_key, value: json!(tgt.length) },
            ],
        ));
    }
    Ok(Some(finding))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kimi_pair() -> (ModelConfig, ModelConfig) {
        let target = ModelConfig::from_value(
            "t/config.json",
            json!({"text_config": {"max_position_embeddings": 262144,
                "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096}}}),
        );
        let draft = ModelConfig::from_value("d/config.json", json!({"max_position_embeddings": 131072}));
        (target, draft)
    }

    #[test]
    fn story_case_is_an_error_with_both_remedies() {
        let (t, d) = kimi_pair();
        let f = check(&t, &d, &LaunchSpec::default()).unwrap().unwrap();
        assert_eq!((f.id.as_str(), f.severity, f.phase), (ID, Severity::Error, PhaseId::DrafterInit));
        assert_eq!(f.evidence[0], Evidence::new(Side::Target, "t/config.json", "/text_config/max_position_embeddings", 262144));
        assert_eq!(f.evidence[1], Evidence::new(Side::Draft, "d/config.json", "/max_position_embeddings", 131072));
        let ids: Vec<_> = f.remedies.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, [CLAMP, ALLOW]);
    }

    #[test]
    fn remedies_clear_the_error() {
        let (t, d) = kimi_pair();
        let f = check(&t, &d, &LaunchSpec::default()).unwrap().unwrap();
        let mut clamped = LaunchSpec::default();
        clamped.apply_remedy(CLAMP, &f.remedy(CLAMP).unwrap().changes).unwrap();
        assert_eq!(check(&t, &d, &clamped).unwrap(), None);

        let mut allowed = LaunchSpec::default();
        allowed.apply_remedy(ALLOW, &f.remedy(ALLOW).unwrap().changes).unwrap();
        let w = check(&t, &d, &allowed).unwrap().unwrap();
        assert_eq!(w.severity, Severity::Warning);
        assert_eq!(allowed.draft_overrides["/max_position_embeddings"], json!(262144));
    }

    #[test]
    fn explicit_context_length_is_the_launch_evidence() {
        let (t, d) = kimi_pair();
        let mut spec = LaunchSpec { context_length: Some(200000), ..LaunchSpec::default() };
        let f = check(&t, &d, &spec).unwrap().unwrap();
        assert_eq!(f.evidence[0], Evidence::new(Side::Launch, "launch flags", "--context-length", 200000));
        spec.context_length = Some(131072);
        assert_eq!(check(&t, &d, &spec).unwrap(), None);
    }
}
