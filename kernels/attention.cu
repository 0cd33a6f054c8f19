// Flash-style attention over the paged KV cache, one kernel for prefill (causal), decode
// (one query) and tree verification (a custom mask), in the style of flash-decoding:
// never materialises the score matrix; keeps a running max and sum (online softmax).
//
// Query i of n_q is the new token at key position prefix + i. It sees every prefix key,
// and new key prefix + j when
//   tree_mask == NULL : j <= i                          (causal)
//   tree_mask != NULL : bit j of tree_mask[i] is set    (tree: itself and its ancestors)
// prefix is read from device memory so a captured graph replays at any length.
//
// Grid: (n_q, q_heads). Block: `warps` warps; warp w takes keys w, w + warps, ...; each
// lane holds head_dim / 32 elements of q and of the output. The warps' partial softmax
// states are merged through shared memory at the end (dynamic: warps * (head_dim + 2)
// floats).

#define MAX_PER_LANE 8  // head_dim up to 256

__device__ __forceinline__ void load_lane(const bf16* p, int per_lane, float (&v)[MAX_PER_LANE]) {
    if ((per_lane & 1) == 0) {
        const __nv_bfloat162* p2 = reinterpret_cast<const __nv_bfloat162*>(p);
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE / 2; ++e) {
            if (2 * e < per_lane) {
                float2 f = __bfloat1622float2(p2[e]);
                v[2 * e] = f.x;
                v[2 * e + 1] = f.y;
            }
        }
    } else {
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; ++e)
            if (e < per_lane) v[e] = __bfloat162float(p[e]);
    }
}

extern "C" __global__ void attention_bf16(const bf16* q, long long q_stride, long long q_offset,
                                          const bf16* k_cache, const bf16* v_cache,
                                          long long layer_offset, const int* block_table,
                                          int block_size, const int* prefix_len, int n_q,
                                          const unsigned long long* tree_mask, bf16* out,
                                          long long out_stride, int q_heads, int kv_heads,
                                          int head_dim, float scale) {
    extern __shared__ float smem[];
    const int qi = blockIdx.x, h = blockIdx.y;
    const int kvh = h / (q_heads / kv_heads);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int per_lane = head_dim / 32;
    const int prefix = *prefix_len;
    const int n_keys = prefix + (tree_mask ? n_q : qi + 1);
    const unsigned long long mask = tree_mask ? tree_mask[qi] : 0ull;
    const long long kv_width = (long long)kv_heads * head_dim;
    const bf16* kbase = k_cache + layer_offset + (long long)kvh * head_dim + lane * per_lane;
    const bf16* vbase = v_cache + layer_offset + (long long)kvh * head_dim + lane * per_lane;

    float qv[MAX_PER_LANE], acc[MAX_PER_LANE], kv[MAX_PER_LANE];
    load_lane(q + (long long)qi * q_stride + q_offset + (long long)h * head_dim + lane * per_lane,
              per_lane, qv);
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; ++e) {
        qv[e] = e < per_lane ? qv[e] * scale : 0.f;
        acc[e] = 0.f;
        kv[e] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int p = warp; p < n_keys; p += warps) {
        if (tree_mask && p >= prefix && !((mask >> (p - prefix)) & 1ull)) continue;
        const long long row = slot_of(block_table, block_size, p) * kv_width;
        load_lane(kbase + row, per_lane, kv);
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; ++e)
            if (e < per_lane) s += qv[e] * kv[e];
        s = warp_sum(s);
        const float m_new = fmaxf(m, s);
        const float corr = __expf(m - m_new);
        const float w = __expf(s - m_new);
        l = l * corr + w;
        load_lane(vbase + row, per_lane, kv);
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; ++e)
            if (e < per_lane) acc[e] = acc[e] * corr + w * kv[e];
        m = m_new;
    }

    float* s_m = smem;
    float* s_l = smem + warps;
    float* s_acc = smem + 2 * warps;
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; ++e)
        if (e < per_lane) s_acc[warp * head_dim + lane * per_lane + e] = acc[e];
    __syncthreads();

    float m_all = -INFINITY;
    for (int w = 0; w < warps; ++w) m_all = fmaxf(m_all, s_m[w]);
    float denom = 0.f;
    for (int w = 0; w < warps; ++w)
        if (s_m[w] != -INFINITY) denom += s_l[w] * __expf(s_m[w] - m_all);
    bf16* o = out + (long long)qi * out_stride + (long long)h * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float num = 0.f;
        for (int w = 0; w < warps; ++w)
            if (s_m[w] != -INFINITY) num += s_acc[w * head_dim + d] * __expf(s_m[w] - m_all);
        o[d] = __float2bfloat16_rn(denom > 0.f ? num / denom : 0.f);
    }
}
