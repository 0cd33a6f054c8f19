//! A model's KV cache: per layer, K and V as `[slots, kv_heads * head_dim]` buffers allocated
//! once. Slot `p` holds the token at position `p` of the committed sequence; the slots after the
//! committed length are scratch for a verify tree or draft-tree levels.

use crate::backend::{Backend, BackendError, KvDtype};

/// Bytes one token takes: K and V of `width` per layer in `dtype`.
pub fn bytes_per_token(layers: usize, width: usize, dtype: KvDtype) -> u64 {
    2 * (layers * width) as u64 * dtype.bytes()
}

pub struct KvCache<B: Backend> {
    pub k: Vec<B::Tensor>,
    pub v: Vec<B::Tensor>,
    pub slots: usize,
    pub dtype: KvDtype,
    /// Bytes one slot takes over all the buffers.
    slot_bytes: u64,
}

impl<B: Backend> KvCache<B> {
    pub fn new(backend: &B, layers: usize, slots: usize, width: usize, dtype: KvDtype) -> Result<Self, BackendError> {
        let mut k = Vec::with_capacity(layers);
        let mut v = Vec::with_capacity(layers);
        for _ in 0..layers {
            k.push(backend.kv_tensor(slots, width, dtype)?);
            v.push(backend.kv_tensor(slots, width, dtype)?);
        }
        Ok(KvCache { k, v, slots, dtype, slot_bytes: bytes_per_token(layers, width, dtype) })
    }

    /// One buffer per layer and no V: an MLA target's latent (`kv_lora_rank +
    /// qk_rope_head_dim` per token), from which attention reads both keys and values.
    pub fn latent(backend: &B, layers: usize, slots: usize, width: usize) -> Result<Self, BackendError> {
        let k = (0..layers).map(|_| backend.tensor(slots, width)).collect::<Result<Vec<_>, _>>()?;
        Ok(KvCache { k, v: Vec::new(), slots, dtype: KvDtype::F32, slot_bytes: (layers * width) as u64 * 4 })
    }

    /// The latent in two buffers per layer, as `Backend::mla_attention` reads it: the normed
    /// latent `c` (`kv_lora_rank`) as K and the rotated rope key (`qk_rope_head_dim`) as V.
    pub fn latent_split(backend: &B, layers: usize, slots: usize, (c, rope): (usize, usize)) -> Result<Self, BackendError> {
        let mut kv = KvCache::latent(backend, layers, slots, c)?;
        kv.v = (0..layers).map(|_| backend.tensor(slots, rope)).collect::<Result<Vec<_>, _>>()?;
        kv.slot_bytes = (layers * (c + rope)) as u64 * 4;
        Ok(kv)
    }

    /// Free this cache's buffers, then allocate `new()`'s in its place: a drafter's pool and
    /// its one sequence's cache need not fit in memory together. On an error the cache holds
    /// no slots.
    pub fn replace(&mut self, new: impl FnOnce() -> Result<KvCache<B>, BackendError>) -> Result<(), BackendError> {
        self.k.clear();
        self.v.clear();
        self.slots = 0;
        *self = new()?;
        Ok(())
    }

    pub fn bytes(&self) -> u64 {
        self.slots as u64 * self.slot_bytes
    }

    /// Keep one root-to-leaf path of a verify tree written at `base + node`: the slot of
    /// `path[i]` becomes `base + i`. Nodes are numbered parents first, so each move reads a slot
    /// at or after the one it writes; the rejected nodes' slots are simply reused later.
    pub fn commit_path(&mut self, backend: &B, base: usize, path: &[usize]) {
        // A decode step or an accepted chain prefix is already in place: moving it would be
        // two launches per layer that change nothing.
        if path.iter().enumerate().all(|(i, &node)| node == i) {
            return;
        }
        let src: Vec<usize> = path.iter().map(|n| base + n).collect();
        for t in self.k.iter_mut().chain(self.v.iter_mut()) {
            backend.move_rows(t, &src, base);
        }
    }
}
