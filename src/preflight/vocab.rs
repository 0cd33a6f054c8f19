//! `vocab-mismatch`: the drafter's vocabulary is not the target's.
//!
//! An EAGLE drafter takes the target's embedding (`set_embed`) and maps its draft ids into
//! the target vocab, so its `vocab_size` must equal the target's (eagle3_spec §8.1). SGLang
//! 0.5.23 refuses a STANDALONE draft with another vocab size outright.

use serde_json::json;

use crate::finding::{Evidence, Finding, Severity, Side};
use crate::phase::PhaseId;
use crate::preflight::inputs::DRAFT_EMBED_NAMES;
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::Algorithm;

pub const ID: &str = "vocab-mismatch";

pub fn check(ctx: &RuleContext) -> RuleResult {
    let Some(draft) = ctx.draft else { return Ok(Vec::new()) };
    let Some(target_vocab) = ctx.target.config.vocab_size()? else { return Ok(Vec::new()) };
    let v = target_vocab.value;
    let consequence = if ctx.algorithm == Algorithm::Standalone {
        format!(
            "SGLang 0.5.23 refuses it: \"STANDALONE speculative decoding requires the draft model to share the same \
             vocabulary as the target model, but got target vocab_size={v} and draft vocab_size=…\"; older releases \
             silently produced wrong tokens (sglang#24051)."
        )
    } else {
        "The drafter shares the target's embedding and maps its ids into the target vocab, so a drafter trained for \
         another vocab proposes wrong tokens or indexes out of range."
            .to_string()
    };
    let mut findings = Vec::new();
    if let Some(draft_vocab) = draft.effective.vocab_size()?.filter(|d| d.value != v) {
        findings.push(
            Finding::new(
                ID,
                Severity::Error,
                PhaseId::DrafterInit,
                format!("The drafter's vocab_size is {}, the target's is {v}. {consequence}", draft_vocab.value),
            )
            .with_evidence(ctx.field_evidence(Side::Target, &target_vocab))
            .with_evidence(ctx.field_evidence(Side::Draft, &draft_vocab)),
        );
    }
    for &name in DRAFT_EMBED_NAMES {
        if let Some(embed) = draft.files.tensor(name).filter(|t| t.shape.first().map(|r| *r as u64) != Some(v)) {
            findings.push(
                Finding::new(
                    ID,
                    Severity::Error,
                    PhaseId::DrafterLoad,
                    format!(
                        "The drafter's {name} has shape {:?}: its rows should be the target's vocab_size {v}. {consequence}",
                        embed.shape
                    ),
                )
                .with_evidence(ctx.field_evidence(Side::Target, &target_vocab))
                .with_evidence(Evidence::new(Side::Draft, embed.file, name, json!(embed.shape))),
            );
        }
    }
    Ok(findings)
}
