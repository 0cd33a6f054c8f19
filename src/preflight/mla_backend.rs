//! `draft-attention-backend` and `attention-backend`: the MLA-only attention backends run
//! only models with multi-head latent attention (`kv_lora_rank` in config.json).
//!
//! The drafter runs on `--speculative-draft-attention-backend`, else on `--attention-backend`.
//! An EAGLE-3 drafter (`LlamaForCausalLMEagle3`) is plain multi-head attention even beside an
//! MLA target, and SGLang's draft backend factory raises "trtllm_mla backend requires MLA
//! model (use_mla_backend=True)." (failure_catalogue §I, the case of Kimi-K2.5 with a Llama
//! EAGLE-3 drafter); a non-MLA target under an MLA-only `--attention-backend` fails in its
//! model runner ("trtllm_mla backend can only be used with MLA models."). The drafter's fix
//! is flashinfer, which every draft worker read supports for either kind of attention.
//! SGLang's own pick when no flag is given (trtllm_mla for an MLA target on Blackwell) is not
//! judged here: the GPU's name alone does not decide it.

use serde_json::Value;

use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::model::config::{ConfigError, ModelConfig};
use crate::phase::PhaseId;
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::SpecChange;

pub const DRAFT_ID: &str = "draft-attention-backend";
pub const TARGET_ID: &str = "attention-backend";
pub const DRAFT_FLASHINFER: &str = "draft-attention-backend-flashinfer";
pub const UNSET_BACKEND: &str = "unset-attention-backend";

const BACKEND: &str = "--attention-backend";
const DRAFT_BACKEND: &str = "--speculative-draft-attention-backend";

/// Backends whose kernels read the MLA latent cache only.
const MLA_ONLY: [&str; 4] = ["trtllm_mla", "cutlass_mla", "flashmla", "cutedsl_mla"];

/// The key only MLA configs have.
const MLA_KEY: &str = "kv_lora_rank";

fn mla_only(backend: Option<&str>) -> Option<&str> {
    backend.filter(|b| MLA_ONLY.contains(b))
}

/// The evidence that a config is not MLA (its missing `kv_lora_rank`, and its class), or None
/// when it is.
fn not_mla(ctx: &RuleContext, side: Side, cfg: &ModelConfig) -> Result<Option<(String, Vec<Evidence>)>, ConfigError> {
    if cfg.u64(MLA_KEY)?.is_some() {
        return Ok(None);
    }
    let absent = match side {
        Side::Draft => ctx.draft_evidence(&cfg.pointer_of(MLA_KEY), Value::Null),
        _ => ctx.target_evidence(&cfg.pointer_of(MLA_KEY), Value::Null),
    };
    let class = cfg.architecture();
    let name = class.as_ref().map(|c| format!(" ({})", c.value)).unwrap_or_default();
    Ok(Some((name, std::iter::once(absent).chain(class.map(|c| ctx.field_evidence(side, &c))).collect())))
}

pub fn check(ctx: &RuleContext) -> RuleResult {
    let backend = ctx.spec.attention_backend.as_deref();
    let mut findings = Vec::new();
    if let Some(b) = mla_only(backend) {
        if let Some((class, evidence)) = not_mla(ctx, Side::Target, &ctx.target.config)? {
            let mut f = Finding::new(
                TARGET_ID,
                Severity::Error,
                PhaseId::TargetLoad,
                format!("{b} backend can only be used with MLA models. The target{class} has no {MLA_KEY}: it is not MLA."),
            )
            .with_evidence(ctx.launch_evidence(BACKEND, b));
            f.evidence.extend(evidence);
            findings.push(f.with_remedy(Remedy::new(
                UNSET_BACKEND,
                BACKEND,
                format!("Remove {BACKEND}: SGLang then picks a backend that fits the target."),
                vec![SpecChange::UnsetFlag { flag: BACKEND.into() }],
            )));
        }
    }
    let Some(draft) = ctx.running_draft() else { return Ok(findings) };
    let own = ctx.spec.draft_attention_backend.as_deref();
    let Some(b) = mla_only(own.or(backend)) else { return Ok(findings) };
    let Some((class, evidence)) = not_mla(ctx, Side::Draft, &draft.effective)? else { return Ok(findings) };
    let source = match own {
        Some(_) => DRAFT_BACKEND.to_string(),
        None => format!("{BACKEND} (without {DRAFT_BACKEND} the drafter takes the target's backend)"),
    };
    let mut f = Finding::new(
        DRAFT_ID,
        Severity::Error,
        PhaseId::DrafterInit,
        format!(
            "{b} backend requires MLA model (use_mla_backend=True). The drafter{class} has no {MLA_KEY}: it is not MLA, and it \
             runs on {b} from {source}."
        ),
    )
    .with_evidence(ctx.launch_evidence(DRAFT_BACKEND, own.map_or(Value::Null, Value::from)));
    if own.is_none() {
        f = f.with_evidence(ctx.launch_evidence(BACKEND, b));
    }
    f.evidence.extend(evidence);
    findings.push(f.with_remedy(Remedy::new(
        DRAFT_FLASHINFER,
        DRAFT_BACKEND,
        format!("Give the drafter a backend for its multi-head attention: {DRAFT_BACKEND} flashinfer."),
        vec![SpecChange::SetFlag { flag: DRAFT_BACKEND.into(), value: "flashinfer".into() }],
    )));
    Ok(findings)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::preflight::fixture::{applied, gpus, testdata, Configs};
    use crate::spec::{Algorithm, LaunchSpec};

    /// A tiny real Kimi-K2.5 target (MLA under text_config) and a real EAGLE-3 drafter for it.
    const KIMI: &str = "testdata/deepseek/kimi-k25";
    const DRAFTER: &str = "testdata/check/pairs/kimi-k2.5__aq-medai-eagle3/draft";

    fn spec(backend: Option<&str>, draft_backend: Option<&str>) -> LaunchSpec {
        LaunchSpec {
            speculative_algorithm: Some(Algorithm::Eagle3),
            attention_backend: backend.map(String::from),
            draft_attention_backend: draft_backend.map(String::from),
            ..LaunchSpec::default()
        }
    }

    fn ev(side: Side, file: &str, key: &str, value: impl Into<Value>) -> Evidence {
        Evidence::new(side, file, key, value)
    }

    #[test]
    fn a_non_mla_drafter_on_the_targets_mla_backend_gets_flashinfer() {
        let pair = Configs::new(testdata(KIMI), Some(testdata(DRAFTER)));
        let s = spec(Some("trtllm_mla"), None);
        let f = pair.check(check, &s, &gpus(8)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].id.as_str(), f[0].severity, f[0].phase), (DRAFT_ID, Severity::Error, PhaseId::DrafterInit));
        assert_eq!(
            f[0].message,
            "trtllm_mla backend requires MLA model (use_mla_backend=True). The drafter (LlamaForCausalLMEagle3) has no \
             kv_lora_rank: it is not MLA, and it runs on trtllm_mla from --attention-backend (without \
             --speculative-draft-attention-backend the drafter takes the target's backend)."
        );
        assert_eq!(
            f[0].evidence,
            [
                ev(Side::Launch, "launch flags", DRAFT_BACKEND, Value::Null),
                ev(Side::Launch, "launch flags", BACKEND, "trtllm_mla"),
                ev(Side::Draft, "draft/config.json", "/kv_lora_rank", Value::Null),
                ev(Side::Draft, "draft/config.json", "/architectures/0", "LlamaForCausalLMEagle3"),
            ]
        );
        let change = SpecChange::SetFlag { flag: DRAFT_BACKEND.into(), value: "flashinfer".into() };
        assert_eq!((f[0].remedies[0].id.as_str(), &f[0].remedies[0].changes[..]), (DRAFT_FLASHINFER, &[change][..]));
        let fixed = applied(&s, &f[0], DRAFT_FLASHINFER);
        assert_eq!(fixed.draft_attention_backend.as_deref(), Some("flashinfer"));
        assert_eq!(pair.check(check, &fixed, &gpus(8)).unwrap(), []);
    }

    #[test]
    fn the_drafters_own_flag_decides_its_backend() {
        let pair = Configs::new(testdata(KIMI), Some(testdata(DRAFTER)));
        let f = pair.check(check, &spec(Some("flashinfer"), Some("cutlass_mla")), &gpus(8)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].message.ends_with("it runs on cutlass_mla from --speculative-draft-attention-backend."), "{}", f[0].message);
        assert_eq!(f[0].evidence[0], ev(Side::Launch, "launch flags", DRAFT_BACKEND, "cutlass_mla"));
        assert_eq!(f[0].evidence.len(), 3, "{f:?}");
        for fine in [spec(Some("flashmla"), Some("fa3")), spec(None, None), spec(Some("triton"), None)] {
            assert_eq!(pair.check(check, &fine, &gpus(8)).unwrap(), [], "{fine:?}");
        }
        // An MLA drafter (an MTP layer of the same family) runs on MLA backends.
        let mla = Configs::new(testdata(KIMI), Some(testdata(KIMI)));
        let s = LaunchSpec { speculative_algorithm: Some(Algorithm::Eagle), ..spec(Some("flashmla"), None) };
        assert_eq!(mla.check(check, &s, &gpus(8)).unwrap(), []);
    }

    #[test]
    fn a_non_mla_target_on_an_mla_backend_is_refused_too() {
        let llama = Configs::new(json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2}), None);
        let s = spec(Some("flashmla"), None);
        let f = llama.check(check, &s, &gpus(1)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].id.as_str(), f[0].severity, f[0].phase), (TARGET_ID, Severity::Error, PhaseId::TargetLoad));
        assert_eq!(
            f[0].message,
            "flashmla backend can only be used with MLA models. The target (LlamaForCausalLM) has no kv_lora_rank: it is not MLA."
        );
        assert_eq!(
            f[0].evidence,
            [
                ev(Side::Launch, "launch flags", BACKEND, "flashmla"),
                ev(Side::Target, "target/config.json", "/kv_lora_rank", Value::Null),
                ev(Side::Target, "target/config.json", "/architectures/0", "LlamaForCausalLM"),
            ]
        );
        assert_eq!(f[0].remedies[0].changes, [SpecChange::UnsetFlag { flag: BACKEND.into() }]);
        assert_eq!(llama.check(check, &applied(&s, &f[0], UNSET_BACKEND), &gpus(1)).unwrap(), []);
        // A malformed kv_lora_rank is named, not taken for "no MLA".
        let bad = Configs::new(json!({"kv_lora_rank": "512"}), None);
        let e = bad.check(check, &s, &gpus(1)).unwrap_err();
        assert_eq!(e.to_string(), "target/config.json: /kv_lora_rank = \"512\" is not a non-negative integer");
    }
}
