//! A model folder's `config.json`, read as JSON with typed accessors.
//!
//! Every accessor returns the JSON pointer it read from along with the value, so findings can
//! cite the exact key. Sizes of multimodal wrappers (Kimi-K2.5) live under `text_config`; the
//! accessors look there first, as SGLang's `hf_text_config` does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::model::open;

/// A value read from a config, with the JSON pointer it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Field<T> {
    pub pointer: String,
    pub value: T,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {source}")]
    Io { file: PathBuf, source: std::io::Error },
    #[error("{file}: invalid JSON at line {line}, column {column}: {message}")]
    Json { file: PathBuf, line: usize, column: usize, message: String },
    #[error("{file}: the top level is not a JSON object")]
    NotAnObject { file: PathBuf },
    #[error("{file}: {key} is missing")]
    Missing { file: PathBuf, key: String },
    #[error("{file}: {key} = {value} is not {expected}")]
    WrongType { file: PathBuf, key: String, value: String, expected: &'static str },
    /// A number of the right type outside what can be used; `limit` says what the range is.
    #[error("{file}: {key} {value} {limit}")]
    OutOfRange { file: PathBuf, key: String, value: String, limit: String },
}

impl ConfigError {
    /// The value the error is about, as the file has it (`0`, `"gelu"`); null when it names
    /// none. Evidence shows it, so a 0 is shown as 0.
    pub fn value(&self) -> Value {
        match self {
            ConfigError::WrongType { value, .. } | ConfigError::OutOfRange { value, .. } => {
                serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.clone()))
            }
            _ => Value::Null,
        }
    }

    /// The file the error is about.
    pub fn file(&self) -> &Path {
        match self {
            ConfigError::Io { file, .. }
            | ConfigError::Json { file, .. }
            | ConfigError::NotAnObject { file }
            | ConfigError::Missing { file, .. }
            | ConfigError::WrongType { file, .. }
            | ConfigError::OutOfRange { file, .. } => file,
        }
    }
}

/// The largest integer a config size can hold; JSON numbers past it (which serde_json reads
/// as floats) are out of range rather than rounded down to it.
const U64_RANGE: &str = "is out of range: sizes in config.json are integers from 0 to 18446744073709551615 (2^64 - 1)";

/// SGLang's `CONTEXT_LENGTH_KEYS`, in its order of precedence.
pub const CONTEXT_LENGTH_KEYS: [&str; 5] =
    ["max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"];

/// SGLang's fallback when no context key is present.
pub const DEFAULT_CONTEXT_LENGTH: u64 = 2048;

/// A context length derived the way SGLang's `get_context_length` does it.
#[derive(Clone, Debug, PartialEq)]
pub struct DerivedContext {
    pub length: u64,
    /// The key the base length came from (None when SGLang's 2048 default applied).
    pub source: Option<Field<u64>>,
    /// The rope scaling factor that multiplied it (1.0 when none applied).
    pub factor: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RopeScaling {
    /// `rope_type` or `type`: linear, dynamic, llama3, yarn, default, ...
    pub kind: String,
    pub factor: f64,
    pub original_max_position_embeddings: Option<u64>,
    /// The JSON pointer of the scaling object.
    pub pointer: String,
    pub raw: Value,
}

#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub file: PathBuf,
    pub root: Value,
    /// How the folder is shown instead of its path (a Hugging Face snapshot's repo id).
    shown_as: Option<String>,
}

impl ModelConfig {
    /// Read `<dir>/config.json`.
    pub fn load_dir(dir: &Path) -> Result<ModelConfig, ConfigError> {
        Self::load_file(&dir.join("config.json"))
    }

    /// Read a config file (a regular file of at most `open::JSON_LIMIT` bytes).
    pub fn load_file(file: &Path) -> Result<ModelConfig, ConfigError> {
        let text = open::read_text_capped(file, open::JSON_LIMIT).map_err(|source| ConfigError::Io { file: file.to_path_buf(), source })?;
        Self::from_str(file, &text)
    }

    /// Parse config text. A leading UTF-8 byte-order mark (Windows editors write one) is
    /// skipped, as Python's `json.load` with `utf-8-sig` does.
    pub fn from_str(file: &Path, text: &str) -> Result<ModelConfig, ConfigError> {
        let body = text.strip_prefix('\u{feff}').unwrap_or(text);
        let root: Value = serde_json::from_str(body).map_err(|e| json_error(file, body, &e))?;
        if !root.is_object() {
            return Err(ConfigError::NotAnObject { file: file.to_path_buf() });
        }
        Ok(ModelConfig { file: file.to_path_buf(), root, shown_as: None })
    }

    pub fn from_value(file: impl Into<PathBuf>, root: Value) -> ModelConfig {
        ModelConfig { file: file.into(), root, shown_as: None }
    }

    /// A copy with in-memory overrides (JSON pointer → value) applied. Missing parents are
    /// created. The file on disk is untouched.
    pub fn with_overrides(&self, overrides: &BTreeMap<String, Value>) -> ModelConfig {
        let mut root = self.root.clone();
        for (pointer, value) in overrides {
            set_pointer(&mut root, pointer, value.clone());
        }
        ModelConfig { file: self.file.clone(), root, shown_as: self.shown_as.clone() }
    }

    pub fn file_name(&self) -> String {
        match (&self.shown_as, self.file.file_name()) {
            (Some(folder), Some(name)) => format!("{folder}/{}", name.to_string_lossy()),
            _ => self.file.display().to_string(),
        }
    }

    /// The same config, its folder shown as `folder` (`org/name (snapshot 0e9e39f)`).
    pub fn shown_as(self, folder: String) -> ModelConfig {
        ModelConfig { shown_as: Some(folder), ..self }
    }

    /// The raw value at a JSON pointer.
    pub fn at(&self, pointer: &str) -> Option<&Value> {
        self.root.pointer(pointer).filter(|v| !v.is_null())
    }

    pub fn has_text_config(&self) -> bool {
        self.root.get("text_config").is_some_and(Value::is_object)
    }

    /// Where a size key lives: `/text_config/<key>` when a text_config has it, else `/<key>`.
    pub fn locate(&self, key: &str) -> Option<String> {
        let nested = format!("/text_config/{key}");
        if self.at(&nested).is_some() {
            return Some(nested);
        }
        let top = format!("/{key}");
        self.at(&top).map(|_| top)
    }

    /// Where a size key is, or would be when absent: under `text_config` when the config has
    /// one, since sizes are read from there first.
    pub fn pointer_of(&self, key: &str) -> String {
        self.locate(key).unwrap_or_else(|| if self.has_text_config() { format!("/text_config/{key}") } else { format!("/{key}") })
    }

    pub fn value(&self, key: &str) -> Option<Field<Value>> {
        let pointer = self.locate(key)?;
        let value = self.at(&pointer)?.clone();
        Some(Field { pointer, value })
    }

    pub fn u64(&self, key: &str) -> Result<Option<Field<u64>>, ConfigError> {
        let Some(f) = self.value(key) else { return Ok(None) };
        self.u64_at(&f.pointer, &f.value).map(|value| Some(Field { pointer: f.pointer, value }))
    }

    /// An integer value read at `pointer`: a float that is a whole number counts, one past
    /// 2^64 - 1 is out of range (never rounded to u64::MAX).
    pub fn u64_at(&self, pointer: &str, v: &Value) -> Result<u64, ConfigError> {
        if let Some(x) = v.as_f64().filter(|x| v.as_u64().is_none() && *x >= U64_LIMIT) {
            return Err(self.out_of_range(pointer, x, U64_RANGE.to_string()));
        }
        as_u64(v).ok_or_else(|| self.wrong_type(pointer, v, "a non-negative integer"))
    }

    /// A size that must be positive (a zero count of heads or layers is no model).
    pub fn positive_u64(&self, key: &str) -> Result<Option<Field<u64>>, ConfigError> {
        match self.u64(key)? {
            Some(f) if f.value == 0 => Err(self.out_of_range(&f.pointer, 0, "is out of range: it must be at least 1".into())),
            other => Ok(other),
        }
    }

    pub fn out_of_range(&self, pointer: &str, value: impl std::fmt::Display, limit: String) -> ConfigError {
        ConfigError::OutOfRange { file: self.file.clone(), key: pointer.to_string(), value: value.to_string(), limit }
    }

    pub fn f64(&self, key: &str) -> Result<Option<Field<f64>>, ConfigError> {
        let Some(f) = self.value(key) else { return Ok(None) };
        match f.value.as_f64() {
            Some(v) => Ok(Some(Field { pointer: f.pointer, value: v })),
            None => Err(self.wrong_type(&f.pointer, &f.value, "a number")),
        }
    }

    pub fn bool(&self, key: &str) -> Option<Field<bool>> {
        let f = self.value(key)?;
        Some(Field { pointer: f.pointer, value: f.value.as_bool()? })
    }

    pub fn str(&self, key: &str) -> Option<Field<String>> {
        let f = self.value(key)?;
        Some(Field { pointer: f.pointer, value: f.value.as_str()?.to_string() })
    }

    /// A required integer: a clear error naming the file and key when absent.
    pub fn require_u64(&self, key: &str) -> Result<Field<u64>, ConfigError> {
        self.u64(key)?.ok_or_else(|| ConfigError::Missing { file: self.file.clone(), key: format!("/{key}") })
    }

    /// A required size of at least 1, as a `usize` (the error names the file and key).
    pub fn size(&self, key: &str) -> Result<usize, ConfigError> {
        self.optional_size(key)?.ok_or_else(|| ConfigError::Missing { file: self.file.clone(), key: format!("/{key}") })
    }

    /// A size of at least 1 when present; `null` (DeepSeek's `q_lora_rank`) counts as absent.
    pub fn optional_size(&self, key: &str) -> Result<Option<usize>, ConfigError> {
        let Some(f) = self.positive_u64(key)? else { return Ok(None) };
        usize::try_from(f.value)
            .map(Some)
            .map_err(|_| self.out_of_range(&f.pointer, f.value, format!("exceeds what this engine addresses ({})", usize::MAX)))
    }

    pub fn wrong_type(&self, pointer: &str, value: &Value, expected: &'static str) -> ConfigError {
        ConfigError::WrongType { file: self.file.clone(), key: pointer.to_string(), value: value.to_string(), expected }
    }

    /// `architectures[0]` (top level; wrappers name their own class there).
    pub fn architecture(&self) -> Option<Field<String>> {
        let v = self.root.get("architectures")?.get(0)?.as_str()?;
        Some(Field { pointer: "/architectures/0".into(), value: v.to_string() })
    }

    pub fn model_type(&self) -> Option<Field<String>> {
        self.str("model_type")
    }

    pub fn hidden_size(&self) -> Result<Option<Field<u64>>, ConfigError> {
        self.u64("hidden_size")
    }

    pub fn num_hidden_layers(&self) -> Result<Option<Field<u64>>, ConfigError> {
        self.u64("num_hidden_layers")
    }

    pub fn vocab_size(&self) -> Result<Option<Field<u64>>, ConfigError> {
        self.u64("vocab_size")
    }

    pub fn num_attention_heads(&self) -> Result<Option<Field<u64>>, ConfigError> {
        self.u64("num_attention_heads")
    }

    /// `num_key_value_heads`, defaulting to the attention heads (MHA) as HF does.
    pub fn num_key_value_heads(&self) -> Result<Option<Field<u64>>, ConfigError> {
        match self.u64("num_key_value_heads")? {
            Some(f) => Ok(Some(f)),
            None => self.num_attention_heads(),
        }
    }

    /// `head_dim` when present, else hidden / heads.
    pub fn head_dim(&self) -> Result<Option<u64>, ConfigError> {
        if let Some(f) = self.u64("head_dim")? {
            return Ok(Some(f.value));
        }
        match (self.hidden_size()?, self.num_attention_heads()?) {
            (Some(h), Some(n)) if n.value > 0 => Ok(Some(h.value / n.value)),
            _ => Ok(None),
        }
    }

    pub fn intermediate_size(&self) -> Result<Option<Field<u64>>, ConfigError> {
        self.u64("intermediate_size")
    }

    /// The routed experts of a MoE config: the first of `n_routed_experts` (DeepSeek),
    /// `num_experts` (Qwen-MoE) and `num_local_experts` (Mixtral) present; None for a dense
    /// config (none present, or 0).
    pub fn routed_experts(&self) -> Result<Option<Field<u64>>, ConfigError> {
        for key in ["n_routed_experts", "num_experts", "num_local_experts"] {
            if let Some(f) = self.u64(key)? {
                return Ok(Some(f).filter(|f| f.value > 0));
            }
        }
        Ok(None)
    }

    /// `quantization_config.quant_method` (under `text_config` when that has the
    /// quantization_config), as written; None when the config has no quantization_config or
    /// it names no method.
    pub fn quant_method(&self) -> Result<Option<Field<String>>, ConfigError> {
        let Some(q) = self.value("quantization_config") else { return Ok(None) };
        if !q.value.is_object() {
            return Err(self.wrong_type(&q.pointer, &q.value, "an object"));
        }
        let pointer = format!("{}/quant_method", q.pointer);
        match self.at(&pointer) {
            None => Ok(None),
            Some(Value::String(m)) => Ok(Some(Field { pointer, value: m.clone() })),
            Some(other) => Err(self.wrong_type(&pointer, other, "a string")),
        }
    }

    pub fn rms_norm_eps(&self) -> Result<f64, ConfigError> {
        Ok(self.f64("rms_norm_eps")?.map(|f| f.value).unwrap_or(1e-6))
    }

    pub fn tie_word_embeddings(&self) -> bool {
        self.bool("tie_word_embeddings").map(|f| f.value).unwrap_or(false)
    }

    /// `torch_dtype` (transformers ≤4) or `dtype` (transformers 5).
    pub fn dtype(&self) -> Option<Field<String>> {
        self.str("torch_dtype").or_else(|| self.str("dtype"))
    }

    /// `rope_theta`, also read from transformers-5 `rope_parameters`. None when absent (the
    /// HF default is then 10000; callers decide whether absence matters).
    pub fn rope_theta(&self) -> Result<Option<Field<f64>>, ConfigError> {
        if let Some(f) = self.f64("rope_theta")? {
            return Ok(Some(f));
        }
        let Some(params) = self.locate("rope_parameters") else { return Ok(None) };
        let pointer = format!("{params}/rope_theta");
        match self.at(&pointer) {
            Some(v) => match v.as_f64() {
                Some(x) => Ok(Some(Field { pointer, value: x })),
                None => Err(self.wrong_type(&pointer, v, "a number")),
            },
            None => Ok(None),
        }
    }

    /// `rope_scaling` (or transformers-5 `rope_parameters` with a non-default type).
    pub fn rope_scaling(&self) -> Option<RopeScaling> {
        let pointer = self.locate("rope_scaling").or_else(|| self.locate("rope_parameters"))?;
        let raw = self.at(&pointer)?.clone();
        let obj = raw.as_object()?;
        let kind = obj.get("rope_type").or_else(|| obj.get("type")).and_then(Value::as_str).unwrap_or("default").to_string();
        if pointer.ends_with("rope_parameters") && kind == "default" {
            return None;
        }
        let factor = obj.get("factor").and_then(Value::as_f64).unwrap_or(1.0);
        let original_max_position_embeddings = obj.get("original_max_position_embeddings").and_then(as_u64);
        Some(RopeScaling { kind, factor, original_max_position_embeddings, pointer, raw })
    }

    /// The context length exactly as SGLang's `get_context_length` derives it: the first of
    /// `CONTEXT_LENGTH_KEYS`, times `rope_scaling.factor` unless the scaling has
    /// `original_max_position_embeddings` or is `llama3`; 2048 when no key is present.
    pub fn derived_context_length(&self) -> Result<DerivedContext, ConfigError> {
        let factor = match self.rope_scaling() {
            Some(s) if s.original_max_position_embeddings.is_some() || s.kind == "llama3" => 1.0,
            Some(s) => s.factor,
            None => 1.0,
        };
        for key in CONTEXT_LENGTH_KEYS {
            if let Some(f) = self.u64(key)? {
                let scaled = factor * f.value as f64;
                if !(0.0..U64_LIMIT).contains(&scaled) {
                    let pointer = self.rope_scaling().map(|s| format!("{}/factor", s.pointer)).unwrap_or_default();
                    return Err(self.out_of_range(
                        &pointer,
                        factor,
                        format!("is out of range: times {} = {} it gives a context length past 2^64 - 1", f.pointer, f.value),
                    ));
                }
                return Ok(DerivedContext { length: scaled as u64, source: Some(f), factor });
            }
        }
        Ok(DerivedContext { length: DEFAULT_CONTEXT_LENGTH, source: None, factor: 1.0 })
    }

    /// `eagle_config.eagle_aux_hidden_state_layer_ids` (or the same key at top level, as vLLM
    /// also reads it).
    pub fn eagle_aux_layer_ids(&self) -> Result<Option<Field<Vec<i64>>>, ConfigError> {
        for pointer in ["/eagle_config/eagle_aux_hidden_state_layer_ids", "/eagle_aux_hidden_state_layer_ids"] {
            if let Some(v) = self.at(pointer) {
                let ids = v
                    .as_array()
                    .and_then(|a| a.iter().map(Value::as_i64).collect::<Option<Vec<_>>>())
                    .ok_or_else(|| self.wrong_type(pointer, v, "a list of integers"))?;
                return Ok(Some(Field { pointer: pointer.to_string(), value: ids }));
            }
        }
        Ok(None)
    }

    /// `draft_vocab_size` of an EAGLE drafter.
    pub fn draft_vocab_size(&self) -> Result<Option<Field<u64>>, ConfigError> {
        self.u64("draft_vocab_size")
    }

    /// `target_hidden_size` of an EAGLE-3 drafter.
    pub fn target_hidden_size(&self) -> Result<Option<Field<u64>>, ConfigError> {
        self.u64("target_hidden_size")
    }

    /// bos/eos token ids; eos may be a list.
    pub fn token_ids(&self, key: &str) -> Option<Field<Vec<u64>>> {
        let f = self.value(key)?;
        let ids = match &f.value {
            Value::Array(a) => a.iter().filter_map(as_u64).collect(),
            v => vec![as_u64(v)?],
        };
        Some(Field { pointer: f.pointer, value: ids })
    }
}

/// 2^64 as a float: the first value a u64 cannot hold.
const U64_LIMIT: f64 = 18446744073709551616.0;

/// serde_json's error with the file named; a bare `NaN` or `Infinity` (Python's json.dump
/// writes them) gets its own explanation, since JSON has no such numbers.
fn json_error(file: &Path, text: &str, e: &serde_json::Error) -> ConfigError {
    let (line, column) = (e.line(), e.column());
    let at = text.lines().nth(line.saturating_sub(1)).and_then(|l| l.get(column.saturating_sub(1)..)).unwrap_or("");
    let non_json =
        ["NaN", "Infinity", "-Infinity"].into_iter().find(|w| at.starts_with(w) || at.get(1..).is_some_and(|r| r.starts_with(w)));
    let message = match non_json {
        Some(word) => format!("{word} is not a number in JSON (JSON has no NaN or Infinity, though Python's json.dump writes them)"),
        None => e.to_string(),
    };
    ConfigError::Json { file: file.to_path_buf(), line, column, message }
}

fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_f64().filter(|x| *x >= 0.0 && *x < U64_LIMIT && x.fract() == 0.0).map(|x| x as u64))
}

/// Set the value at a JSON pointer, creating objects along the way.
fn set_pointer(root: &mut Value, pointer: &str, value: Value) {
    let mut cur = root;
    let tokens: Vec<String> = pointer.split('/').skip(1).map(|t| t.replace("~1", "/").replace("~0", "~")).collect();
    for (i, tok) in tokens.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Default::default());
        }
        let obj = cur.as_object_mut().expect("made an object above");
        if i + 1 == tokens.len() {
            obj.insert(tok.clone(), value);
            return;
        }
        cur = obj.entry(tok.clone()).or_insert_with(|| Value::Object(Default::default()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(v: Value) -> ModelConfig {
        ModelConfig::from_value("config.json", v)
    }

    #[test]
    fn experts_and_quantization_are_read_where_they_sit() {
        let kimi = cfg(json!({"text_config": {"n_routed_experts": 384,
            "quantization_config": {"quant_method": "compressed-tensors"}}}));
        assert_eq!(kimi.routed_experts().unwrap(), Some(Field { pointer: "/text_config/n_routed_experts".into(), value: 384 }));
        let method = Field { pointer: "/text_config/quantization_config/quant_method".into(), value: "compressed-tensors".into() };
        assert_eq!(kimi.quant_method().unwrap(), Some(method));
        let mixtral = cfg(json!({"num_local_experts": 8, "quantization_config": {"bits": 4}}));
        assert_eq!(mixtral.routed_experts().unwrap().map(|f| f.value), Some(8));
        assert_eq!(mixtral.quant_method().unwrap(), None);
        assert_eq!(
            (kimi.pointer_of("kv_lora_rank"), mixtral.pointer_of("kv_lora_rank")),
            ("/text_config/kv_lora_rank".into(), "/kv_lora_rank".into())
        );
        assert_eq!(kimi.pointer_of("n_routed_experts"), "/text_config/n_routed_experts");
        let dense = cfg(json!({"num_experts": 0}));
        assert_eq!((dense.routed_experts().unwrap(), dense.quant_method().unwrap()), (None, None));
        let bad = cfg(json!({"quantization_config": "fp8"}));
        assert_eq!(bad.quant_method().unwrap_err().to_string(), "config.json: /quantization_config = \"fp8\" is not an object");
        let bad = cfg(json!({"quantization_config": {"quant_method": 8}}));
        assert_eq!(bad.quant_method().unwrap_err().to_string(), "config.json: /quantization_config/quant_method = 8 is not a string");
    }

    #[test]
    fn context_length_follows_sglang() {
        // yarn with original_max_position_embeddings: no multiplication (Kimi / DeepSeek).
        let kimi = cfg(json!({"text_config": {"max_position_embeddings": 262144,
            "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096}}}));
        let d = kimi.derived_context_length().unwrap();
        assert_eq!(d.length, 262144);
        assert_eq!(d.source.unwrap().pointer, "/text_config/max_position_embeddings");
        // llama3 scaling: no multiplication.
        let llama = cfg(json!({"max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}));
        assert_eq!(llama.derived_context_length().unwrap().length, 131072);
        // linear scaling multiplies.
        let lin = cfg(json!({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}));
        assert_eq!(lin.derived_context_length().unwrap().length, 8192);
        // key precedence: seq_length before max_position_embeddings.
        let glm = cfg(json!({"seq_length": 32768, "max_position_embeddings": 8192}));
        assert_eq!(glm.derived_context_length().unwrap().length, 32768);
        // nothing: 2048.
        let none = cfg(json!({}));
        let d = none.derived_context_length().unwrap();
        assert_eq!((d.length, d.source), (2048, None));
    }

    #[test]
    fn overrides_apply_in_memory() {
        let c = cfg(json!({"max_position_embeddings": 131072}));
        let mut o = BTreeMap::new();
        o.insert("/max_position_embeddings".to_string(), json!(262144));
        o.insert("/eagle_config/x".to_string(), json!(1));
        let c2 = c.with_overrides(&o);
        assert_eq!(c2.derived_context_length().unwrap().length, 262144);
        assert_eq!(c2.at("/eagle_config/x"), Some(&json!(1)));
        assert_eq!(c.derived_context_length().unwrap().length, 131072);
    }

    #[test]
    fn typed_errors_name_file_and_key() {
        let c = cfg(json!({"hidden_size": "big"}));
        let e = c.hidden_size().unwrap_err().to_string();
        assert_eq!(e, "config.json: /hidden_size = \"big\" is not a non-negative integer");
        let e = ModelConfig::from_str(Path::new("d/config.json"), "{\"a\": }").unwrap_err().to_string();
        assert!(e.starts_with("d/config.json: invalid JSON at line 1, column 7"), "{e}");
    }

    #[test]
    fn rope_theta_from_transformers5_parameters() {
        let c = cfg(json!({"rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}}));
        let t = c.rope_theta().unwrap().unwrap();
        assert_eq!((t.pointer.as_str(), t.value), ("/rope_parameters/rope_theta", 1e6));
        assert_eq!(c.rope_scaling(), None);
    }
}
