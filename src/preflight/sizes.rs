//! Config sizes that no model can have, reported as `unreadable-input` (the launch cannot
//! be judged from them): a zero count of layers, heads, positions or hidden units, and a
//! layer count the checkpoint's tensors cannot back (which would otherwise pass `check` and
//! then fail, or worse, size an allocation, at load). Numbers past 2^64 - 1 are refused
//! by `ModelConfig::u64` itself.

use crate::finding::Side;
use crate::model::config::{ConfigError, ModelConfig, CONTEXT_LENGTH_KEYS};
use crate::preflight::inputs::{InputError, ModelFiles};
use crate::preflight::{unreadable, RuleContext, RuleResult};

/// Sizes that must be at least 1 when present.
const POSITIVE: [&str; 7] =
    ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size"];

pub fn check(ctx: &RuleContext) -> RuleResult {
    let mut sides = vec![(Side::Target, &ctx.target.config, ctx.target)];
    if let Some(d) = ctx.draft {
        sides.push((Side::Draft, &d.effective, &d.files));
    }
    let mut findings = Vec::new();
    for (side, cfg, files) in sides {
        for e in problems(cfg, files)? {
            findings.push(unreadable::finding(side, &InputError::Config(e)));
        }
    }
    Ok(findings)
}

/// Every unusable size of one config, in key order.
fn problems(cfg: &ModelConfig, files: &ModelFiles) -> Result<Vec<ConfigError>, ConfigError> {
    let mut out = Vec::new();
    for key in POSITIVE.iter().chain(CONTEXT_LENGTH_KEYS.iter()) {
        if let Err(e) = cfg.positive_u64(key) {
            out.push(e);
        }
    }
    if let Some(e) = layers_beyond_checkpoint(cfg, files)? {
        out.push(e);
    }
    Ok(out)
}

/// `num_hidden_layers` above the largest stack of `layers.N` tensors in the weights. Only
/// judged when the weights have such a stack (an EAGLE-3 `midlayer` has none).
fn layers_beyond_checkpoint(cfg: &ModelConfig, files: &ModelFiles) -> Result<Option<ConfigError>, ConfigError> {
    let Some(ck) = &files.checkpoint else { return Ok(None) };
    let Some(layers) = cfg.num_hidden_layers()? else { return Ok(None) };
    let Some((prefix, holds)) = ck.layer_stacks().into_iter().max_by_key(|(_, n)| *n) else { return Ok(None) };
    Ok((layers.value > holds as u64).then(|| {
        cfg.out_of_range(
            &layers.pointer,
            layers.value,
            format!("exceeds what this engine loads (the checkpoint holds {holds} layers, {prefix}0 to {prefix}{})", holds - 1),
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;

    #[test]
    fn zeros_and_huge_values_name_the_key() {
        let cfg = ModelConfig::from_value(
            "t/config.json",
            json!({"text_config": {"num_attention_heads": 0}, "max_position_embeddings": 0,
            "hidden_size": 4096, "vocab_size": 1e30}),
        );
        let files = ModelFiles {
            side: Side::Target,
            dir: PathBuf::from("t"),
            config: cfg.clone(),
            checkpoint: None,
            tokenizer: Default::default(),
        };
        let shown: Vec<String> = problems(&cfg, &files).unwrap().iter().map(|e| e.to_string()).collect();
        assert_eq!(
            shown,
            [
                "t/config.json: /text_config/num_attention_heads 0 is out of range: it must be at least 1",
                "t/config.json: /vocab_size 1000000000000000000000000000000 is out of range: sizes in config.json are integers from 0 to \
                 18446744073709551615 (2^64 - 1)",
                "t/config.json: /max_position_embeddings 0 is out of range: it must be at least 1",
            ]
        );
    }
}
