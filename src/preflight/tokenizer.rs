//! `tokenizer-mismatch`: the drafter was built for another tokenizer.
//!
//! SGLang always tokenizes with the target's tokenizer and never compares the drafter's
//! (failure_catalogue §1.4-G), so a drafter trained on another vocabulary shows up only as low
//! acceptance or index errors. Compared when both folders have the file: the `tokenizer.json`
//! vocabulary (error), and the bos/eos of `tokenizer_config.json` and
//! `generation_config.json` (warning). A STANDALONE draft is a full model, so its
//! config.json bos/eos ids are compared too; an EAGLE drafter's are often copied from another
//! template and mean nothing (eagle3_spec §1.2).

use std::path::Path;

use serde_json::{json, Value};

use crate::finding::{Evidence, Finding, Severity, Side};
use crate::model::open;
use crate::phase::PhaseId;
use crate::preflight::inputs::{read_json, InputError};
use crate::preflight::tokenizer_files::{special_token, token_ids, vocab_summary};
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::Algorithm;

pub const ID: &str = "tokenizer-mismatch";

pub fn check(ctx: &RuleContext) -> RuleResult {
    let Some(draft) = ctx.draft else { return Ok(Vec::new()) };
    let (t, d) = (&ctx.target.tokenizer, &draft.files.tokenizer);
    let mut findings = Vec::new();
    if let (Some(tf), Some(df)) = (&t.tokenizer_json, &d.tokenizer_json) {
        let (ts, ds) = (vocab_summary(tf)?, vocab_summary(df)?);
        if ts != ds {
            let how = if (ts.entries, ts.id_space) == (ds.entries, ds.id_space) {
                "the same number of tokens, but different token → id assignments".to_string()
            } else {
                format!(
                    "{} tokens over {} ids, against the target's {} tokens over {} ids",
                    ds.entries, ds.id_space, ts.entries, ts.id_space
                )
            };
            let ev = |side, file: &Path, s: &crate::preflight::tokenizer_files::VocabSummary| {
                Evidence::new(side, file.display().to_string(), "/model/vocab", json!({"entries": s.entries, "id_space": s.id_space}))
            };
            findings.push(
                Finding::new(
                    ID,
                    Severity::Error,
                    PhaseId::DrafterInit,
                    format!(
                        "The drafter's tokenizer.json has {how}. SGLang tokenizes with the target's tokenizer only, so \
                         the drafter would see token ids it was not trained on."
                    ),
                )
                .with_evidence(ev(Side::Target, tf, &ts))
                .with_evidence(ev(Side::Draft, df, &ds)),
            );
        }
    }
    let mut special = Vec::new();
    if let (Some(tf), Some(df)) = (&t.tokenizer_config, &d.tokenizer_config) {
        compare_keys(&mut special, tf, df, &["bos_token", "eos_token"], |v, k| special_token(v, k).map(Value::from))?;
    }
    if let (Some(tf), Some(df)) = (&t.generation_config, &d.generation_config) {
        compare_keys(&mut special, tf, df, &["bos_token_id", "eos_token_id"], |v, k| token_ids(v, k).map(|ids| json!(ids)))?;
    }
    if ctx.algorithm == Algorithm::Standalone {
        for key in ["bos_token_id", "eos_token_id"] {
            if let (Some(a), Some(b)) = (ctx.target.config.token_ids(key), draft.effective.token_ids(key)) {
                if a.value != b.value {
                    special.push(ctx.field_evidence(Side::Target, &a));
                    special.push(ctx.field_evidence(Side::Draft, &b));
                }
            }
        }
    }
    if !special.is_empty() {
        let keys: Vec<&str> = special.iter().step_by(2).map(|e| e.key.as_str()).collect();
        let mut f = Finding::new(
            ID,
            Severity::Warning,
            PhaseId::DrafterInit,
            format!(
                "The drafter's special tokens differ from the target's ({}). Generation stops on the target's; a \
                 drafter trained with other special tokens proposes them where the target will not.",
                keys.join(", ")
            ),
        );
        f.evidence = special;
        findings.push(f);
    }
    Ok(findings)
}

/// Append target/draft evidence pairs for the keys whose values differ.
fn compare_keys(
    out: &mut Vec<Evidence>,
    target_file: &Path,
    draft_file: &Path,
    keys: &[&str],
    read: impl Fn(&Value, &str) -> Option<Value>,
) -> Result<(), InputError> {
    let (tv, dv): (Value, Value) = (read_json(target_file, open::JSON_LIMIT)?, read_json(draft_file, open::JSON_LIMIT)?);
    for key in keys {
        if let (Some(a), Some(b)) = (read(&tv, key), read(&dv, key)) {
            if a != b {
                out.push(Evidence::new(Side::Target, target_file.display().to_string(), format!("/{key}"), a));
                out.push(Evidence::new(Side::Draft, draft_file.display().to_string(), format!("/{key}"), b));
            }
        }
    }
    Ok(())
}
