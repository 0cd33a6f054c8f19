// Rotary position embedding, in place on the q and k heads of a fused qkv buffer
// ([tokens, token_stride] with q heads at q_offset and k heads at k_offset).
// inv_freq holds rotary_dim/2 frequencies already adjusted for llama3 or YaRN scaling by
// the host; mscale is YaRN's attention factor (1 otherwise), applied to cos and sin.
// NeoX style rotates (i, i + rotary_dim/2); interleaved (GPT-J) style rotates (2i, 2i+1).
// Grid: (tokens, q_heads + k_heads); positions are read from device memory so a captured
// graph can be replayed at new positions.
extern "C" __global__ void rope_bf16(bf16* qkv, long long token_stride, long long q_offset,
                                     long long k_offset, int q_heads, int head_dim, int rotary_dim,
                                     const int* positions, const float* inv_freq, float mscale,
                                     int interleaved) {
    const int t = blockIdx.x, h = blockIdx.y;
    bf16* head = qkv + (long long)t * token_stride +
                 (h < q_heads ? q_offset + (long long)h * head_dim
                              : k_offset + (long long)(h - q_heads) * head_dim);
    const float pos = (float)positions[t];
    const int half = rotary_dim / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf(pos * inv_freq[i], &s, &c);
        c *= mscale;
        s *= mscale;
        const int i0 = interleaved ? 2 * i : i;
        const int i1 = interleaved ? 2 * i + 1 : i + half;
        const float x0 = __bfloat162float(head[i0]);
        const float x1 = __bfloat162float(head[i1]);
        head[i0] = __float2bfloat16_rn(x0 * c - x1 * s);
        head[i1] = __float2bfloat16_rn(x1 * c + x0 * s);
    }
}
