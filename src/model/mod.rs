//! Model files: `config.json`, safetensors checkpoints (quantized ones included), tokenizers,
//! GGUF files and their conversion to HF folders.

pub mod checkpoint;
pub mod config;
pub mod convert;
pub mod deepseek;
pub mod gguf;
pub mod hub;
pub(crate) mod open;
pub mod quantized;
pub(crate) mod tokenizer;
