//! The shared memory of the whole-layer launches (kernels/layer.cu), which the host must
//! size before it launches: the kernels lay their buffers out with the same arithmetic.

/// Threads per block (`LAYER_THREADS`).
pub const LAYER_THREADS: u32 = 256;
/// Most rows of a launch (`LAYER_MAX_ROWS`).
pub const LAYER_MAX_ROWS: usize = 4;
const WARPS: usize = LAYER_THREADS as usize / 32;
/// The partial sums of the row-parallel matmuls, in floats.
const PARTIAL: usize = WARPS * 2 * LAYER_MAX_ROWS;

/// What sizes a launch's buffers.
pub struct LayerShape {
    pub rows: usize,
    pub hidden: usize,
    /// heads · head_dim.
    pub q_width: usize,
    pub head_dim: usize,
    /// RoPE pairs of q, k and v rows: (heads + 2 · kv_heads) · head_dim / 2.
    pub qkv_units: usize,
    pub inter: usize,
}

/// A block's share of `n` rows over `blocks`, at most.
fn share(n: usize, blocks: usize) -> usize {
    n.div_ceil(blocks)
}

/// Bytes of dynamic shared memory of an attention half (`attention_half`) on a grid of
/// `blocks`: scratch floats (the staged rows or attention's state), the partial sums, the
/// block's q/k/v and o rows in bf16, two 8-byte mbarriers.
pub fn attention_half_bytes(s: &LayerShape, blocks: usize) -> usize {
    let staged = (s.rows * s.hidden.max(s.q_width)).max(WARPS * (s.head_dim + 2));
    let rows = 2 * share(s.qkv_units, blocks) * s.hidden + share(s.hidden, blocks) * s.q_width;
    4 * (staged + PARTIAL) + 2 * rows + 16
}

/// Bytes of dynamic shared memory of an MLP half (`mlp_half`): the staged rows, the partial
/// sums, the block's gate and up rows in bf16, one mbarrier.
pub fn mlp_half_bytes(s: &LayerShape, blocks: usize) -> usize {
    4 * (s.rows * s.hidden.max(s.inter) + PARTIAL) + 2 * 2 * share(s.inter, blocks) * s.hidden + 8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen_05b(rows: usize) -> LayerShape {
        LayerShape { rows, hidden: 896, q_width: 896, head_dim: 64, qkv_units: (14 + 4) * 32, inter: 4864 }
    }

    /// Qwen2.5-0.5B on an H200's 132 SMs: 5 q/k/v pairs and 7 o rows, or 37 gate/up pairs,
    /// a block. One attention half and one MLP half fit an SM's 228 KiB together at one
    /// row, so each launch's rows load while the one before runs.
    #[test]
    fn the_halves_of_a_qwen_half_b_layer_share_an_h200_sm_at_one_row() {
        let one = qwen_05b(1);
        assert_eq!(attention_half_bytes(&one, 132), 4 * (896 + 64) + 2 * (10 * 896 + 7 * 896) + 16);
        assert_eq!(mlp_half_bytes(&one, 132), 4 * (4864 + 64) + 2 * 74 * 896 + 8);
        assert!(attention_half_bytes(&one, 132) + mlp_half_bytes(&one, 132) <= 228 << 10);
        let four = qwen_05b(4);
        assert!(mlp_half_bytes(&four, 132) <= 227 << 10);
        assert!(attention_half_bytes(&four, 132) + mlp_half_bytes(&four, 132) > 228 << 10);
    }
}
