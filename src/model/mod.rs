//! Model files: `config.json`, safetensors checkpoints, tokenizers.

pub mod checkpoint;
pub mod config;
pub mod tokenizer;
