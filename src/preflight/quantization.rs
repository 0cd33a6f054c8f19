//! `quantization-mismatch`: the checkpoint's quantization against the launch's, for the
//! target and for the drafter SGLang loads beside it (failure_catalogue §M).
//!
//! SGLang's `ModelConfig` takes the method from config.json's
//! `quantization_config.quant_method` (lowercased, `compressed_tensors` read as
//! `compressed-tensors`) and raises when `--quantization` names another, unless the two name
//! one method: its `compatible_quantization_methods` (modelopt_fp8, modelopt_fp4 and
//! petit_nvfp4 on a modelopt checkpoint; w8a8_int8 and w8a8_fp8 on compressed-tensors) and the
//! kernels that take over an awq or gptq checkpoint when asked for (awq_marlin, gptq_marlin,
//! gptq_marlin_24, marlin, moe_wna16).
//!
//! The drafter loads with `--speculative-draft-model-quantization`, else the target's method
//! (`unquant`: none). A drafter without a quantization_config holds unquantized weights, which
//! only fp8 quantizes as they load; any other method expects packed weights and scales the
//! drafter does not have. A warning, not an error: only SGLang 0.5.23 documents the
//! inheritance, and `unquant` is right whichever release runs.

use serde_json::Value;

use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::model::config::Field;
use crate::phase::PhaseId;
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::SpecChange;

pub const ID: &str = "quantization-mismatch";
pub const UNSET_QUANTIZATION: &str = "unset-quantization";
pub const UNQUANTIZED_DRAFT: &str = "set-draft-quantization-unquant";

const FLAG: &str = "--quantization";
const DRAFT_FLAG: &str = "--speculative-draft-model-quantization";
const UNQUANT: &str = "unquant";

/// `--quantization` values SGLang accepts for a checkpoint whose method has another name.
const SAME_METHOD: &[(&str, &[&str])] = &[
    ("modelopt_fp8", &["modelopt"]),
    ("modelopt_fp4", &["modelopt"]),
    ("petit_nvfp4", &["modelopt"]),
    ("w8a8_int8", &["compressed-tensors"]),
    ("w8a8_fp8", &["compressed-tensors"]),
    ("awq_marlin", &["awq"]),
    ("gptq_marlin", &["gptq"]),
    ("gptq_marlin_24", &["gptq"]),
    ("marlin", &["awq", "gptq"]),
    ("moe_wna16", &["awq", "gptq"]),
];

/// Methods that quantize unquantized weights as they load.
const QUANTIZES_ON_LOAD: &[&str] = &["fp8"];

/// A method's name as SGLang compares it.
fn normalized(method: &str) -> String {
    method.trim().to_ascii_lowercase().replace("compressed_tensors", "compressed-tensors")
}

fn same_method(flag: &str, checkpoint: &str) -> bool {
    flag == checkpoint || SAME_METHOD.iter().any(|(f, methods)| *f == flag && methods.contains(&checkpoint))
}

/// A quantization method the launch loads a model with, and where it comes from.
struct Method {
    name: String,
    /// Where it is set, for the message: `--quantization awq`.
    source: String,
    evidence: Evidence,
}

pub fn check(ctx: &RuleContext) -> RuleResult {
    let checkpoint = ctx.target.config.quant_method()?;
    let flag = ctx.spec.quantization.as_deref().map(|raw| Method {
        name: normalized(raw),
        source: format!("the target's {FLAG} {raw}"),
        evidence: ctx.launch_evidence(FLAG, raw),
    });
    let mut findings = Vec::new();
    if let (Some(cfg), Some(flag)) = (&checkpoint, &flag) {
        if !same_method(&flag.name, &normalized(&cfg.value)) {
            findings.push(mismatch(ctx, cfg, flag));
        }
    }
    let target = flag.or_else(|| {
        checkpoint.map(|cfg| Method {
            name: normalized(&cfg.value),
            source: format!("the target's {} in {}", cfg.pointer, ctx.target.config.file_name()),
            evidence: ctx.field_evidence(Side::Target, &cfg),
        })
    });
    findings.extend(unquantized_draft(ctx, target));
    Ok(findings)
}

/// `--quantization` names another method than the checkpoint's: SGLang's ValueError.
fn mismatch(ctx: &RuleContext, checkpoint: &Field<String>, flag: &Method) -> Finding {
    let method = normalized(&checkpoint.value);
    Finding::new(
        ID,
        Severity::Error,
        PhaseId::TargetLoad,
        format!(
            "Quantization method specified in the model config ({method}) does not match the quantization method specified \
             in the `quantization` argument ({}).",
            flag.name
        ),
    )
    .with_evidence(ctx.field_evidence(Side::Target, checkpoint))
    .with_evidence(flag.evidence.clone())
    .with_remedy(Remedy::new(
        UNSET_QUANTIZATION,
        FLAG,
        format!("Remove {FLAG}: SGLang then takes the method from the checkpoint ({method})."),
        vec![SpecChange::UnsetFlag { flag: FLAG.into() }],
    ))
}

/// An unquantized drafter asked to load under a method that cannot quantize it on load.
fn unquantized_draft(ctx: &RuleContext, target: Option<Method>) -> Option<Finding> {
    let draft = ctx.running_draft()?;
    if draft.effective.value("quantization_config").is_some() {
        return None;
    }
    let (method, inherited) = match ctx.spec.draft_quantization.as_deref() {
        Some(raw) if normalized(raw) == UNQUANT => return None,
        Some(raw) => {
            let evidence = ctx.launch_evidence(DRAFT_FLAG, raw);
            (Method { name: normalized(raw), source: format!("{DRAFT_FLAG} {raw}"), evidence }, false)
        }
        None => (target?, true),
    };
    if QUANTIZES_ON_LOAD.contains(&method.name.as_str()) {
        return None;
    }
    let name = &method.name;
    let mut f = Finding::new(
        ID,
        Severity::Warning,
        PhaseId::DrafterLoad,
        format!(
            "The drafter loads as {name} ({}), but its config.json has no quantization_config: its weights are unquantized, \
             and {name} cannot quantize them as they load (of the methods, only fp8 can), so the loader looks for packed \
             weights and scales the drafter does not have. SGLang loads the drafter with the target's quantization unless \
             {DRAFT_FLAG} names one (unquant: none).",
            method.source
        ),
    )
    .with_evidence(method.evidence)
    .with_evidence(ctx.draft_evidence("/quantization_config", Value::Null));
    if inherited {
        f = f.with_evidence(ctx.launch_evidence(DRAFT_FLAG, Value::Null));
    }
    Some(f.with_remedy(Remedy::new(
        UNQUANTIZED_DRAFT,
        DRAFT_FLAG,
        format!("Load the drafter unquantized, as its checkpoint is: {DRAFT_FLAG} {UNQUANT}."),
        vec![SpecChange::SetFlag { flag: DRAFT_FLAG.into(), value: UNQUANT.into() }],
    )))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::preflight::fixture::{applied, gpus, testdata, Configs};
    use crate::spec::{Algorithm, LaunchSpec};

    const DEEPSEEK_V3: &str = "testdata/check/pairs/deepseek-v3__eagle3";

    fn eagle3(quantization: Option<&str>) -> LaunchSpec {
        LaunchSpec { speculative_algorithm: Some(Algorithm::Eagle3), quantization: quantization.map(String::from), ..LaunchSpec::default() }
    }

    fn llama(extra: Value) -> Value {
        let mut v = json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        v
    }

    fn drafter() -> Value {
        json!({"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1})
    }

    fn ev(side: Side, file: &str, key: &str, value: impl Into<Value>) -> Evidence {
        Evidence::new(side, file, key, value)
    }

    #[test]
    fn a_flag_that_names_another_method_than_the_checkpoint_is_sglangs_error() {
        // DeepSeek-V3's real config: fp8 block quantization.
        let configs = Configs::new(testdata(&format!("{DEEPSEEK_V3}/target")), None);
        let spec = eagle3(Some("AWQ"));
        let f = configs.check(check, &spec, &gpus(8)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].id.as_str(), f[0].severity, f[0].phase), (ID, Severity::Error, PhaseId::TargetLoad));
        assert_eq!(
            f[0].message,
            "Quantization method specified in the model config (fp8) does not match the quantization method specified in the \
             `quantization` argument (awq)."
        );
        assert_eq!(
            f[0].evidence,
            [
                ev(Side::Target, "target/config.json", "/quantization_config/quant_method", "fp8"),
                ev(Side::Launch, "launch flags", "--quantization", "AWQ")
            ]
        );
        assert_eq!(f[0].remedies.len(), 1);
        assert_eq!(
            (f[0].remedies[0].id.as_str(), &f[0].remedies[0].changes[..]),
            (UNSET_QUANTIZATION, &[SpecChange::UnsetFlag { flag: FLAG.into() }][..])
        );
        let fixed = applied(&spec, &f[0], UNSET_QUANTIZATION);
        assert_eq!(fixed.quantization, None);
        assert_eq!(configs.check(check, &fixed, &gpus(8)).unwrap(), []);
        // The same method, or one SGLang accepts for it, is no mismatch.
        for same in ["fp8", "FP8"] {
            assert_eq!(configs.check(check, &eagle3(Some(same)), &gpus(8)).unwrap(), [], "{same}");
        }
    }

    #[test]
    fn methods_sglang_takes_as_one_are_no_mismatch() {
        for (flag, checkpoint) in [
            ("w8a8_int8", "compressed_tensors"),
            ("modelopt_fp4", "modelopt"),
            ("awq_marlin", "awq"),
            ("marlin", "gptq"),
            ("moe_wna16", "awq"),
        ] {
            let configs = Configs::new(llama(json!({"quantization_config": {"quant_method": checkpoint}})), None);
            assert_eq!(configs.check(check, &eagle3(Some(flag)), &gpus(1)).unwrap(), [], "{flag} on {checkpoint}");
        }
        let configs = Configs::new(llama(json!({"quantization_config": {"quant_method": "gptq"}})), None);
        assert_eq!(configs.check(check, &eagle3(Some("awq_marlin")), &gpus(1)).unwrap().len(), 1);
    }

    #[test]
    fn an_unquantized_drafter_under_the_targets_int4_method_is_loaded_unquantized_by_the_remedy() {
        // Kimi-K2.5 ships its routed experts as compressed-tensors int4, under text_config.
        let target = json!({"architectures": ["KimiK25ForConditionalGeneration"],
            "text_config": {"num_hidden_layers": 2, "quantization_config": {"quant_method": "compressed-tensors"}}});
        let configs = Configs::new(target, Some(drafter()));
        let spec = eagle3(None);
        let f = configs.check(check, &spec, &gpus(8)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].id.as_str(), f[0].severity, f[0].phase), (ID, Severity::Warning, PhaseId::DrafterLoad));
        assert!(
            f[0].message.starts_with(
                "The drafter loads as compressed-tensors (the target's /text_config/quantization_config/quant_method in \
                 target/config.json), but its config.json has no quantization_config"
            ),
            "{}",
            f[0].message
        );
        assert_eq!(
            f[0].evidence,
            [
                ev(Side::Target, "target/config.json", "/text_config/quantization_config/quant_method", "compressed-tensors"),
                ev(Side::Draft, "draft/config.json", "/quantization_config", Value::Null),
                ev(Side::Launch, "launch flags", DRAFT_FLAG, Value::Null),
            ]
        );
        let change = SpecChange::SetFlag { flag: DRAFT_FLAG.into(), value: "unquant".into() };
        assert_eq!((f[0].remedies[0].id.as_str(), &f[0].remedies[0].changes[..]), (UNQUANTIZED_DRAFT, &[change][..]));
        let fixed = applied(&spec, &f[0], UNQUANTIZED_DRAFT);
        assert_eq!(fixed.draft_quantization.as_deref(), Some("unquant"));
        assert_eq!(configs.check(check, &fixed, &gpus(8)).unwrap(), []);
    }

    #[test]
    fn the_drafter_follows_the_flags_and_fp8_or_its_own_quantization_are_fine() {
        let configs = Configs::new(llama(json!({})), Some(drafter()));
        // The target's flag is inherited; the draft's own flag wins over it.
        let f = configs.check(check, &eagle3(Some("gptq")), &gpus(1)).unwrap();
        assert_eq!((f.len(), f[0].severity), (1, Severity::Warning), "{f:?}");
        assert!(f[0].message.starts_with("The drafter loads as gptq (the target's --quantization gptq)"), "{}", f[0].message);
        assert_eq!(f[0].evidence[0], ev(Side::Launch, "launch flags", "--quantization", "gptq"));
        let own = LaunchSpec { draft_quantization: Some("w8a8_int8".into()), ..eagle3(Some("fp8")) };
        let f = configs.check(check, &own, &gpus(1)).unwrap();
        assert!(f[0].message.starts_with("The drafter loads as w8a8_int8 (--speculative-draft-model-quantization w8a8_int8)"), "{f:?}");
        assert_eq!(f[0].evidence.len(), 2, "{f:?}");
        // fp8 quantizes as it loads; no quantization at all needs nothing.
        assert_eq!(configs.check(check, &eagle3(Some("fp8")), &gpus(1)).unwrap(), []);
        assert_eq!(configs.check(check, &eagle3(None), &gpus(1)).unwrap(), []);
        // A drafter with its own quantization_config keeps it (SGLang uses the draft's).
        let quantized = Configs::new(
            llama(json!({})),
            Some(json!({"architectures": ["LlamaForCausalLMEagle3"],
            "quantization_config": {"quant_method": "fp8"}})),
        );
        assert_eq!(quantized.check(check, &eagle3(Some("awq")), &gpus(1)).unwrap(), []);
        // No drafter, nothing to load beside the target (whose config names no method).
        let alone = Configs::new(llama(json!({})), None);
        assert_eq!(alone.check(check, &eagle3(Some("gptq")), &gpus(1)).unwrap(), []);
    }

    #[test]
    fn a_malformed_quantization_config_names_its_key() {
        let configs = Configs::new(llama(json!({"quantization_config": {"quant_method": ["fp8"]}})), None);
        let e = configs.check(check, &eagle3(Some("fp8")), &gpus(1)).unwrap_err();
        assert_eq!(e.to_string(), "target/config.json: /quantization_config/quant_method = [\"fp8\"] is not a string");
    }
}
