//! Tensor parallelism in the model code: what one rank of `--tp-size N` holds and computes.
//!
//! # Design
//!
//! Each rank is a whole engine (`engine::ranks::RankGroup`): its own thread, its own backend
//! on its own GPU and stream, running the same model code over its shard. The alternative, a
//! backend that fans every op out to rank threads, would cross threads several hundred times
//! per decode step (about 15 ops per layer); one engine per rank crosses threads once per
//! request and lets each rank record and replay its own CUDA graphs.
//!
//! The split (Megatron style, done by the backend while loading, `Backend::load_weight`):
//! - q/k/v (and their biases), gate and up are column-parallel: rank `r` keeps heads
//!   `[r·H/N, (r+1)·H/N)`, KV heads `[r·KV/N, (r+1)·KV/N)` (its KV cache holds only those) and
//!   the matching slice of the intermediate features;
//! - o_proj and down_proj are row-parallel, each followed by an all-reduce of the residual
//!   delta (`Backend::all_reduce`, NCCL on CUDA);
//! - embeddings, norms and lm_head are replicated: after the all-reduce every rank holds the
//!   same hidden states, so every rank computes the same logits and chooses the same greedy
//!   tokens without another collective (and sampling draws the same coins from the same seed).
//!   A replicated lm_head costs each rank its full read (1 GB of the 8B model's 16 GB), which
//!   bounds the TP 2 speed-up near 1.9× but keeps the seam free of a gather op.
//! - The drafter (EAGLE-3 or STANDALONE) goes through the same model code, so it is sharded
//!   the same way; its layer is small, and its all-reduces are two per draft step.
//!
//! GQA: a rank keeps whole KV heads, so N must divide both the query and the KV heads (the
//! 8B shape has 32 and 8: N = 1, 2, 4, 8). Replicating KV heads for N > KV is not done.

use crate::backend::BackendError;
use crate::engine::llama::LayerShape;

/// The head and feature counts one rank of `world` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankSplit {
    pub heads: usize,
    pub kv_heads: usize,
    pub intermediate: usize,
}

/// Split `heads`, `kv_heads` and `intermediate` over `world` ranks, or say which count does
/// not divide (by its config key).
pub fn split(heads: usize, kv_heads: usize, intermediate: usize, world: usize) -> Result<RankSplit, String> {
    let part = |count: usize, key: &str| {
        if world == 0 || count % world != 0 {
            Err(format!("--tp-size {world} does not divide {key} {count} (each rank keeps whole heads and an equal share)"))
        } else {
            Ok(count / world)
        }
    };
    Ok(RankSplit {
        heads: part(heads, "num_attention_heads")?,
        kv_heads: part(kv_heads, "num_key_value_heads")?,
        intermediate: part(intermediate, "intermediate_size")?,
    })
}

impl LayerShape {
    /// The shapes one rank of `world` computes with (its scratch buffers, attention heads and
    /// KV width); the loader still checks the checkpoint's full shapes.
    pub(crate) fn for_rank(&self, world: usize) -> Result<LayerShape, BackendError> {
        let s = split(self.heads, self.kv_heads, self.intermediate, world).map_err(BackendError::Device)?;
        Ok(LayerShape { heads: s.heads, kv_heads: s.kv_heads, intermediate: s.intermediate, ..*self })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Llama-3.1-8B shape splits evenly at every size up to 8, each rank keeping the same
    /// number of query heads per KV head as the whole model (GQA groups stay whole).
    #[test]
    fn the_8b_shape_splits_for_1_2_4_8() {
        for world in [1, 2, 4, 8] {
            let s = split(32, 8, 14336, world).unwrap();
            assert_eq!(s, RankSplit { heads: 32 / world, kv_heads: 8 / world, intermediate: 14336 / world });
            assert_eq!(s.heads / s.kv_heads, 4);
        }
    }

    #[test]
    fn counts_that_do_not_divide_name_the_key() {
        // Qwen2.5-1.5B: 12 heads, 2 KV heads, 8960 intermediate.
        assert_eq!(split(12, 2, 8960, 2).unwrap(), RankSplit { heads: 6, kv_heads: 1, intermediate: 4480 });
        assert_eq!(
            split(12, 2, 8960, 4).unwrap_err(),
            "--tp-size 4 does not divide num_key_value_heads 2 (each rank keeps whole heads and an equal share)"
        );
        assert_eq!(split(12, 2, 8960, 8).unwrap_err().split(" (").next().unwrap(), "--tp-size 8 does not divide num_attention_heads 12");
        assert!(split(8, 8, 100, 8).unwrap_err().contains("intermediate_size 100"));
    }

    #[test]
    fn a_layer_shape_keeps_its_widths_and_divides_its_counts() {
        let full =
            LayerShape { hidden: 64, attn_in: 128, heads: 8, kv_heads: 4, head_dim: 16, intermediate: 96, qkv_bias: true, qk_norm: false };
        let r = full.for_rank(4).unwrap();
        assert_eq!((r.hidden, r.attn_in, r.head_dim, r.qkv_bias), (64, 128, 16, true));
        assert_eq!((r.heads, r.kv_heads, r.intermediate), (2, 1, 24));
        assert_eq!(full.for_rank(1).unwrap().heads, 8);
        assert!(matches!(full.for_rank(8), Err(BackendError::Device(m)) if m.contains("num_key_value_heads 4")));
    }
}
