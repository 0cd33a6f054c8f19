//! `dtype-mismatch` (warning): the drafter is stored in another dtype than the launch runs.
//!
//! `--dtype` applies to the target and the drafter alike; there is no per-drafter dtype
//! flag. A drafter stored in fp16 under a bf16 target is cast at load, as EAGLE does
//! (eagle3_spec §8.1.9). Running bf16-trained weights with `--dtype float16` is the case seen
//! in real reports with NaNs or low acceptance (failure_catalogue §1.4-L), so that one comes
//! with a remedy.

use safetensors::Dtype;
use serde_json::json;

use crate::finding::{Evidence, Finding, Remedy, Severity};
use crate::model::config::ModelConfig;
use crate::phase::PhaseId;
use crate::preflight::inputs::ModelFiles;
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::{Algorithm, SpecChange};

pub const ID: &str = "dtype-mismatch";
pub const USE_BF16: &str = "set-dtype-bfloat16";

const FLAG: &str = "--dtype";

/// The canonical torch name of a dtype spelling.
fn canonical(name: &str) -> Option<&'static str> {
    match name.to_ascii_lowercase().as_str() {
        "bfloat16" | "bf16" => Some("bfloat16"),
        "float16" | "fp16" | "half" => Some("float16"),
        "float32" | "fp32" | "float" => Some("float32"),
        "float8_e4m3fn" | "fp8" | "f8_e4m3" => Some("float8_e4m3fn"),
        _ => None,
    }
}

/// A model's stored dtype: config.json's, else the most common float dtype in its headers.
fn stored(files: &ModelFiles, cfg: &ModelConfig) -> Option<(&'static str, Evidence)> {
    if let Some(f) = cfg.dtype() {
        let name = canonical(&f.value)?;
        return Some((name, Evidence::new(files.side, cfg.file_name(), f.pointer, f.value)));
    }
    let ck = files.checkpoint.as_ref()?;
    let mut counts = std::collections::BTreeMap::<&'static str, usize>::new();
    for meta in ck.tensors.values() {
        let name = match meta.dtype {
            Dtype::BF16 => "bfloat16",
            Dtype::F16 => "float16",
            Dtype::F32 => "float32",
            Dtype::F8_E4M3 => "float8_e4m3fn",
            _ => continue, // integer maps (d2t) and masks (t2d) say nothing about the weights
        };
        *counts.entry(name).or_default() += 1;
    }
    let (name, _) = counts.into_iter().max_by_key(|(_, n)| *n)?;
    Some((name, Evidence::new(files.side, ck.dir.display().to_string(), "tensor dtypes", json!(name))))
}

pub fn check(ctx: &RuleContext) -> RuleResult {
    let Some(draft) = ctx.draft.filter(|_| ctx.algorithm != Algorithm::None) else { return Ok(Vec::new()) };
    let flag = ctx.spec.dtype.as_deref().filter(|d| *d != "auto");
    let target = stored(ctx.target, &ctx.target.config);
    let Some((draft_dtype, draft_ev)) = stored(&draft.files, &draft.effective) else { return Ok(Vec::new()) };
    let run = match flag.and_then(canonical) {
        Some(d) => Some((d, ctx.launch_evidence(FLAG, flag.unwrap_or_default()))),
        None => target.clone(),
    };
    let Some((run_dtype, run_ev)) = run else { return Ok(Vec::new()) };
    let mut findings = Vec::new();
    if draft_dtype != run_dtype {
        let mut f = Finding::new(
            ID,
            Severity::Warning,
            PhaseId::DrafterLoad,
            format!(
                "The drafter is stored in {draft_dtype} and the launch runs {run_dtype} (one --dtype for target and \
                 drafter): its weights are cast at load. {}",
                match (draft_dtype, run_dtype) {
                    ("bfloat16", "float16") =>
                        "bf16-trained weights in fp16 can overflow: NaNs or low acceptance have been reported (SpecForge#231).",
                    ("float32", _) | ("float8_e4m3fn", _) | (_, "float8_e4m3fn") =>
                        "This is an unusual dtype for a drafter: check the export.",
                    _ => "That is normally harmless (EAGLE casts the drafter to the target dtype); compare acceptance if it is low.",
                }
            ),
        )
        .with_evidence(run_ev.clone())
        .with_evidence(draft_ev.clone());
        if let Some((t, ev)) = target.as_ref().filter(|_| flag.is_some()) {
            if *t != run_dtype {
                f = f.with_evidence(ev.clone());
            }
        }
        if run_dtype == "float16" && flag.is_some() && (draft_dtype == "bfloat16" || target.as_ref().is_some_and(|(t, _)| *t == "bfloat16"))
        {
            f = f.with_remedy(Remedy::new(
                USE_BF16,
                FLAG,
                "Run in bfloat16, the dtype the weights were stored in.",
                vec![SpecChange::SetFlag { flag: FLAG.into(), value: "bfloat16".into() }],
            ));
        }
        findings.push(f);
    }
    Ok(findings)
}
