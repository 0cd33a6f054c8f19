//! `tp-divisibility` for MoE experts: `--ep-size` spreads a MoE model's routed experts over
//! groups of ranks inside the TP group, and the `tp / ep` ranks that share an expert split its
//! MLP width (SGLang's `moe_tp_size`). SGLang's own checks (failure_catalogue §J) say "tp_size
//! {tp} must be divisible by ep_size {ep}" and "moe_intermediate_size {m} must be divisible by
//! moe_tp_size ({moe_tp}) which is tp_size ({tp}) divided by moe_ep_size ({ep})."; the
//! drafter runs in the target's TP group, so a MoE drafter (an MTP layer) splits the same way.
//! On a dense model `--ep-size` has nothing to spread: a warning.
//!
//! The remedy moves `--ep-size` to the nearest size that splits: the smallest above the given
//! one (there is always one, ep = tp, that gives each expert's width to one rank), else the
//! largest below it.

use serde_json::Value;

use crate::finding::{Finding, Remedy, Severity, Side};
use crate::phase::PhaseId;
use crate::preflight::divisors;
use crate::preflight::parallel::{set_tp, smaller_valid_tp, split_configs, Experts, ID, REDUCE_TP};
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::SpecChange;

pub const FIT_EP: &str = "fit-ep-size";
pub const UNSET_EP: &str = "unset-ep-size";

const FLAG: &str = "--ep-size";

pub fn check(ctx: &RuleContext) -> RuleResult {
    let (tp, ep) = (u64::from(ctx.spec.tp()), u64::from(ctx.spec.ep()));
    let mut moe = Vec::new();
    for (side, cfg) in split_configs(ctx) {
        moe.extend(Experts::read(cfg)?.map(|e| (side, e)));
    }
    if moe.is_empty() {
        return Ok(dense(ctx, ep).into_iter().collect());
    }
    let launch = [ctx.launch_evidence("--tp-size", tp), ctx.launch_evidence(FLAG, ep)];
    let fit = fitting_ep(&moe, tp, ep).map(|e| {
        let why = format!(
            "Use --ep-size {e}: it divides --tp-size {tp}, and each expert's width splits over the {} ranks that share it.",
            tp / e
        );
        Remedy::new(FIT_EP, FLAG, why, vec![SpecChange::SetFlag { flag: FLAG.into(), value: e.to_string() }])
    });
    if tp % ep != 0 {
        let mut f = Finding::new(
            ID,
            Severity::Error,
            PhaseId::Preflight,
            format!("tp_size {tp} must be divisible by ep_size {ep}: the expert-parallel groups split the tensor-parallel ranks."),
        );
        f.evidence = launch.to_vec();
        f.evidence.extend(moe.iter().map(|(side, e)| ctx.field_evidence(*side, &e.count)));
        f.remedies.extend(fit);
        return Ok(vec![f]);
    }
    let moe_tp = tp / ep;
    let mut findings = Vec::new();
    for (side, experts) in &moe {
        let Some(width) = experts.width.as_ref().filter(|w| w.value % moe_tp != 0) else { continue };
        let whose = if *side == Side::Draft { " The drafter's experts split so too: it runs in the target's TP group." } else { "" };
        let mut f = Finding::new(
            ID,
            Severity::Error,
            PhaseId::TargetLoad,
            format!(
                "moe_intermediate_size {} must be divisible by moe_tp_size ({moe_tp}) which is tp_size ({tp}) divided by \
                 moe_ep_size ({ep}).{whose}",
                width.value
            ),
        );
        f.evidence = launch.to_vec();
        f.evidence.push(ctx.field_evidence(*side, width));
        f.remedies.extend(fit.clone());
        if let Some(t) = smaller_valid_tp(ctx, tp)? {
            f = f.with_remedy(set_tp(REDUCE_TP, t, format!("Use --tp-size {t}, the largest size below {tp} that splits evenly.")));
        }
        findings.push(f);
    }
    Ok(findings)
}

/// The EP size nearest to `ep` that splits every MoE config over `tp` ranks.
fn fitting_ep(moe: &[(Side, Experts)], tp: u64, ep: u64) -> Option<u64> {
    let fits: Vec<u64> = divisors::divisors(tp).into_iter().filter(|&e| e != ep && moe.iter().all(|(_, x)| x.split(tp, e))).collect();
    fits.iter().copied().find(|&e| e > ep).or_else(|| fits.iter().copied().rfind(|&e| e < ep))
}

/// `--ep-size` above 1 on a launch without experts.
fn dense(ctx: &RuleContext, ep: u64) -> Option<Finding> {
    if ep == 1 {
        return None;
    }
    let finding = Finding::new(
        ID,
        Severity::Warning,
        PhaseId::Preflight,
        format!(
            "--ep-size {ep} has no effect: the target is dense (no n_routed_experts, num_experts or num_local_experts), and \
             expert parallelism spreads only routed experts."
        ),
    )
    .with_evidence(ctx.launch_evidence(FLAG, ep))
    .with_evidence(ctx.target_evidence(&ctx.target.config.pointer_of("n_routed_experts"), Value::Null))
    .with_remedy(Remedy::new(UNSET_EP, FLAG, format!("Remove {FLAG}."), vec![SpecChange::UnsetFlag { flag: FLAG.into() }]));
    Some(finding)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::finding::Evidence;
    use crate::preflight::fixture::{applied, gpus, testdata, Configs};
    use crate::spec::{Algorithm, LaunchSpec};

    /// A tiny real Kimi-K2.5 (MLA + MoE, under text_config): 4 heads, 8 experts of width 32.
    const KIMI: &str = "testdata/deepseek/kimi-k25";

    fn spec(tp: u32, ep: Option<u32>) -> LaunchSpec {
        LaunchSpec { tp_size: Some(tp), ep_size: ep, ..LaunchSpec::default() }
    }

    fn launch(flag: &str, value: u64) -> Evidence {
        Evidence::new(Side::Launch, "launch flags", flag, value)
    }

    #[test]
    fn tp_must_hold_whole_ep_groups() {
        let kimi = Configs::new(testdata(KIMI), None);
        let s = spec(4, Some(3));
        let f = kimi.check(check, &s, &gpus(8)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].id.as_str(), f[0].severity, f[0].phase), (ID, Severity::Error, PhaseId::Preflight));
        assert_eq!(f[0].message, "tp_size 4 must be divisible by ep_size 3: the expert-parallel groups split the tensor-parallel ranks.");
        assert_eq!(
            f[0].evidence,
            [
                launch("--tp-size", 4),
                launch("--ep-size", 3),
                Evidence::new(Side::Target, "target/config.json", "/text_config/n_routed_experts", 8)
            ]
        );
        assert_eq!(f[0].remedies.len(), 1);
        assert_eq!(f[0].remedies[0].changes, [SpecChange::SetFlag { flag: FLAG.into(), value: "4".into() }]);
        let fixed = applied(&s, &f[0], FIT_EP);
        assert_eq!(fixed.ep_size, Some(4));
        assert_eq!(kimi.check(check, &fixed, &gpus(8)).unwrap(), []);
        // An EP size above the TP size: the largest that divides it.
        let f = kimi.check(check, &spec(4, Some(16)), &gpus(8)).unwrap();
        assert_eq!(f[0].remedies[0].changes, [SpecChange::SetFlag { flag: FLAG.into(), value: "4".into() }]);
    }

    #[test]
    fn each_experts_width_splits_over_the_ranks_that_share_it() {
        // moe_intermediate_size 24 over tp 16 / ep 2 = 8 ranks: 24 % 8 == 0; over 16 ranks not.
        let target = json!({"num_attention_heads": 16, "n_routed_experts": 64, "moe_intermediate_size": 24});
        let configs = Configs::new(target, None);
        assert_eq!(configs.check(check, &spec(16, Some(2)), &gpus(16)).unwrap(), []);
        let s = spec(16, None);
        let f = configs.check(check, &s, &gpus(16)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].severity, f[0].phase), (Severity::Error, PhaseId::TargetLoad));
        assert_eq!(
            f[0].message,
            "moe_intermediate_size 24 must be divisible by moe_tp_size (16) which is tp_size (16) divided by moe_ep_size (1)."
        );
        assert_eq!(
            f[0].evidence,
            [
                launch("--tp-size", 16),
                launch("--ep-size", 1),
                Evidence::new(Side::Target, "target/config.json", "/moe_intermediate_size", 24)
            ]
        );
        let remedies: Vec<(&str, &SpecChange)> = f[0].remedies.iter().map(|r| (r.id.as_str(), &r.changes[0])).collect();
        let set = |flag: &str, v: &str| SpecChange::SetFlag { flag: flag.into(), value: v.into() };
        assert_eq!(remedies, [(FIT_EP, &set("--ep-size", "2")), (REDUCE_TP, &set("--tp-size", "8"))]);
        for id in [FIT_EP, REDUCE_TP] {
            assert_eq!(configs.check(check, &applied(&s, &f[0], id), &gpus(16)).unwrap(), [], "{id}");
        }
    }

    #[test]
    fn a_moe_drafter_splits_in_the_targets_tp_group() {
        let dense = json!({"num_attention_heads": 8});
        let mtp = json!({"architectures": ["DeepseekV3ForCausalLM"], "n_routed_experts": 8, "moe_intermediate_size": 12});
        let configs = Configs::new(dense, Some(mtp));
        let s = LaunchSpec { speculative_algorithm: Some(Algorithm::Eagle), ..spec(8, None) };
        let f = configs.check(check, &s, &gpus(8)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].message.ends_with("The drafter's experts split so too: it runs in the target's TP group."), "{}", f[0].message);
        assert_eq!(f[0].evidence[2], Evidence::new(Side::Draft, "draft/config.json", "/moe_intermediate_size", 12));
    }

    #[test]
    fn ep_on_a_dense_target_has_no_effect() {
        let configs = Configs::new(json!({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 8}), None);
        assert_eq!(configs.check(check, &spec(8, Some(1)), &gpus(8)).unwrap(), []);
        let s = spec(8, Some(8));
        let f = configs.check(check, &s, &gpus(8)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].id.as_str(), f[0].severity), (ID, Severity::Warning));
        assert!(f[0].message.starts_with("--ep-size 8 has no effect: the target is dense"), "{}", f[0].message);
        assert_eq!(
            f[0].evidence,
            [launch("--ep-size", 8), Evidence::new(Side::Target, "target/config.json", "/n_routed_experts", Value::Null)]
        );
        assert_eq!(f[0].remedies[0].changes, [SpecChange::UnsetFlag { flag: FLAG.into() }]);
        assert_eq!(configs.check(check, &applied(&s, &f[0], UNSET_EP), &gpus(8)).unwrap(), []);
    }
}
