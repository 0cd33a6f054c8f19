//! `speculative-args` from the paged KV cache and the attention backend: SGLang's
//! `_handle_speculative_decoding` (server_args.py, 0.5.x) raises for a tree draft
//! (`--speculative-eagle-topk` > 1) with `--page-size` > 1 on any backend but flashinfer, and
//! for a tree on trtllm_mha; its chunked prefill must split into whole pages. The messages and
//! remedies are the ones replay gives when the log shows the same failure
//! (src/replay/sglang.rs), so `check` and `replay` say the same thing.

use serde_json::Value;

use crate::finding::{Evidence, Finding, Remedy, Severity};
use crate::phase::PhaseId;
use crate::preflight::spec_args::ID;
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::{Algorithm, SpecChange};

pub const TOPK_PAGE: &str = "--speculative-eagle-topk > 1 (tree drafting) with --page-size > 1 is not supported on this attention \
                             backend (0.5.2/0.5.9: flashinfer only; 0.5.23: flashinfer, fa3, triton). Some backends raise \
                             page_size by themselves (trtllm_mha to 64, FlashMLA to 64).";
pub const TOPK_TRTLLM: &str = "The trtllm_mha attention backend supports --speculative-eagle-topk 1 only.";
pub const CHUNK_PAGE: &str = "--chunked-prefill-size must be a multiple of --page-size.";

pub const PAGE_SIZE_ONE: &str = "page-size-1";
pub const TOPK_ONE: &str = "eagle-topk-1";
pub const ALIGN_CHUNK: &str = "align-chunked-prefill-size";

const TOPK: &str = "--speculative-eagle-topk";
const PAGE: &str = "--page-size";
const BACKEND: &str = "--attention-backend";
const CHUNK: &str = "--chunked-prefill-size";

fn set(id: &str, flag: &str, value: impl ToString, why: &str) -> Remedy {
    let value = value.to_string();
    Remedy::new(id, flag, format!("{why}: {flag} {value}."), vec![SpecChange::SetFlag { flag: flag.into(), value }])
}

/// Draft a chain instead of a tree.
pub fn topk_one() -> Remedy {
    set(TOPK_ONE, TOPK, 1, "Draft a chain instead of a tree")
}

/// Unpaged KV for the tree, or a chain.
pub fn page_size_or_topk() -> Vec<Remedy> {
    vec![set(PAGE_SIZE_ONE, PAGE, 1, "Keep the tree draft with unpaged KV"), topk_one()]
}

fn finding(message: &str, evidence: Vec<Evidence>, remedies: Vec<Remedy>) -> Finding {
    let mut f = Finding::new(ID, Severity::Error, PhaseId::Preflight, message.to_string());
    f.evidence = evidence;
    f.remedies = remedies;
    f
}

pub fn check(ctx: &RuleContext) -> RuleResult {
    let spec = ctx.spec;
    let ev = |flag: &str, v: Option<Value>| ctx.launch_evidence(flag, v.unwrap_or(Value::Null));
    let page = spec.page_size.unwrap_or(1);
    let backend = spec.attention_backend.as_deref();
    let mut findings = Vec::new();
    let tree = spec.speculative_eagle_topk.filter(|&k| k > 1 && ctx.algorithm != Algorithm::None);
    if let Some(k) = tree {
        let evidence = |with_page: bool| {
            let mut e = vec![ev(TOPK, Some(k.into()))];
            if with_page {
                e.push(ev(PAGE, Some(page.into())));
            }
            e.push(ev(BACKEND, backend.map(Value::from)));
            e
        };
        if backend == Some("trtllm_mha") {
            findings.push(finding(TOPK_TRTLLM, evidence(false), vec![topk_one()]));
        } else if page > 1 && backend != Some("flashinfer") {
            findings.push(finding(TOPK_PAGE, evidence(true), page_size_or_topk()));
        }
    }
    if let Some(chunk) = spec.chunked_prefill_size.filter(|&c| c > 0 && page > 1 && c % i64::from(page) != 0) {
        let aligned = (chunk / i64::from(page)).max(1) * i64::from(page);
        findings.push(finding(
            CHUNK_PAGE,
            vec![ev(CHUNK, Some(chunk.into())), ev(PAGE, Some(page.into()))],
            vec![set(ALIGN_CHUNK, CHUNK, aligned, "Whole pages per prefill chunk")],
        ));
    }
    Ok(findings)
}
