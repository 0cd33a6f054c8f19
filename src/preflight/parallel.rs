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
use crate::preflight::{divisors, RuleContext, RuleResult};
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

/// How TP must split a size.
#[derive(Clone, Copy, PartialEq)]
enum Split {
    /// The TP size divides it.
    Divided,
    /// The TP size divides it, or it divides the TP size (kv heads are replicated).
    DividedOrDivides,
    /// SGLang pads it to a multiple of the TP size (a warning).
    Padded,
}

const SPLITS: [(&str, Split); 5] = [
    ("num_attention_heads", Split::Divided),
    ("num_key_value_heads", Split::DividedOrDivides),
    ("intermediate_size", Split::Divided),
    ("moe_intermediate_size", Split::Divided),
    ("vocab_size", Split::Padded),
];

impl Split {
    fn ok(self, v: u64, tp: u64) -> bool {
        match self {
            Split::DividedOrDivides if v < tp => tp % v == 0,
            _ => v % tp == 0,
        }
    }

    fn severity(self) -> Severity {
        if self == Split::Padded {
            Severity::Warning
        } else {
            Severity::Error
        }
    }

    fn rule(self) -> &'static str {
        match self {
            Split::Divided => "must divide by the TP size",
            Split::DividedOrDivides => "must divide by the TP size, or divide it",
            Split::Padded => "is padded to a multiple of the TP size",
        }
    }
}

/// The sizes of a config that TP splits (zero or absent ones are not split).
fn split_sizes(cfg: &ModelConfig) -> Result<Vec<(&'static str, String, u64, Split)>, ConfigError> {
    let mut out = Vec::new();
    for (key, split) in SPLITS {
        if let Some(f) = cfg.u64(key)?.filter(|f| f.value > 0) {
            out.push((key, f.pointer, f.value, split));
        }
    }
    Ok(out)
}

fn uneven(cfg: &ModelConfig, tp: u64) -> Result<Vec<Uneven>, ConfigError> {
    Ok(split_sizes(cfg)?
        .into_iter()
        .filter(|(_, _, v, split)| !split.ok(*v, tp))
        .map(|(key, pointer, value, split)| Uneven { key, pointer, value, severity: split.severity(), rule: split.rule() })
        .collect())
}

/// The configs that TP splits: the target, and the drafter when the launch speculates.
fn split_configs<'a>(ctx: &RuleContext<'a>) -> Vec<(Side, &'a ModelConfig)> {
    let mut out = vec![(Side::Target, &ctx.target.config)];
    if let Some(d) = ctx.draft.filter(|_| ctx.algorithm != Algorithm::None) {
        out.push((Side::Draft, &d.effective));
    }
    out
}

/// The sizes of every config TP splits whose unevenness is an error.
fn strict_sizes(ctx: &RuleContext) -> Result<Vec<(u64, Split)>, ConfigError> {
    let mut out = Vec::new();
    for (_, cfg) in split_configs(ctx) {
        out.extend(split_sizes(cfg)?.into_iter().filter(|s| s.3 != Split::Padded).map(|(_, _, v, split)| (v, split)));
    }
    Ok(out)
}

fn splits(sizes: &[(u64, Split)], tp: u64) -> bool {
    sizes.iter().all(|&(v, split)| split.ok(v, tp))
}

/// True when `tp` splits every head count and MLP width of the launch evenly.
pub fn splits_evenly(ctx: &RuleContext, tp: u64) -> Result<bool, ConfigError> {
    Ok(splits(&strict_sizes(ctx)?, tp))
}

pub fn set_tp(id: &str, tp: u64, why: String) -> Remedy {
    Remedy::new(id, FLAG, why, vec![SpecChange::SetFlag { flag: FLAG.into(), value: tp.to_string() }])
}

/// The largest TP size below `below` (and within the GPUs present) that splits evenly.
///
/// A divisor search: an even split divides every "must divide" size, so the candidates are
/// the divisors of their gcd; with none, a kv head count's divisors or the largest common
/// multiple of them that fits. Bounded whatever the sizes and `below` are.
fn smaller_valid_tp(ctx: &RuleContext, below: u64) -> Result<Option<u64>, ConfigError> {
    let cap = ctx.gpus.count.map(u64::from).unwrap_or(u64::MAX);
    let limit = below.saturating_sub(1).min(cap);
    if limit == 0 {
        return Ok(None);
    }
    let sizes = strict_sizes(ctx)?;
    let divided = sizes.iter().filter(|s| s.1 == Split::Divided).fold(0, |g, s| divisors::gcd(g, s.0));
    let mut candidates = if divided > 0 {
        divisors::divisors(divided)
    } else {
        let kv: Vec<u64> = sizes.iter().map(|s| s.0).collect();
        let mut c: Vec<u64> = kv.iter().flat_map(|&k| divisors::divisors(k)).collect();
        if let Some(l) = kv.iter().try_fold(1u64, |acc, &k| divisors::lcm(acc, k)) {
            c.push(limit - limit % l);
        }
        c
    };
    candidates.retain(|t| (1..=limit).contains(t));
    Ok(candidates.into_iter().filter(|&t| splits(&sizes, t)).max())
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
