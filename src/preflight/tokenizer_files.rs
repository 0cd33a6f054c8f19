//! The tokenizer facts preflight compares, read from `tokenizer.json`,
//! `tokenizer_config.json` and `generation_config.json` as plain JSON.
//!
//! `tokenizer.json` can be megabytes, so its vocab is summarised while it streams through the
//! parser (entry count, largest id, an order-independent fingerprint of the token → id pairs)
//! instead of being held.

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::Path;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use crate::model::open;
use crate::preflight::inputs::{read_json, InputError};

/// A summary of a `tokenizer.json` vocabulary (model vocab plus added tokens).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VocabSummary {
    pub entries: u64,
    /// The largest token id + 1 (the id space the tokenizer can emit).
    pub id_space: u64,
    /// Wrapping sum of a hash per (token, id): equal vocabularies give equal fingerprints
    /// whatever the order of the file.
    pub fingerprint: u64,
}

impl VocabSummary {
    fn add(&mut self, token: &str, id: u64) {
        let mut h = DefaultHasher::new();
        (token, id).hash(&mut h);
        self.entries += 1;
        self.id_space = self.id_space.max(id.saturating_add(1));
        self.fingerprint = self.fingerprint.wrapping_add(h.finish());
    }
}

/// `model.vocab` is a map (BPE, WordPiece, WordLevel: token → id) or a list (Unigram:
/// `[piece, score]`, id = position).
struct ModelVocab(VocabSummary);

impl<'de> Deserialize<'de> for ModelVocab {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ModelVocab;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a token → id map or a list of [piece, score]")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ModelVocab, A::Error> {
                let mut s = VocabSummary::default();
                while let Some((token, id)) = map.next_entry::<std::borrow::Cow<str>, u64>()? {
                    s.add(&token, id);
                }
                Ok(ModelVocab(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ModelVocab, A::Error> {
                let mut s = VocabSummary::default();
                let mut id = 0u64;
                while let Some((piece, _score)) = seq.next_element::<(std::borrow::Cow<str>, IgnoredAny)>()? {
                    s.add(&piece, id);
                    id += 1;
                }
                Ok(ModelVocab(s))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
struct AddedToken {
    id: u64,
    content: String,
}

#[derive(Deserialize)]
struct ModelSection {
    vocab: Option<ModelVocab>,
}

#[derive(Deserialize)]
struct TokenizerJson {
    #[serde(default)]
    added_tokens: Vec<AddedToken>,
    model: Option<ModelSection>,
}

/// Summarise a `tokenizer.json`.
pub fn vocab_summary(file: &Path) -> Result<VocabSummary, InputError> {
    let parsed: TokenizerJson = read_json(file, open::TOKENIZER_LIMIT)?;
    let mut summary = parsed.model.and_then(|m| m.vocab).map(|v| v.0).unwrap_or_default();
    for t in &parsed.added_tokens {
        summary.add(&t.content, t.id);
    }
    Ok(summary)
}

/// A special token as `tokenizer_config.json` writes it: a string or `{"content": ...}`.
pub fn special_token(config: &Value, key: &str) -> Option<String> {
    match config.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// bos/eos ids as `generation_config.json` (or config.json) writes them: an id or a list.
pub fn token_ids(config: &Value, key: &str) -> Option<Vec<u64>> {
    match config.get(key)? {
        Value::Array(a) => Some(a.iter().filter_map(Value::as_u64).collect()),
        v => v.as_u64().map(|id| vec![id]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_and_list_vocabs_summarise_the_same_pairs() {
        let dir = tempfile::tempdir().unwrap();
        let bpe = dir.path().join("bpe.json");
        std::fs::write(
            &bpe,
            r#"{"added_tokens":[{"id":3,"content":"<s>","special":true}],"model":{"type":"BPE","vocab":{"a":0,"b":1,"c\"":2}}}"#,
        )
        .unwrap();
        let reordered = dir.path().join("reordered.json");
        std::fs::write(&reordered, r#"{"model":{"vocab":{"c\"":2,"b":1,"a":0}},"added_tokens":[{"id":3,"content":"<s>"}]}"#).unwrap();
        let unigram = dir.path().join("uni.json");
        std::fs::write(&unigram, r#"{"added_tokens":[{"id":3,"content":"<s>"}],"model":{"vocab":[["a",-1.0],["b",-2.5],["c\"",0]]}}"#)
            .unwrap();
        let a = vocab_summary(&bpe).unwrap();
        assert_eq!((a.entries, a.id_space), (4, 4));
        assert_eq!(vocab_summary(&reordered).unwrap(), a);
        assert_eq!(vocab_summary(&unigram).unwrap(), a);
        let other = dir.path().join("other.json");
        std::fs::write(&other, r#"{"model":{"vocab":{"a":0,"b":2,"c\"":1}},"added_tokens":[{"id":3,"content":"<s>"}]}"#).unwrap();
        let b = vocab_summary(&other).unwrap();
        assert_eq!((b.entries, b.id_space), (4, 4));
        assert_ne!(b.fingerprint, a.fingerprint);
    }

    #[test]
    fn bad_tokenizer_json_names_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokenizer.json");
        std::fs::write(&f, "{\"model\": {\"vocab\": {\"a\": \"zero\"}}}").unwrap();
        let e = vocab_summary(&f).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: invalid JSON at line 1, column", f.display())), "{e}");
    }

    #[test]
    fn special_tokens_in_both_spellings() {
        let v: Value = serde_json::from_str(r#"{"bos_token":"<s>","eos_token":{"content":"</s>","lstrip":false},"x":1}"#).unwrap();
        assert_eq!(special_token(&v, "bos_token").as_deref(), Some("<s>"));
        assert_eq!(special_token(&v, "eos_token").as_deref(), Some("</s>"));
        assert_eq!(special_token(&v, "x"), None);
        let g: Value = serde_json::from_str(r#"{"bos_token_id":1,"eos_token_id":[2,3]}"#).unwrap();
        assert_eq!(token_ids(&g, "bos_token_id"), Some(vec![1]));
        assert_eq!(token_ids(&g, "eos_token_id"), Some(vec![2, 3]));
    }
}
