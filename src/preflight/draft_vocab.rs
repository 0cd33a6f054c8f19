//! `draft-vocab-map`: the EAGLE-3 drafter's reduced vocab and its map to target ids.
//!
//! `draft_vocab_size` (Vd) is the rows of `lm_head` and the length of `d2t`, whose entries
//! are offsets (`target_id = i + d2t[i]`). Absent, Vd is the full vocab and SGLang takes the
//! target's lm_head. A tied lm_head with Vd < V has V rows against Vd map entries: device-side
//! index errors during draft graph capture (AngelSlim#16). Without `d2t`, draft ids are used
//! as target ids. (eagle3_spec §1.2–1.3, failure_catalogue §1.4-G.)

use safetensors::Dtype;
use serde_json::json;

use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::phase::PhaseId;
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::SpecChange;

pub const ID: &str = "draft-vocab-map";
pub const UNTIE: &str = "untie-draft-lm-head";

pub fn check(ctx: &RuleContext) -> RuleResult {
    let Some(draft) = ctx.eagle3_draft() else { return Ok(Vec::new()) };
    let cfg = &draft.effective;
    let Some(vd) = cfg.draft_vocab_size()? else { return Ok(Vec::new()) };
    let full = match ctx.target.config.vocab_size()? {
        Some(v) => v,
        None => match cfg.vocab_size()? {
            Some(v) => v,
            None => return Ok(Vec::new()),
        },
    };
    let vd_ev = ctx.field_evidence(Side::Draft, &vd);
    let mut findings = Vec::new();
    let mut push = |message: String, evidence: Vec<Evidence>| {
        let mut f = Finding::new(ID, Severity::Error, PhaseId::DrafterLoad, message).with_evidence(vd_ev.clone());
        f.evidence.extend(evidence);
        findings.push(f);
    };
    if vd.value > full.value {
        push(
            format!("draft_vocab_size {} is larger than the target vocab {}: the map cannot be one-to-one.", vd.value, full.value),
            vec![ctx.field_evidence(Side::Target, &full)],
        );
    }
    let tensor_ev = |t: &crate::preflight::inputs::TensorInfo, name: &str| Evidence::new(Side::Draft, t.file.clone(), name, json!(t.shape));
    let d2t = draft.files.tensor("d2t");
    if let Some(t) = &d2t {
        let len = t.shape.iter().product::<usize>() as u64;
        if t.shape.len() != 1 || len != vd.value {
            push(format!("d2t has shape {:?}; it must hold draft_vocab_size = {} offsets.", t.shape, vd.value), vec![tensor_ev(t, "d2t")]);
        }
        if !matches!(t.dtype, Dtype::I64 | Dtype::I32) {
            push(format!("d2t is {:?}; it holds integer offsets (I64).", t.dtype), vec![tensor_ev(t, "d2t")]);
        }
    } else if draft.files.checkpoint.is_some() && vd.value < full.value {
        push(
            format!(
                "draft_vocab_size {} is below the target vocab {}, but the weights have no d2t: draft ids would be \
                 used as target ids (wrong tokens, acceptance near zero).",
                vd.value, full.value
            ),
            vec![Evidence::new(Side::Draft, draft.files.dir.display().to_string(), "d2t", json!(null))],
        );
    }
    let lm_head = draft.files.tensor("lm_head.weight");
    if let Some(t) = lm_head.as_ref().filter(|t| t.shape.first().map(|r| *r as u64) != Some(vd.value)) {
        push(
            format!("lm_head.weight has shape {:?}; its rows must be draft_vocab_size = {}.", t.shape, vd.value),
            vec![tensor_ev(t, "lm_head.weight")],
        );
    }
    let tied = cfg.bool("tie_word_embeddings").filter(|t| t.value);
    if let Some(tied) = tied.filter(|_| vd.value < full.value) {
        let untie_fits = draft.files.checkpoint.is_none() || lm_head.is_some_and(|t| t.shape.first().map(|r| *r as u64) == Some(vd.value));
        let mut f = Finding::new(
            ID,
            Severity::Error,
            PhaseId::DraftGraphCapture,
            format!(
                "tie_word_embeddings is true with draft_vocab_size {} < vocab {}: SGLang uses the embedding (vocab \
                 rows) as lm_head while the map has {} entries, and the draft graph capture hits a device-side \
                 index-out-of-bounds (AngelSlim#16).",
                vd.value, full.value, vd.value
            ),
        )
        .with_evidence(vd_ev.clone())
        .with_evidence(ctx.field_evidence(Side::Draft, &tied));
        if untie_fits {
            f = f.with_remedy(Remedy::new(
                UNTIE,
                "/tie_word_embeddings",
                "Use the drafter's own lm_head (draft_vocab_size rows): tie_word_embeddings = false, in memory.",
                vec![SpecChange::OverrideDraftConfig { key: tied.pointer.clone(), value: json!(false) }],
            ));
        }
        findings.push(f);
    }
    Ok(findings)
}
