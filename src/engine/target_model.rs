//! The target the decoding loop drives: a Llama-family model (`llama`) or a DeepSeek-V3-family
//! one (`deepseek`). Both take token ids and positions in their `StepInputs`, leave logits in
//! one tensor and keep a `KvCache`; this is the one place that tells them apart.

use std::sync::Arc;

use crate::backend::{AttnWindow, Backend, BackendError, KvDtype, Mask, PagedBatch};
use crate::engine::deepseek::{DeepseekModel, DeepseekTargetConfig};
use crate::engine::drafter::TargetHead;
use crate::engine::kv::{self, KvCache};
use crate::engine::llama::{Capacity, LlamaConfig, LlamaModel, Logits, StepInputs};
use crate::engine::weights::Loader;
use crate::model::config::{ConfigError, ModelConfig};
use crate::model::deepseek::DeepseekConfig;

/// What a target's `model_type` must be, as a config error says it.
const TARGET_MODEL_TYPES: &str = "llama, mistral, qwen2, qwen3, deepseek_v3 or kimi_k2";

#[derive(Clone, Debug, PartialEq)]
pub enum TargetConfig {
    Llama(LlamaConfig),
    Deepseek(DeepseekTargetConfig),
}

impl TargetConfig {
    pub fn from_config(cfg: &ModelConfig) -> Result<TargetConfig, ConfigError> {
        if DeepseekConfig::is_family(cfg) {
            return DeepseekTargetConfig::from_config(cfg).map(TargetConfig::Deepseek);
        }
        match LlamaConfig::from_config(cfg) {
            Err(ConfigError::WrongType { file, key, value, .. }) if key.ends_with("/model_type") => {
                Err(ConfigError::WrongType { file, key, value, expected: TARGET_MODEL_TYPES })
            }
            other => other.map(TargetConfig::Llama),
        }
    }

    pub fn layers(&self) -> usize {
        match self {
            TargetConfig::Llama(c) => c.layers,
            TargetConfig::Deepseek(c) => c.text.layers,
        }
    }

    /// Bytes of KV one token takes on each of `tp` ranks: K and V per layer in `dtype`, or
    /// one token's f32 latent (`kv::KvCache::latent`), which no rank splits.
    pub fn kv_bytes_per_token(&self, tp: usize, dtype: KvDtype) -> u64 {
        match self {
            TargetConfig::Llama(c) => kv::bytes_per_token(c.layers, c.kv_heads.div_ceil(tp.max(1)) * c.head_dim, dtype),
            TargetConfig::Deepseek(c) => (c.text.layers * c.text.latent_width()) as u64 * 4,
        }
    }
}

// One target per engine, held for the engine's life: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum TargetModel<B: Backend> {
    Llama(LlamaModel<B>),
    Deepseek(DeepseekModel<B>),
}

impl<B: Backend> From<LlamaModel<B>> for TargetModel<B> {
    fn from(m: LlamaModel<B>) -> Self {
        TargetModel::Llama(m)
    }
}

impl<B: Backend> TargetModel<B> {
    pub fn load(backend: Arc<B>, config: &TargetConfig, ld: &mut Loader<'_, B>, cap: Capacity) -> Result<Self, BackendError> {
        match config {
            TargetConfig::Llama(c) => LlamaModel::load(backend, c.clone(), ld, cap).map(TargetModel::Llama),
            TargetConfig::Deepseek(c) => DeepseekModel::load(backend, c, ld, cap).map(TargetModel::Deepseek),
        }
    }

    /// The embeddings and lm_head an EAGLE-3 drafter shares (the DeepSeek-V3 reference holds
    /// its weights on the host: they go onto the backend when a drafter asks for them).
    pub fn head(&self) -> Result<TargetHead<B>, BackendError> {
        match self {
            TargetModel::Llama(m) => Ok(TargetHead {
                backend: m.backend().clone(),
                vocab: m.config.vocab,
                hidden: m.config.hidden,
                embed: m.embed.clone(),
                lm_head: m.lm_head.clone(),
            }),
            TargetModel::Deepseek(m) => m.head(),
        }
    }

    /// Whether a forward only enqueues work, so a step can be captured as a graph, once
    /// what it reads from the host went up ahead of it (`prepare_forward`, `prepare_batch`):
    /// not where the DeepSeek-V3 family computes on the host.
    pub fn graphs_capture(&self) -> bool {
        match self {
            TargetModel::Llama(_) => true,
            TargetModel::Deepseek(m) => m.on_backend(),
        }
    }

    /// Ahead of a single-sequence forward of `window` (`mask`: its tree's, row-major
    /// `[queries, region]`) that may be a graph step: the tables it reads go to the backend.
    pub fn prepare_forward(&mut self, window: AttnWindow, mask: Option<&[i32]>) {
        if let TargetModel::Deepseek(m) = self {
            m.prepare_forward(window, mask);
        }
    }

    /// `prepare_forward` for the batched forward of `batch`.
    pub fn prepare_batch(&mut self, batch: &PagedBatch<'_, B>) -> Result<(), BackendError> {
        match self {
            TargetModel::Llama(m) => {
                m.backend().prepare_paged_batch(batch);
                Ok(())
            }
            TargetModel::Deepseek(m) => m.prepare_batch(batch),
        }
    }

    pub fn backend(&self) -> &Arc<B> {
        match self {
            TargetModel::Llama(m) => m.backend(),
            TargetModel::Deepseek(m) => m.backend(),
        }
    }

    pub fn capacity(&self) -> Capacity {
        match self {
            TargetModel::Llama(m) => m.capacity,
            TargetModel::Deepseek(m) => m.capacity,
        }
    }

    pub fn vocab(&self) -> usize {
        match self {
            TargetModel::Llama(m) => m.config.vocab,
            TargetModel::Deepseek(m) => m.config.vocab,
        }
    }

    pub fn inputs(&mut self) -> &mut StepInputs<B> {
        match self {
            TargetModel::Llama(m) => &mut m.inputs,
            TargetModel::Deepseek(m) => &mut m.inputs,
        }
    }

    pub fn logits(&self) -> &B::Tensor {
        match self {
            TargetModel::Llama(m) => &m.logits,
            TargetModel::Deepseek(m) => &m.logits,
        }
    }

    pub fn logits_mut(&mut self) -> &mut B::Tensor {
        match self {
            TargetModel::Llama(m) => &mut m.logits,
            TargetModel::Deepseek(m) => &mut m.logits,
        }
    }

    /// The captured hidden states an EAGLE-3 drafter reads, when capturing.
    pub fn aux(&self) -> Option<&B::Tensor> {
        let capture = match self {
            TargetModel::Llama(m) => &m.capture,
            TargetModel::Deepseek(m) => &m.capture,
        };
        capture.as_ref().map(|c| &c.aux)
    }

    pub fn weight_bytes(&self) -> u64 {
        match self {
            TargetModel::Llama(m) => m.weight_bytes(),
            TargetModel::Deepseek(m) => m.weight_bytes(),
        }
    }

    pub fn new_kv(&self, slots: usize) -> Result<KvCache<B>, BackendError> {
        match self {
            TargetModel::Llama(m) => m.new_kv(slots),
            TargetModel::Deepseek(m) => m.new_kv(slots),
        }
    }

    /// Keep the KV caches made from now on in `dtype` (`LlamaModel::set_kv_dtype`). An MLA
    /// target keeps its latent in f32 whatever is asked.
    pub fn set_kv_dtype(&mut self, dtype: KvDtype) {
        if let TargetModel::Llama(m) = self {
            m.set_kv_dtype(dtype);
        }
    }

    pub fn kv_dtype(&self) -> KvDtype {
        match self {
            TargetModel::Llama(m) => m.kv_dtype(),
            TargetModel::Deepseek(_) => KvDtype::F32,
        }
    }

    pub fn set_capture(&mut self, layers: Option<Vec<usize>>) -> Result<(), BackendError> {
        match self {
            TargetModel::Llama(m) => m.set_capture(layers),
            TargetModel::Deepseek(m) => m.set_capture(layers),
        }
    }

    /// Run `window.queries` tokens (ids and positions already in `inputs()`).
    pub fn forward(&mut self, kv: &mut KvCache<B>, window: AttnWindow, mask: Mask<'_, B>, logits: Logits) -> Result<(), BackendError> {
        match self {
            TargetModel::Llama(m) => {
                m.forward(kv, window, mask, logits);
                Ok(())
            }
            TargetModel::Deepseek(m) => m.forward(kv, window, mask, logits),
        }
    }

    /// Bytes one token's KV takes in this model's cache (the latent for MLA).
    pub fn kv_bytes_per_token(&self) -> u64 {
        match self {
            TargetModel::Llama(m) => m.kv_bytes_per_token(),
            TargetModel::Deepseek(m) => m.kv_bytes_per_token(),
        }
    }

    /// Cover positions `0 .. positions` with the RoPE table (kv-alloc sizes it to the context).
    pub fn ensure_positions(&mut self, positions: usize) -> Result<(), BackendError> {
        match self {
            TargetModel::Llama(m) => m.ensure_positions(positions),
            TargetModel::Deepseek(m) => m.ensure_positions(positions),
        }
    }

    /// Size the buffers for the batched scheduler's forwards (`LlamaModel::set_batch_capacity`).
    pub fn set_batch_capacity(&mut self, rows: usize, logit_rows: usize, seq_rows: usize, positions: usize) -> Result<(), BackendError> {
        match self {
            TargetModel::Llama(m) => m.set_batch_capacity(rows, logit_rows, seq_rows, positions),
            TargetModel::Deepseek(m) => m.set_batch_capacity(rows, logit_rows, positions),
        }
    }

    /// One batched forward of the scheduler's sequences over the paged pool `kv`.
    pub fn forward_batch(&mut self, kv: &mut KvCache<B>, batch: &PagedBatch<'_, B>, logit_rows: &[usize]) -> Result<(), BackendError> {
        match self {
            TargetModel::Llama(m) => {
                m.forward_batch(kv, batch, logit_rows);
                Ok(())
            }
            TargetModel::Deepseek(m) => m.forward_batch(kv, batch, logit_rows),
        }
    }
}
