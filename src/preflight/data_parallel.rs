//! `tp-divisibility` for DP attention: with `--enable-dp-attention` SGLang splits the TP group
//! into `--dp-size` attention groups, so the DP size must divide the TP size
//! (`check_server_args`, failure_catalogue §J: "tp_size must be divisible by attn_dp_size").
//! Without it every DP rank runs its own copy of the model, whose GPUs parallel.rs counts.

use crate::finding::{Finding, Remedy, Severity};
use crate::phase::PhaseId;
use crate::preflight::divisors;
use crate::preflight::parallel::ID;
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::SpecChange;

pub const FIT_DP: &str = "fit-dp-size";

const FLAG: &str = "--dp-size";

pub fn check(ctx: &RuleContext) -> RuleResult {
    let (tp, dp) = (u64::from(ctx.spec.tp()), u64::from(ctx.spec.dp()));
    if !ctx.spec.enable_dp_attention || tp % dp == 0 {
        return Ok(Vec::new());
    }
    let f = Finding::new(
        ID,
        Severity::Error,
        PhaseId::Preflight,
        format!("tp_size must be divisible by attn_dp_size: --tp-size {tp} does not split into {dp} attention groups."),
    )
    .with_evidence(ctx.launch_evidence("--tp-size", tp))
    .with_evidence(ctx.launch_evidence(FLAG, dp))
    .with_evidence(ctx.launch_evidence("--enable-dp-attention", true));
    // The DP size is at least 2 here, and 1 divides every TP size.
    let d = divisors::divisors(tp).into_iter().rfind(|&d| d < dp).unwrap_or(1);
    let why = format!("Use --dp-size {d}: {d} attention groups of {} ranks each.", tp / d);
    Ok(vec![f.with_remedy(Remedy::new(FIT_DP, FLAG, why, vec![SpecChange::SetFlag { flag: FLAG.into(), value: d.to_string() }]))])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::finding::{Evidence, Side};
    use crate::preflight::fixture::{applied, gpus, Configs};
    use crate::spec::LaunchSpec;

    fn spec(tp: u32, dp: u32, attention: bool) -> LaunchSpec {
        LaunchSpec { tp_size: Some(tp), dp_size: Some(dp), enable_dp_attention: attention, ..LaunchSpec::default() }
    }

    #[test]
    fn dp_attention_splits_the_tp_group() {
        let configs = Configs::new(json!({"num_attention_heads": 8}), None);
        assert_eq!(configs.check(check, &spec(8, 4, true), &gpus(8)).unwrap(), []);
        // Replicas instead of attention groups: nothing to divide (parallel.rs counts GPUs).
        assert_eq!(configs.check(check, &spec(8, 3, false), &gpus(8)).unwrap(), []);
        let s = spec(8, 3, true);
        let f = configs.check(check, &s, &gpus(8)).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].id.as_str(), f[0].severity, f[0].phase), (ID, Severity::Error, PhaseId::Preflight));
        assert_eq!(f[0].message, "tp_size must be divisible by attn_dp_size: --tp-size 8 does not split into 3 attention groups.");
        let launch = |flag: &str, v: serde_json::Value| Evidence::new(Side::Launch, "launch flags", flag, v);
        assert_eq!(
            f[0].evidence,
            [launch("--tp-size", json!(8)), launch("--dp-size", json!(3)), launch("--enable-dp-attention", json!(true))]
        );
        assert_eq!(
            (f[0].remedies[0].id.as_str(), &f[0].remedies[0].changes[..]),
            (FIT_DP, &[SpecChange::SetFlag { flag: FLAG.into(), value: "2".into() }][..])
        );
        let fixed = applied(&s, &f[0], FIT_DP);
        assert_eq!(fixed.dp_size, Some(2));
        assert_eq!(configs.check(check, &fixed, &gpus(8)).unwrap(), []);
        // More groups than ranks: the TP size itself.
        let f = configs.check(check, &spec(4, 8, true), &gpus(8)).unwrap();
        assert_eq!(f[0].remedies[0].changes, [SpecChange::SetFlag { flag: FLAG.into(), value: "4".into() }]);
    }
}
