//! A model folder's tokenizer: `tokenizer.json` through the `tokenizers` crate, the chat
//! template of `tokenizer_config.json` rendered with minijinja (with Python string methods, as
//! HF's Jinja sandbox has them), and the stop tokens from `generation_config.json`,
//! `config.json` and `tokenizer_config.json` together.

use std::path::{Path, PathBuf};

use minijinja::{context, Environment, Error as JinjaError, ErrorKind};
use serde_json::Value;

use crate::model::open;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("{file}: cannot load the tokenizer: {reason}")]
    Load { file: PathBuf, reason: String },
    #[error("{file}: {reason}")]
    Json { file: PathBuf, reason: String },
    #[error("{file}: /chat_template: {reason}")]
    Template { file: PathBuf, reason: String },
    #[error("{file}: no chat template (tokenizer_config.json has no \"chat_template\")")]
    NoTemplate { file: PathBuf },
    #[error("tokenizer: {0}")]
    Codec(String),
}

pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    config_file: PathBuf,
    chat_template: Option<String>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    stop_ids: Vec<u32>,
}

/// An optional JSON file of the folder; present but not a regular file is an error naming it.
fn read_json(path: &Path) -> Result<Option<Value>, TokenizerError> {
    if !open::exists_in_any_form(path) {
        return Ok(None);
    }
    let text =
        open::read_text_capped(path, open::JSON_LIMIT).map_err(|e| TokenizerError::Json { file: path.into(), reason: e.to_string() })?;
    serde_json::from_str(&text).map(Some).map_err(|e| TokenizerError::Json { file: path.into(), reason: e.to_string() })
}

/// A special token given as a string or as `{"content": ...}` (older tokenizer configs).
fn token_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// Token ids as u32; an id past u32::MAX is no token (never truncated into another id).
fn ids_of(v: Option<&Value>) -> Vec<u32> {
    let id = |v: &Value| v.as_u64().and_then(|x| u32::try_from(x).ok());
    match v {
        Some(Value::Array(a)) => a.iter().filter_map(id).collect(),
        Some(v) => id(v).into_iter().collect(),
        None => Vec::new(),
    }
}

impl TextTokenizer {
    pub fn load_dir(dir: &Path) -> Result<TextTokenizer, TokenizerError> {
        let file = dir.join("tokenizer.json");
        let load_err = |reason: String| TokenizerError::Load { file: file.clone(), reason };
        let bytes = open::read_capped(&file, open::TOKENIZER_LIMIT).map_err(|e| load_err(e.to_string()))?;
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| load_err(e.to_string()))?;
        let config_file = dir.join("tokenizer_config.json");
        let tk_cfg = read_json(&config_file)?.unwrap_or(Value::Null);
        let chat_template = match tk_cfg.get("chat_template") {
            Some(Value::String(s)) => Some(s.clone()),
            // A list of named templates: use "default".
            Some(Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
            _ => None,
        };
        let bos_token = token_text(tk_cfg.get("bos_token"));
        let eos_token = token_text(tk_cfg.get("eos_token"));
        let mut stop_ids = Vec::new();
        for name in ["generation_config.json", "config.json"] {
            if let Some(v) = read_json(&dir.join(name))? {
                stop_ids.extend(ids_of(v.get("eos_token_id")));
            }
        }
        if let Some(id) = eos_token.as_deref().and_then(|t| inner.token_to_id(t)) {
            stop_ids.push(id);
        }
        stop_ids.sort_unstable();
        stop_ids.dedup();
        Ok(TextTokenizer { inner, config_file, chat_template, bos_token, eos_token, stop_ids })
    }

    /// Token ids that end generation.
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Encode; special tokens of the tokenizer's post-processor (a BOS) are added unless the
    /// text already came from the chat template.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        let enc = self.inner.encode(text, add_special_tokens).map_err(|e| TokenizerError::Codec(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner.decode(ids, true).map_err(|e| TokenizerError::Codec(e.to_string()))
    }

    /// The chat template applied to one user message, with the assistant's turn opened.
    pub fn chat_prompt(&self, user: &str) -> Result<String, TokenizerError> {
        self.chat_messages(&[("user".to_string(), user.to_string())])
    }

    /// The chat template applied to (role, content) messages, with the assistant's turn opened.
    pub fn chat_messages(&self, messages: &[(String, String)]) -> Result<String, TokenizerError> {
        let template = self.chat_template.as_deref().ok_or_else(|| TokenizerError::NoTemplate { file: self.config_file.clone() })?;
        let bad = |e: JinjaError| TokenizerError::Template { file: self.config_file.clone(), reason: format!("{e:#}") };
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, JinjaError> {
            Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_template("chat", template).map_err(bad)?;
        let messages: Vec<_> = messages.iter().map(|(role, content)| context! { role => role, content => content }).collect();
        env.get_template("chat")
            .and_then(|t| {
                t.render(context! {
                    messages => messages,
                    add_generation_prompt => true,
                    bos_token => self.bos_token.clone().unwrap_or_default(),
                    eos_token => self.eos_token.clone().unwrap_or_default(),
                })
            })
            .map_err(bad)
    }
}

/// Decodes a growing list of ids into text pieces, holding back an incomplete UTF-8 tail.
/// Each push decodes a window from the ids before the last piece on (their text is the
/// context a tokenizer needs to place a leading space), not the whole output: a step costs
/// the same at token 10 and at token 10,000.
#[derive(Default)]
pub struct TextStream {
    ids: Vec<u32>,
    /// The window's start: the first id of the piece before the last one emitted.
    prefix: usize,
    /// The ids up to here are in the text emitted.
    read: usize,
}

impl TextStream {
    /// Add ids; return the new text they complete.
    pub fn push(&mut self, tok: &TextTokenizer, ids: &[u32]) -> Result<String, TokenizerError> {
        self.ids.extend_from_slice(ids);
        let before = tok.decode(&self.ids[self.prefix..self.read])?;
        let text = tok.decode(&self.ids[self.prefix..])?;
        if text.ends_with('\u{FFFD}') || text.len() <= before.len() || !text.is_char_boundary(before.len()) {
            return Ok(String::new());
        }
        let piece = text[before.len()..].to_string();
        (self.prefix, self.read) = (self.read, self.ids.len());
        Ok(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::write_tokenizer;

    #[test]
    fn chat_template_stop_ids_and_streaming() {
        let dir = tempfile::tempdir().unwrap();
        write_tokenizer(dir.path(), 16).unwrap();
        std::fs::write(dir.path().join("generation_config.json"), r#"{"eos_token_id": [2, 7]}"#).unwrap();
        let tok = TextTokenizer::load_dir(dir.path()).unwrap();
        assert_eq!(tok.stop_ids(), [2, 7]);
        let prompt = tok.chat_prompt("  w5 w6 ").unwrap();
        assert_eq!(prompt, "<s> user w5 w6 </s> <s> assistant ");
        // "user" and "assistant" are not words of this vocabulary: <unk> (0).
        assert_eq!(tok.encode(&prompt, false).unwrap(), [1, 0, 5, 6, 2, 1, 0]);
        let mut stream = TextStream::default();
        assert_eq!(stream.push(&tok, &[5]).unwrap(), "w5");
        assert_eq!(stream.push(&tok, &[2, 9]).unwrap(), " w9");
        // However long the output, the pieces add up to the whole text.
        let ids: Vec<u32> = (0..300).map(|i| 2 + (i * 7) % 14).collect();
        let mut stream = TextStream::default();
        let pieces: String = ids.chunks(3).map(|c| stream.push(&tok, c).unwrap()).collect();
        assert_eq!(pieces, tok.decode(&ids).unwrap());
    }

    #[test]
    fn a_broken_template_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        write_tokenizer(dir.path(), 8).unwrap();
        let cfg = dir.path().join("tokenizer_config.json");
        std::fs::write(&cfg, r#"{"chat_template": "{% for m in messages %}{{ raise_exception('no') }}{% endfor %}"}"#).unwrap();
        let tok = TextTokenizer::load_dir(dir.path()).unwrap();
        let e = tok.chat_prompt("hi").unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: /chat_template: ", cfg.display())), "{e}");
        assert!(e.contains("no"), "{e}");
        std::fs::remove_file(&cfg).unwrap();
        let tok = TextTokenizer::load_dir(dir.path()).unwrap();
        assert!(matches!(tok.chat_prompt("hi"), Err(TokenizerError::NoTemplate { .. })));
    }
}
