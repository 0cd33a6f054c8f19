//! An HF `tokenizer.json` (through the `tokenizers` crate) and `tokenizer_config.json`
//! rebuilt from a GGUF's embedded byte-level BPE vocabulary and merges.
//!
//! The pre-tokenizer follows `tokenizer.ggml.pre` the way llama.cpp's `llama-vocab.cpp`
//! splits text for that name, expressed with HF's pre-tokenizers.

use serde_json::{json, Map, Value as Json};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{NormalizerWrapper, NFC};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use super::ConvertError;
use crate::model::gguf::GgufFile;

/// llama.cpp's token types (`llama_token_type`).
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

/// The Qwen2 split (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_QWEN2`): single digits.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// The Llama-3 split (`llama-bpe`): digits in runs of up to three.
const LLAMA3_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The tokenizer with the strings `tokenizer_config.json` names.
pub struct GgufTokenizer {
    pub tokenizer: Tokenizer,
    pub tokens: Vec<String>,
    pub add_bos: bool,
}

fn unsupported(g: &GgufFile, key: &str, value: &str, reason: &str) -> ConvertError {
    ConvertError::Unsupported { file: g.path.clone(), key: key.into(), value: value.into(), reason: reason.into() }
}

fn tokenizer_err(g: &GgufFile, reason: String) -> ConvertError {
    ConvertError::Tokenizer { file: g.path.clone(), reason }
}

pub fn build(g: &GgufFile) -> Result<GgufTokenizer, ConvertError> {
    let model = g.require_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(unsupported(g, "tokenizer.ggml.model", model, "only byte-level BPE (gpt2) vocabularies are converted"));
    }
    let tokens: Vec<String> = g.require_str_array("tokenizer.ggml.tokens")?.into_iter().map(String::from).collect();
    let types = g.i64_array("tokenizer.ggml.token_type")?.unwrap_or_else(|| vec![1; tokens.len()]);
    if types.len() != tokens.len() {
        return Err(tokenizer_err(g, format!("tokenizer.ggml.token_type has {} entries for {} tokens", types.len(), tokens.len())));
    }
    let merges = g
        .require_str_array("tokenizer.ggml.merges")?
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| tokenizer_err(g, format!("tokenizer.ggml.merges[{i}] = {m:?} is not two tokens")))
        })
        .collect::<Result<Vec<_>, _>>()?;

    // A later duplicate of a token string wins, as in a Python dict built over the list.
    let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| tokenizer_err(g, format!("the BPE model does not build: {e}")))?;
    let (normalizer, pre_tokenizer) = text_splitting(g)?;
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_normalizer(normalizer);
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));

    let added = |ty: i64, special: bool| -> Vec<AddedToken> {
        tokens
            .iter()
            .zip(&types)
            .filter(|(_, &t)| t == ty)
            .map(|(tok, _)| AddedToken::from(tok.clone(), special).normalized(false))
            .collect()
    };
    tokenizer.add_special_tokens(&added(TOKEN_CONTROL, true));
    // User-defined tokens (Qwen's <tool_call>) match whole but are not special, as in HF.
    tokenizer.add_tokens(&added(TOKEN_USER_DEFINED, false));

    let add_bos = g.bool("tokenizer.ggml.add_bos_token")?.unwrap_or(false);
    if add_bos {
        let bos_key = "tokenizer.ggml.bos_token_id";
        let bos = g.require_u64(bos_key)?;
        let bos_text =
            tokens.get(bos as usize).ok_or_else(|| tokenizer_err(g, format!("{bos_key} = {bos} is past the {} tokens", tokens.len())))?;
        let template_err = |e: String| tokenizer_err(g, format!("bos template: {e}"));
        let template = TemplateProcessing::builder()
            .try_single(format!("{bos_text} $A"))
            .map_err(template_err)?
            .try_pair(format!("{bos_text} $A {bos_text} $B"))
            .map_err(template_err)?
            .special_tokens(vec![(bos_text.clone(), bos as u32)])
            .build()
            .map_err(|e| template_err(e.to_string()))?;
        tokenizer.with_post_processor(Some(template));
    }
    Ok(GgufTokenizer { tokenizer, tokens, add_bos })
}

/// The normalizer and pre-tokenizer for `tokenizer.ggml.pre` (absent means GPT-2's). Qwen2's
/// HF tokenizer also applies NFC, which Appendix B's builder and llama.cpp leave out; it
/// changes ids only for text that is not already NFC.
fn text_splitting(g: &GgufFile) -> Result<(Option<NormalizerWrapper>, PreTokenizerWrapper), ConvertError> {
    let key = "tokenizer.ggml.pre";
    let pre = g.str(key)?.unwrap_or("default");
    let byte_level = |use_regex| PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, use_regex));
    let split_then_bytes = |regex: &str| -> Result<PreTokenizerWrapper, ConvertError> {
        let split = Split::new(SplitPattern::Regex(regex.into()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| tokenizer_err(g, format!("{key} = {pre}: regex: {e}")))?;
        Ok(PreTokenizerWrapper::Sequence(Sequence::new(vec![split.into(), byte_level(false)])))
    };
    Ok(match pre {
        "qwen2" => (Some(NFC.into()), split_then_bytes(QWEN2_SPLIT)?),
        "llama-bpe" | "llama3" => (None, split_then_bytes(LLAMA3_SPLIT)?),
        // SmolLM: every digit on its own, then GPT-2's split.
        "smollm" => (None, PreTokenizerWrapper::Sequence(Sequence::new(vec![Digits::new(true).into(), byte_level(true)]))),
        "gpt-2" | "gpt2" | "default" => (None, byte_level(true)),
        other => return Err(unsupported(g, key, other, "this pre-tokenizer is not known to the converter")),
    })
}

/// HF `tokenizer_config.json`.
pub fn tokenizer_config_json(g: &GgufFile, t: &GgufTokenizer, context: u64) -> Result<Json, ConvertError> {
    let mut c = Map::new();
    c.insert("tokenizer_class".into(), json!("PreTrainedTokenizerFast"));
    c.insert("add_bos_token".into(), json!(t.add_bos));
    c.insert("add_eos_token".into(), json!(false));
    for (name, key) in [
        ("bos_token", "tokenizer.ggml.bos_token_id"),
        ("eos_token", "tokenizer.ggml.eos_token_id"),
        ("pad_token", "tokenizer.ggml.padding_token_id"),
        ("unk_token", "tokenizer.ggml.unknown_token_id"),
    ] {
        if let Some(id) = g.u64(key)? {
            let text =
                t.tokens.get(id as usize).ok_or_else(|| tokenizer_err(g, format!("{key} = {id} is past the {} tokens", t.tokens.len())))?;
            c.insert(name.into(), json!(text));
        }
    }
    if let Some(template) = g.str("tokenizer.chat_template")? {
        c.insert("chat_template".into(), json!(template));
    }
    c.insert("model_max_length".into(), json!(context));
    c.insert("clean_up_tokenization_spaces".into(), json!(false));
    Ok(Json::Object(c))
}
