//! Preflight: rules over config.json files, safetensors headers and tokenizer files, one
//! file per concern. Never reads tensor data.

pub mod context;
