//! `speculative-args`: SGLang's constraints among `--speculative-num-steps` (S),
//! `--speculative-eagle-topk` (K) and `--speculative-num-draft-tokens` (N)
//! (failure_catalogue §1.4-H).
//!
//! - S unset while K or N is set: SGLang's auto-choice hits a bare `assert` (sglang#5673).
//! - With K = 1 the chain holds S drafted tokens plus the root: N = S + 1. SGLang rewrites N
//!   with a warning.
//! - With K > 1 the tree has at most K + (S-1)·K² candidates, so N beyond 1 + that has empty
//!   verify slots (advisory: SGLang does not check it).
//! - Spec v2 (`SGLANG_ENABLE_SPEC_V2`, 0.5.9) only supports K = 1.

use serde_json::{json, Value};

use crate::finding::{Evidence, Finding, Remedy, Severity};
use crate::phase::PhaseId;
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::{Algorithm, SpecChange};

pub const ID: &str = "speculative-args";
pub const SET_STEPS: &str = "set-speculative-num-steps";
pub const SET_DRAFT_TOKENS: &str = "set-num-draft-tokens";
pub const DEFAULTS: &str = "use-default-speculative-args";
pub const CHAIN: &str = "use-chain-drafting";

const STEPS: &str = "--speculative-num-steps";
const TOPK: &str = "--speculative-eagle-topk";
const DRAFT_TOKENS: &str = "--speculative-num-draft-tokens";
const SPEC_V2_ENV: &str = "SGLANG_ENABLE_SPEC_V2";

fn set(flag: &str, value: u64) -> SpecChange {
    SpecChange::SetFlag { flag: flag.into(), value: value.to_string() }
}

fn finding(severity: Severity, message: String, evidence: Vec<Evidence>, remedy: Remedy) -> Finding {
    let mut f = Finding::new(ID, severity, PhaseId::Preflight, message).with_remedy(remedy);
    f.evidence = evidence;
    f
}

pub fn check(ctx: &RuleContext) -> RuleResult {
    if ctx.algorithm == Algorithm::None {
        return Ok(Vec::new());
    }
    let spec = ctx.spec;
    let (s, k, n) = (
        spec.speculative_num_steps.map(u64::from),
        spec.speculative_eagle_topk.map(u64::from),
        spec.speculative_num_draft_tokens.map(u64::from),
    );
    let flag_ev = |flag: &str, v: Option<u64>| ctx.launch_evidence(flag, v.map(Value::from).unwrap_or(Value::Null));
    let all_ev = || vec![flag_ev(STEPS, s), flag_ev(TOPK, k), flag_ev(DRAFT_TOKENS, n)];
    let defaults = Remedy::new(
        DEFAULTS,
        STEPS,
        "Use SGLang's usual chain setting: 3 steps, top-k 1, 4 draft tokens.",
        vec![set(STEPS, 3), set(TOPK, 1), set(DRAFT_TOKENS, 4)],
    );
    let mut findings = Vec::new();
    if s == Some(0) || k == Some(0) || n.is_some_and(|n| n < 2) {
        findings.push(finding(
            Severity::Error,
            "Steps and top-k must be at least 1, and draft tokens at least 2 (the root plus one drafted token).".into(),
            all_ev(),
            defaults,
        ));
        return Ok(findings);
    }
    let Some(s) = s else {
        if k.is_some() || n.is_some() {
            let steps = match (k, n) {
                (None | Some(1), Some(n)) => n - 1,
                _ => 3,
            };
            findings.push(finding(
                Severity::Error,
                format!(
                    "{TOPK} or {DRAFT_TOKENS} is set without {STEPS}: SGLang's automatic choice then fails on a bare \
                     `assert self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None` \
                     (sglang#5673). Set all three, or none."
                ),
                all_ev(),
                Remedy::new(SET_STEPS, STEPS, format!("Set {STEPS} {steps}."), vec![set(STEPS, steps)]),
            ));
        }
        return Ok(findings);
    };
    let k = k.unwrap_or(1);
    if k > 1 && spec.env_truthy(SPEC_V2_ENV) {
        let mut ev = all_ev();
        ev.push(ctx.launch_evidence(SPEC_V2_ENV, json!(spec.env.get(SPEC_V2_ENV))));
        findings.push(finding(
            Severity::Error,
            format!("{SPEC_V2_ENV} is set and top-k is {k}: SGLang 0.5.9 raises \"Spec v2 currently only supports topk = 1 for speculative decoding.\""),
            ev,
            Remedy::new(CHAIN, TOPK, format!("Draft a chain: {TOPK} 1, {DRAFT_TOKENS} {}.", s + 1), vec![set(TOPK, 1), set(DRAFT_TOKENS, s + 1)]),
        ));
    }
    match n {
        Some(n) if k == 1 && n != s + 1 => findings.push(finding(
            Severity::Warning,
            format!(
                "With top-k 1 the draft is a chain of {s} tokens plus the root, so draft tokens must be {}; SGLang \
                 rewrites {n} to {} (\"speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when \
                 speculative_eagle_topk == 1\").",
                s + 1,
                s + 1
            ),
            all_ev(),
            Remedy::new(SET_DRAFT_TOKENS, DRAFT_TOKENS, format!("Set {DRAFT_TOKENS} {}.", s + 1), vec![set(DRAFT_TOKENS, s + 1)]),
        )),
        Some(n) if k > 1 => {
            let candidates = k.saturating_add((s - 1).saturating_mul(k.saturating_mul(k)));
            let most = candidates.saturating_add(1);
            if n > most {
                findings.push(finding(
                    Severity::Warning,
                    format!(
                        "A tree of {s} steps with top-k {k} drafts at most {candidates} candidates, so at most {most} \
                         draft tokens (with the root) can be verified; {n} leaves empty verify slots."
                    ),
                    all_ev(),
                    Remedy::new(SET_DRAFT_TOKENS, DRAFT_TOKENS, format!("Set {DRAFT_TOKENS} {most}."), vec![set(DRAFT_TOKENS, most)]),
                ));
            }
        }
        _ => {}
    }
    Ok(findings)
}
