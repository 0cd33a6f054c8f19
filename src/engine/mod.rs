//! The speculative decoding engine: Llama-family targets, EAGLE-3 and STANDALONE drafters,
//! chain and tree drafting, greedy and rejection-sampling verification, written once over
//! the `backend::Backend` seam. `plan` resolves a launch once; `lifecycle` runs it phase by
//! phase as events; `handle` puts the engine on its own thread for the console; `ranks` runs
//! one engine per tensor-parallel rank (`ranks::engine_for` in the caller's thread serves the
//! headless `generate` and `bench` of src/commands/); `request` holds what all three are asked
//! and answer.

pub mod batch_buffers;
pub(crate) mod capture;
pub(crate) mod compile;
pub mod context;
pub mod deepseek;
pub(crate) mod device;
pub mod drafter;
pub mod eagle3;
pub(crate) mod findings;
pub(crate) mod graph_sizes;
pub mod handle;
pub mod kv;
pub mod kv_budget;
pub mod lifecycle;
pub mod llama;
pub(crate) mod memory;
pub mod paged;
pub(crate) mod plan;
pub(crate) mod rank_batch;
pub(crate) mod rank_vote;
pub(crate) mod ranks;
pub mod request;
pub mod sampling;
pub mod scheduler;
pub mod serving;
pub mod spec_decode;
pub mod standalone;
pub mod target_model;
pub(crate) mod tp;
#[cfg(test)]
pub(crate) mod tp_emulation;
pub(crate) mod tree;
pub mod verify;
pub mod weights;

use crate::backend::BackendError;
use crate::model::config::ConfigError;
use crate::model::tokenizer::TokenizerError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A value that parses but cannot be used (a file and the key or tensor it is about).
    #[error("{file}: {key}: {message}")]
    Invalid { file: String, key: String, message: String },
    /// A request the loaded engine cannot serve.
    #[error("{0}")]
    Request(String),
}

impl EngineError {
    /// The value the error is about (a config number, say), or null.
    pub fn value(&self) -> serde_json::Value {
        match self {
            EngineError::Config(e) => e.value(),
            _ => serde_json::Value::Null,
        }
    }

    /// The file and key (JSON pointer or tensor name) the error is about, when it names one.
    pub fn location(&self) -> Option<(String, String)> {
        let path = |p: &std::path::Path| p.display().to_string();
        match self {
            EngineError::Config(
                ConfigError::Missing { file, key } | ConfigError::WrongType { file, key, .. } | ConfigError::OutOfRange { file, key, .. },
            ) => Some((path(file), key.clone())),
            EngineError::Config(ConfigError::Io { file, .. } | ConfigError::Json { file, .. } | ConfigError::NotAnObject { file }) => {
                Some((path(file), String::new()))
            }
            EngineError::Backend(BackendError::Load(crate::model::checkpoint::CheckpointError::BadHeader { file, .. }))
            | EngineError::Backend(BackendError::Load(crate::model::checkpoint::CheckpointError::Io { file, .. }))
            | EngineError::Backend(BackendError::Load(crate::model::checkpoint::CheckpointError::BadIndex { file, .. })) => {
                Some((path(file), String::new()))
            }
            EngineError::Backend(e) => weights::error_location(e),
            EngineError::Tokenizer(
                TokenizerError::Load { file, .. } | TokenizerError::Json { file, .. } | TokenizerError::NoTemplate { file },
            ) => Some((path(file), String::new())),
            EngineError::Tokenizer(TokenizerError::Template { file, .. }) => Some((path(file), "/chat_template".into())),
            EngineError::Invalid { file, key, .. } => Some((file.clone(), key.clone())),
            EngineError::Tokenizer(TokenizerError::Codec(_)) | EngineError::Request(_) => None,
        }
    }
}
