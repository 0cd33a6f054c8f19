//! `env-typo`: an environment name one or two edits away from an SGLang variable.
//!
//! SGLang does not validate unknown env names, so a typo is silently ignored; one of its own
//! PR comments spells `SGLANG_ALLLOW_OVERWRITE_LONGER_CONTEXT_LEN` (failure_catalogue §1.4-A).

use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::phase::PhaseId;
use crate::spec::{LaunchSpec, SpecChange, ALLOW_LONGER_CONTEXT_ENV};

pub const ID: &str = "env-typo";
pub const FIX: &str = "fix-env-typo";

/// The SGLang environment names of failure_catalogue §1.5.
pub const KNOWN_SGLANG_ENV: &[&str] = &[
    ALLOW_LONGER_CONTEXT_ENV,
    "SGLANG_IS_IN_CI",
    "SGLANG_ENABLE_SPEC_V2",
    "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK",
    "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK",
    "SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION",
    "SGLANG_LOG_MS",
    "SGLANG_LOGGING_CONFIG_PATH",
    "SGLANG_USE_MODELSCOPE",
    "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH",
    "SGLANG_ENABLE_PP_SPEC",
    "SGLANG_SIMULATE_ACC_LEN",
    "SGLANG_SIMULATE_ACC_METHOD",
    "SGLANG_SIMULATE_ACC_TOKEN_MODE",
    "SGLANG_ENABLE_NAN_LOGITS_CHECK",
    "SGLANG_SANITIZE_NAN_LOGITS",
    "SGLANG_DISABLE_CUDNN_CHECK",
];

/// The known name `name` is a near miss of: the wrong case, or within 1 edit (2 for names
/// of 12 characters or more; transpositions count as one edit).
pub fn near_miss(name: &str) -> Option<&'static str> {
    if KNOWN_SGLANG_ENV.contains(&name) {
        return None;
    }
    let upper = name.to_ascii_uppercase();
    KNOWN_SGLANG_ENV
        .iter()
        .map(|known| (strsim::damerau_levenshtein(&upper, known), *known))
        .filter(|(d, known)| *d <= if known.len() >= 12 { 2 } else { 1 })
        .min_by_key(|(d, _)| *d)
        .map(|(_, known)| known)
}

pub fn check(spec: &LaunchSpec) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (name, value) in &spec.env {
        let Some(known) = near_miss(name) else { continue };
        let shadowed = spec.env.contains_key(known);
        findings.push(
            Finding::new(
                ID,
                Severity::Warning,
                PhaseId::Preflight,
                format!(
                    "{name} is not an SGLang variable; it looks like a typo of {known}. SGLang ignores unknown names \
                     silently, so {known} is {}.",
                    if shadowed { "set separately, and this one has no effect" } else { "not set" }
                ),
            )
            .with_evidence(Evidence::new(Side::Launch, "environment", name.clone(), value.clone()))
            .with_remedy(Remedy::new(
                FIX,
                known,
                format!("Set {known}={value} and remove {name}."),
                vec![SpecChange::SetEnv { name: known.to_string(), value: value.clone() }, SpecChange::UnsetEnv { name: name.clone() }],
            )),
        );
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_and_exact_names() {
        assert_eq!(near_miss("SGLANG_ALLLOW_OVERWRITE_LONGER_CONTEXT_LEN"), Some(ALLOW_LONGER_CONTEXT_ENV));
        assert_eq!(near_miss("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEX_LEN"), Some(ALLOW_LONGER_CONTEXT_ENV));
        assert_eq!(near_miss("sglang_allow_overwrite_longer_context_len"), Some(ALLOW_LONGER_CONTEXT_ENV));
        assert_eq!(near_miss("SGLANG_ENABLE_TP_MEMORY_IMBALANCE_CHECK"), Some("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK"));
        assert_eq!(near_miss(ALLOW_LONGER_CONTEXT_ENV), None);
        assert_eq!(near_miss("SGLANG_TORCH_PROFILER_DIR"), None);
        assert_eq!(near_miss("CUDA_VISIBLE_DEVICES"), None);
    }

    #[test]
    fn the_remedy_moves_the_value_to_the_right_name() {
        let mut spec = LaunchSpec::default();
        spec.env.insert("SGLANG_ALLLOW_OVERWRITE_LONGER_CONTEXT_LEN".into(), "1".into());
        let f = check(&spec);
        assert_eq!(f.len(), 1);
        let r = f[0].remedy(FIX).unwrap();
        spec.apply_remedy(FIX, &r.changes).unwrap();
        assert!(spec.env_truthy(ALLOW_LONGER_CONTEXT_ENV));
        assert!(!spec.env.contains_key("SGLANG_ALLLOW_OVERWRITE_LONGER_CONTEXT_LEN"));
        assert!(check(&spec).is_empty());
    }
}
