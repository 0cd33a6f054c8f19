// The paged KV cache: K and V are each [layers][slots][kv_heads][head_dim] bf16, a slot
// being block_table[pos / block_size] * block_size + pos % block_size.

__device__ __forceinline__ void copy_row(const bf16* __restrict__ src, bf16* __restrict__ dst, int n) {
    const bool vec = (n % 8 == 0) && aligned16(src) && aligned16(dst);
    if (vec) {
        for (int i = threadIdx.x * 8; i < n; i += blockDim.x * 8)
            *reinterpret_cast<uint4*>(dst + i) = *reinterpret_cast<const uint4*>(src + i);
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    }
}

// Write the k and v heads of new tokens (already rotated) at positions[t].
// Grid: (tokens, 2): y = 0 copies K, y = 1 copies V; each block copies all kv heads.
extern "C" __global__ void kv_write(const bf16* qkv, long long token_stride, long long k_offset,
                                    long long v_offset, bf16* k_cache, bf16* v_cache,
                                    long long layer_offset, const int* positions,
                                    const int* block_table, int block_size, int kv_width) {
    const int t = blockIdx.x;
    const long long slot = slot_of(block_table, block_size, positions[t]);
    const bf16* src = qkv + (long long)t * token_stride + (blockIdx.y == 0 ? k_offset : v_offset);
    bf16* dst = (blockIdx.y == 0 ? k_cache : v_cache) + layer_offset + slot * kv_width;
    copy_row(src, dst, kv_width);
}

// Move cached K/V rows from position base + src_nodes[i] to base + i, i < *count, for
// every layer: after a tree verify the accepted nodes (verify_*'s `accepted`) move next to
// the prefix. Everything comes from device memory, so nothing is read back. Accepted node
// indices increase along the path, so rows only move towards lower positions; each block
// moves one (layer, K-or-V) in order i = 0, 1, ..., so a row is read before anything
// overwrites it. Grid: (layers, 2).
extern "C" __global__ void kv_move(bf16* k_cache, bf16* v_cache, long long layer_stride, const int* base,
                                   const int* src_nodes, const int* count, const int* block_table,
                                   int block_size, int kv_width) {
    bf16* cache = (blockIdx.y == 0 ? k_cache : v_cache) + (long long)blockIdx.x * layer_stride;
    const int b = *base, n = *count;
    for (int i = 0; i < n; ++i) {
        const int s = b + src_nodes[i], d = b + i;
        if (s != d) {
            copy_row(cache + slot_of(block_table, block_size, s) * kv_width,
                     cache + slot_of(block_table, block_size, d) * kv_width, kv_width);
        }
        __syncthreads();
    }
}
