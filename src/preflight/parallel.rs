//! `tp-divisibility`: tensor parallelism splits heads, kv heads and MLP widths evenly, and
//! needs one GPU per rank for each copy of the model.
//!
//! SGLang's checks are bare asserts in the model constructors (`total_num_heads % tp_size ==
//! 0`; kv heads divide tp or tp divides them; `ensure_divisibility` for linear layers), and the
//! drafter runs in the target's TP group, so a drafter's heads must divide too
//! (failure_catalogue §1.4-J). SGLang pads the vocab to the TP size, so an odd vocab is a
//! warning. A MoE config's expert width splits over `tp / ep` ranks instead, which
//! expert_parallel.rs reports; the TP sizes proposed here respect it too. Without
//! `--enable-dp-attention` every `--dp-size` rank runs its own copy on `--tp-size` GPUs.

use serde_json::json;

use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::model::config::{ConfigError, Field, ModelConfig};
use crate::phase::PhaseId;
use crate::preflight::{divisors, RuleContext, RuleResult};
use crate::spec::SpecChange;

pub const ID: &str = "tp-divisibility";
pub const REDUCE_TP: &str = "reduce-tp-size";
pub const REDUCE_DP: &str = "reduce-dp-size";

const FLAG: &str = "--tp-size";
const DP_FLAG: &str = "--dp-size";

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

const SPLITS: [(&str, Split); 4] = [
    ("num_attention_heads", Split::Divided),
    ("num_key_value_heads", Split::DividedOrDivides),
    ("intermediate_size", Split::Divided),
    ("vocab_size", Split::Padded),
];

/// A MoE config's routed experts and the MLP width of each.
pub struct Experts {
    pub count: Field<u64>,
    pub width: Option<Field<u64>>,
}

impl Experts {
    /// The experts of a MoE config, None for a dense one. `moe_intermediate_size` is read
    /// for every config, so a malformed value is reported wherever it sits.
    pub fn read(cfg: &ModelConfig) -> Result<Option<Experts>, ConfigError> {
        let width = cfg.u64("moe_intermediate_size")?.filter(|f| f.value > 0);
        Ok(cfg.routed_experts()?.map(|count| Experts { count, width }))
    }

    /// True when `ep` divides `tp` and each expert's width splits over the `tp / ep` ranks
    /// that share an expert (SGLang's `moe_tp_size`).
    pub fn split(&self, tp: u64, ep: u64) -> bool {
        tp % ep == 0 && self.width.as_ref().is_none_or(|w| w.value % (tp / ep) == 0)
    }
}

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
pub fn split_configs<'a>(ctx: &RuleContext<'a>) -> Vec<(Side, &'a ModelConfig)> {
    let mut out = vec![(Side::Target, &ctx.target.config)];
    out.extend(ctx.running_draft().map(|d| (Side::Draft, &d.effective)));
    out
}

/// What a TP size must split evenly in every config TP splits: the sizes whose unevenness
/// is an error, and the experts (over `--ep-size`).
struct Strict {
    sizes: Vec<(u64, Split)>,
    experts: Vec<Experts>,
    ep: u64,
}

impl Strict {
    fn read(ctx: &RuleContext) -> Result<Strict, ConfigError> {
        let (mut sizes, mut experts) = (Vec::new(), Vec::new());
        for (_, cfg) in split_configs(ctx) {
            sizes.extend(split_sizes(cfg)?.into_iter().filter(|s| s.3 != Split::Padded).map(|(_, _, v, split)| (v, split)));
            experts.extend(Experts::read(cfg)?);
        }
        Ok(Strict { sizes, experts, ep: u64::from(ctx.spec.ep()) })
    }

    fn splits(&self, tp: u64) -> bool {
        self.sizes.iter().all(|&(v, split)| split.ok(v, tp)) && self.experts.iter().all(|e| e.split(tp, self.ep))
    }
}

/// True when `tp` splits every head count, MLP width and expert width of the launch evenly.
pub fn splits_evenly(ctx: &RuleContext, tp: u64) -> Result<bool, ConfigError> {
    Ok(Strict::read(ctx)?.splits(tp))
}

/// The largest TP size for which the visible GPUs hold every copy of the model (unbounded
/// when the count is unknown).
pub fn tp_capacity(ctx: &RuleContext) -> u64 {
    ctx.gpus.count.map_or(u64::MAX, |count| u64::from(count) / u64::from(ctx.spec.replicas()))
}

pub fn set_tp(id: &str, tp: u64, why: String) -> Remedy {
    Remedy::new(id, FLAG, why, vec![SpecChange::SetFlag { flag: FLAG.into(), value: tp.to_string() }])
}

/// The largest TP size below `below` (and within the GPUs present) that splits evenly.
///
/// A divisor search: an even split divides every "must divide" size, so the candidates are
/// the divisors of their gcd; with none, a kv head count's divisors or the largest common
/// multiple of them that fits. Bounded whatever the sizes and `below` are.
pub fn smaller_valid_tp(ctx: &RuleContext, below: u64) -> Result<Option<u64>, ConfigError> {
    let limit = below.saturating_sub(1).min(tp_capacity(ctx));
    if limit == 0 {
        return Ok(None);
    }
    let strict = Strict::read(ctx)?;
    let sizes = &strict.sizes;
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
    Ok(candidates.into_iter().filter(|&t| strict.splits(t)).max())
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
    findings.extend(gpu_count(ctx, tp_ev)?);
    Ok(findings)
}

/// The GPUs the launch needs, `--tp-size` for each copy of the model, against those visible.
fn gpu_count(ctx: &RuleContext, tp_ev: Evidence) -> Result<Option<Finding>, ConfigError> {
    let tp = u64::from(ctx.spec.tp());
    let replicas = u64::from(ctx.spec.replicas());
    let needed = ctx.spec.gpus_needed();
    let (launch, why) = if replicas > 1 {
        let why = " Without --enable-dp-attention every --dp-size rank runs its own copy of the model on --tp-size GPUs.";
        (format!("--tp-size {tp} × --dp-size {replicas}"), why)
    } else {
        (format!("--tp-size {tp}"), "")
    };
    let mut evidence = vec![tp_ev];
    evidence.extend((replicas > 1).then(|| ctx.launch_evidence(DP_FLAG, replicas)));
    let source = &ctx.gpus.source;
    let f = match ctx.gpus.count {
        Some(count) if u64::from(count) < needed => {
            let mut f = Finding::new(
                ID,
                Severity::Error,
                PhaseId::TargetLoad,
                format!("{launch} needs {needed} GPUs, but {count} are visible ({source}).{why}"),
            );
            f.evidence = evidence;
            f = f.with_evidence(Evidence::new(Side::Launch, "GPU inventory", "gpus", json!(count)));
            if let Some(t) = smaller_valid_tp(ctx, tp)? {
                let fits = if replicas > 1 {
                    format!("{replicas} copies on {t} GPUs each fit the {count} GPUs, and it splits evenly")
                } else {
                    format!("it fits the {count} GPUs and splits evenly")
                };
                f = f.with_remedy(set_tp(REDUCE_TP, t, format!("Use --tp-size {t}: {fits}.")));
            }
            let fitting = u64::from(count) / tp;
            if replicas > 1 && fitting > 0 {
                let why = format!("Use --dp-size {fitting}: {fitting} copies of the model on {tp} GPUs each fit the {count} GPUs.");
                f = f.with_remedy(Remedy::new(
                    REDUCE_DP,
                    DP_FLAG,
                    why,
                    vec![SpecChange::SetFlag { flag: DP_FLAG.into(), value: fitting.to_string() }],
                ));
            }
            f
        }
        None if needed > 1 => {
            let mut f = Finding::new(
                ID,
                Severity::Info,
                PhaseId::TargetLoad,
                format!("{launch} was not checked against the GPUs present: {source}."),
            );
            f.evidence = evidence;
            f
        }
        _ => return Ok(None),
    };
    Ok(Some(f))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::preflight::fixture::{applied, gpus, Configs};
    use crate::preflight::gpu::GpuInventory;
    use crate::spec::LaunchSpec;

    fn tp_dp(tp: u32, dp: u32) -> LaunchSpec {
        LaunchSpec { tp_size: Some(tp), dp_size: Some(dp), ..LaunchSpec::default() }
    }

    fn remedies(f: &Finding) -> Vec<(&str, &SpecChange)> {
        f.remedies.iter().map(|r| (r.id.as_str(), &r.changes[0])).collect()
    }

    fn set(flag: &str, value: &str) -> SpecChange {
        SpecChange::SetFlag { flag: flag.into(), value: value.into() }
    }

    #[test]
    fn each_dp_replica_needs_its_own_gpus() {
        let configs = Configs::new(json!({"num_attention_heads": 8}), None);
        let s = tp_dp(4, 4);
        let f = configs.check(check, &s, &gpus(8)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].id.as_str(), f[0].severity), (ID, Severity::Error));
        assert_eq!(
            f[0].message,
            "--tp-size 4 × --dp-size 4 needs 16 GPUs, but 8 are visible (8 test GPUs). Without --enable-dp-attention every \
             --dp-size rank runs its own copy of the model on --tp-size GPUs."
        );
        let launch = |flag: &str, v: u64| Evidence::new(Side::Launch, "launch flags", flag, v);
        assert_eq!(
            f[0].evidence,
            [launch("--tp-size", 4), launch("--dp-size", 4), Evidence::new(Side::Launch, "GPU inventory", "gpus", json!(8))]
        );
        assert_eq!(remedies(&f[0]), [(REDUCE_TP, &set("--tp-size", "2")), (REDUCE_DP, &set("--dp-size", "2"))]);
        for id in [REDUCE_TP, REDUCE_DP] {
            assert_eq!(configs.check(check, &applied(&s, &f[0], id), &gpus(8)).unwrap(), [], "{id}");
        }
        // DP attention keeps its ranks inside the TP group.
        let inside = LaunchSpec { enable_dp_attention: true, ..s.clone() };
        assert_eq!(configs.check(check, &inside, &gpus(4)).unwrap(), []);
        assert_eq!(configs.check(check, &tp_dp(4, 2), &gpus(8)).unwrap(), []);
        let f = configs.check(check, &s, &GpuInventory::unknown("no NVML")).unwrap();
        assert_eq!(
            (f[0].severity, f[0].message.as_str()),
            (Severity::Info, "--tp-size 4 × --dp-size 4 was not checked against the GPUs present: no NVML.")
        );
    }

    #[test]
    fn a_smaller_tp_also_splits_the_experts_over_the_ep_size() {
        // 24 heads split over 8 ranks, but 12-wide experts do not (expert_parallel.rs says so).
        let configs = Configs::new(json!({"num_attention_heads": 24, "n_routed_experts": 8, "moe_intermediate_size": 12}), None);
        let f = configs.check(check, &tp_dp(24, 1), &gpus(8)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].message.starts_with("--tp-size 24 needs 24 GPUs, but 8 are visible"), "{}", f[0].message);
        assert_eq!(remedies(&f[0]), [(REDUCE_TP, &set("--tp-size", "6"))]);
        // Over 2 EP groups the 8 ranks give each expert 4: 12 splits.
        let ep = LaunchSpec { ep_size: Some(2), ..tp_dp(24, 1) };
        assert_eq!(remedies(&configs.check(check, &ep, &gpus(8)).unwrap()[0]), [(REDUCE_TP, &set("--tp-size", "8"))]);
    }
}
