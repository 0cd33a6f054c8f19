//! `tp-divisibility`: tensor parallelism splits heads, kv heads and MLP widths evenly, and
//! needs one GPU per rank.
//!
//! SGLang's checks are bare asserts in the model constructors (`total_num_heads % tp_size ==
//! 0`; kv heads divide tp or tp divides them; `ensure_divisibility` for linear layers), and the
//! drafter runs in the target's TP group, so a drafter's heads must divide too
//! (failure_catalogue §1.4-J). SGLang pads the vocab to the TP size, so an odd vocab is a
//! warning.

use serde_json::json;

use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::model::config::{ConfigError, ModelConfig};
use crate::phase::PhaseId;
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::{Algorithm, SpecChange};

pub const ID: &str = "tp-divisibility";
pub const REDUCE_TP: &str = "reduce-tp-size";

const FLAG: &str = "--tp-size";

/// A size that does not split over the TP ranks.
struct Uneven {
    key: &'static str,
    pointer: String,
    value: u64,
    severity: Severity,
    rule: &'static str,
}

fn uneven(cfg: &ModelConfig, tp: u64) -> Result<Vec<Uneven>, ConfigError> {
    let mut out = Vec::new();
    let mut test = |key: &'static str, ok: &dyn Fn(u64) -> bool, severity, rule| -> Result<(), ConfigError> {
        if let Some(f) = cfg.u64(key)?.filter(|f| f.value > 0 && !ok(f.value)) {
            out.push(Uneven { key, pointer: f.pointer, value: f.value, severity, rule });
        }
        Ok(())
    };
    let divides = |v: u64| v % tp == 0;
    test("num_attention_heads", &divides, Severity::Error, "must divide by the TP size")?;
    test(
        "num_key_value_heads",
        &|kv| if kv >= tp { kv % tp == 0 } else { tp % kv == 0 },
        Severity::Error,
        "must divide by the TP size, or divide it",
    )?;
    test("intermediate_size", &divides, Severity::Error, "must divide by the TP size")?;
    test("moe_intermediate_size", &divides, Severity::Error, "must divide by the TP size")?;
    test("vocab_size", &divides, Severity::Warning, "is padded to a multiple of the TP size")?;
    Ok(out)
}

/// The configs that TP splits: the target, and the drafter when the launch speculates.
fn split_configs<'a>(ctx: &RuleContext<'a>) -> Vec<(Side, &'a ModelConfig)> {
    let mut out = vec![(Side::Target, &ctx.target.config)];
    if let Some(d) = ctx.draft.filter(|_| ctx.algorithm != Algorithm::None) {
        out.push((Side::Draft, &d.effective));
    }
    out
}

/// True when `tp` splits every head count and MLP width of the launch evenly.
pub fn splits_evenly(ctx: &RuleContext, tp: u64) -> Result<bool, ConfigError> {
    for (_, cfg) in split_configs(ctx) {
        if uneven(cfg, tp)?.iter().any(|u| u.severity == Severity::Error) {
            return Ok(false);
        }
    }
    Ok(true)
}

pub fn set_tp(id: &str, tp: u64, why: String) -> Remedy {
    Remedy::new(id, FLAG, why, vec![SpecChange::SetFlag { flag: FLAG.into(), value: tp.to_string() }])
}

/// The largest TP size below `below` (and within the GPUs present) that splits evenly.
fn smaller_valid_tp(ctx: &RuleContext, below: u64) -> Result<Option<u64>, ConfigError> {
    let cap = ctx.gpus.count.map(u64::from).unwrap_or(u64::MAX);
    for t in (1..below).rev().filter(|t| *t <= cap) {
        if splits_evenly(ctx, t)? {
            return Ok(Some(t));
        }
    }
    Ok(None)
}

pub fn check(ctx: &RuleContext) -> RuleResult {
    let tp = u64::from(ctx.spec.tp());
    let tp_ev = ctx.launch_evidence(FLAG, tp);
    let mut findings = Vec::new();
    for (side, cfg) in split_configs(ctx) {
        let bad = uneven(cfg, tp)?;
        let Some(severity) = bad.iter().map(|u| u.severity).max() else { continue };
        let what: Vec<String> = bad.iter().map(|u| format!("{} = {} {}", u.key, u.value, u.rule)).collect();
        let mut f = Finding::new(
            ID,
            severity,
            PhaseId::TargetLoad,
            format!(
                "--tp-size {tp} does not split the {}: {}. SGLang fails on a bare assert while building the model.",
                if side == Side::Draft { "drafter (it runs in the target's TP group)" } else { "target" },
                what.join("; ")
            ),
        )
        .with_evidence(tp_ev.clone());
        for u in &bad {
            f = f.with_evidence(Evidence::new(side, cfg.file_name(), u.pointer.clone(), u.value));
        }
        if severity == Severity::Error {
            if let Some(t) = smaller_valid_tp(ctx, tp)? {
                f = f.with_remedy(set_tp(REDUCE_TP, t, format!("Use --tp-size {t}, the largest size below {tp} that splits evenly.")));
            }
        }
        findings.push(f);
    }
    match ctx.gpus.count {
        Some(count) if u64::from(count) < tp => {
            let mut f = Finding::new(
                ID,
                Severity::Error,
                PhaseId::TargetLoad,
                format!("--tp-size {tp} needs {tp} GPUs, but {count} are visible ({}).", ctx.gpus.source),
            )
            .with_evidence(tp_ev.clone())
            .with_evidence(Evidence::new(Side::Launch, "GPU inventory", "gpus", json!(count)));
            if let Some(t) = smaller_valid_tp(ctx, tp)? {
                f = f.with_remedy(set_tp(REDUCE_TP, t, format!("Use --tp-size {t}: it fits the {count} GPUs and splits evenly.")));
            }
            findings.push(f);
        }
        None if tp > 1 => findings.push(
            Finding::new(
                ID,
                Severity::Info,
                PhaseId::TargetLoad,
                format!("--tp-size {tp} was not checked against the GPUs present: {}.", ctx.gpus.source),
            )
            .with_evidence(tp_ev),
        ),
        _ => {}
    }
    Ok(findings)
}
