// Flash-style attention over a layer's KV cache (f32 [slots, kv_heads * head_dim]), one
// kernel for prefill (causal), decode (one query) and tree verification (an explicit
// mask). It never materialises the scores: each warp keeps a running max and sum (online
// softmax) and the warps' states are merged at the end, as in flash-decoding.
//
// Slots [0, prefix) are committed and visible to every query. Slots
// [prefix, prefix + region) hold the current region; the `queries` queries are its last
// rows. Query i sees region slot j when
//   mask == NULL : j <= region - queries + i                    (causal)
//   mask != NULL : mask[i * region + j] != 0                    ([queries, region] of 0/1)
// prefix and region are read from `window` ([prefix, region] on the device) when it is
// not NULL, so a captured graph replays at any length; else from the arguments.
//
// Grid: (queries, heads). Block: `warps` warps; warp w takes the visible keys whose rank
// in the query's visible sequence is w, w + warps, ..., KG of them at a time (their K and V
// rows loaded together, so several loads are in flight); lane l holds a run of
// PER = ceil(head_dim / 32) elements of q and of the output (head_dim up to 256). One entry
// point per PER, attention_f32_p{PER}: with PER known, the registers hold exactly the run,
// so a small head takes more keys per group (KG) and a warp waits on fewer rounds of loads.
// Dynamic shared memory: warps * (head_dim + 2) floats.

#define ATTENTION_MAX_THREADS 512

// The lane's `count` (<= PER) elements, the rest zero. WIDE: every lane holds a full run
// (head_dim == 32 * PER, which also aligns each run), loaded in 16- or 8-byte pieces where
// PER allows; otherwise element by element. Without a branch either way: the loads of a
// group of keys stay together.
template <int PER, bool WIDE>
__device__ __forceinline__ void load_lane(const float* p, int count, float (&v)[PER]) {
    if (WIDE && PER % 4 == 0) {
#pragma unroll
        for (int e = 0; e < PER / 4; ++e) {
            const float4 f = reinterpret_cast<const float4*>(p)[e];
            v[4 * e] = f.x;
            v[4 * e + 1] = f.y;
            v[4 * e + 2] = f.z;
            v[4 * e + 3] = f.w;
        }
    } else if (WIDE && PER % 2 == 0) {
#pragma unroll
        for (int e = 0; e < PER / 2; ++e) {
            const float2 f = reinterpret_cast<const float2*>(p)[e];
            v[2 * e] = f.x;
            v[2 * e + 1] = f.y;
        }
    } else {
#pragma unroll
        for (int e = 0; e < PER; ++e) v[e] = WIDE || e < count ? p[e] : 0.f;
    }
}

// The warp sums of KG values at once: lane l ends with the sum over the warp of v[l / (32 /
// KG)]. The first log2(KG) butterfly steps each hand the partner lane half of the values
// still held and keep the other half; the rest are warp_sum's. Every key's sum is formed
// from the same pairs, at the same offsets, as warp_sum(v[g]) forms it, so the bits are
// warp_sum's, for KG shuffles (plus 5 - log2(KG)) instead of 5 * KG.
template <int KG>
__device__ __forceinline__ float transposed_sum(float (&v)[KG], int lane) {
    int offset = 16;
#pragma unroll
    for (int held = KG; held > 1; held /= 2, offset /= 2) {
        const bool upper = (lane & offset) != 0;
#pragma unroll
        for (int j = 0; j < held / 2; ++j) {
            const float give = upper ? v[j] : v[j + held / 2];
            const float keep = upper ? v[j + held / 2] : v[j];
            v[j] = keep + __shfl_xor_sync(0xffffffffu, give, offset);
        }
    }
    float sum = v[0];
#pragma unroll
    for (; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    return sum;
}

template <int PER, int KG, bool WIDE>
__device__ __forceinline__ void attend_keys(const float* q, const float* k, const float* v, float* out, int heads,
                                            int kv_heads, int head_dim, float scale, int prefix_arg, int region_arg,
                                            int queries, const int* window, const int* mask) {
    extern __shared__ float smem[];
    const int qi = blockIdx.x, h = blockIdx.y;
    const int kvh = h / (heads / kv_heads);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    // Lanes hold consecutive runs of PER elements; with a head_dim that is not a multiple
    // of 32 the last lanes hold fewer (or none).
    const int count = max(0, min(PER, head_dim - lane * PER));
    const int prefix = window ? window[0] : prefix_arg;
    const int region = window ? window[1] : region_arg;
    const int last_visible = mask ? region - 1 : region - queries + qi;
    const int* mask_row = mask ? mask + (long long)qi * region : nullptr;
    const long long kv_width = (long long)kv_heads * head_dim;
    const float* kbase = k + (long long)kvh * head_dim + lane * PER;
    const float* vbase = v + (long long)kvh * head_dim + lane * PER;

    float qv[PER], acc[PER];
    load_lane<PER, WIDE>(q + (long long)qi * heads * head_dim + (long long)h * head_dim + lane * PER, count, qv);
#pragma unroll
    for (int e = 0; e < PER; ++e) {
        qv[e] = e < count ? qv[e] * scale : 0.f;
        acc[e] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    // Up to KG slots of this warp waiting to be visited (warp-uniform). A group is visited
    // whole: the slots after the last waiting one repeat it (no branch around the loads) and
    // weigh 0, which leaves the sums as they are.
    int pending[KG];
    int waiting = 0;
    // Visit the waiting keys: one running-softmax update for the group, in a fixed order.
    auto visit = [&]() {
        float kr[KG][PER], vr[KG][PER], dot[KG];
#pragma unroll
        for (int g = 0; g < KG; ++g) {
            const long long row = (long long)pending[g] * kv_width;
            load_lane<PER, WIDE>(kbase + row, count, kr[g]);
            load_lane<PER, WIDE>(vbase + row, count, vr[g]);
        }
#pragma unroll
        for (int g = 0; g < KG; ++g) {
            // q is zero past the lane's run, and so are the loaded elements.
            float d = 0.f;
#pragma unroll
            for (int e = 0; e < PER; ++e) d += qv[e] * kr[g][e];
            dot[g] = d;
        }
        // Each lane ends up with one key's score (of the `32 / KG` lanes that share it), so
        // the max and the exponential are taken once per key, not once per key and lane.
        const int mine = lane / (32 / KG);
        const float score = transposed_sum<KG>(dot, lane);
        const float m_new = fmaxf(m, warp_reduce(mine < waiting ? score : -INFINITY, MaxOp()));
        const float corr = __expf(m - m_new);
        const float p_mine = mine < waiting ? __expf(score - m_new) : 0.f;
        float p[KG];
#pragma unroll
        for (int g = 0; g < KG; ++g) p[g] = __shfl_sync(0xffffffffu, p_mine, g * (32 / KG));
        float p_sum = 0.f;
#pragma unroll
        for (int g = 0; g < KG; ++g) p_sum += p[g];
        l = l * corr + p_sum;
#pragma unroll
        for (int e = 0; e < PER; ++e) {
            float a = acc[e] * corr;
#pragma unroll
            for (int g = 0; g < KG; ++g) a += p[g] * vr[g][e];
            acc[e] = a;
        }
        m = m_new;
        waiting = 0;
    };
    auto queue = [&](int slot) {
#pragma unroll
        for (int g = 0; g < KG; ++g)
            if (g == waiting) pending[g] = slot;
        if (++waiting == KG) visit();
    };
    // Keys go to warps by their position in the query's visible sequence, not by slot, and
    // a warp's keys are grouped in that order too: a verify-tree query then sums exactly
    // as the same token decoded alone after its ancestors were committed, so speculative
    // greedy output equals target-only output.
    for (int s = warp; s < prefix; s += warps) queue(s);
    for (int j = 0, rank = 0; j < region; ++j) {
        const bool visible = mask_row ? mask_row[j] != 0 : j <= last_visible;
        if (!visible) continue;
        if ((prefix + rank) % warps == warp) queue(prefix + j);
        ++rank;
    }
    if (waiting > 0) {
#pragma unroll
        for (int g = 1; g < KG; ++g)
            if (g >= waiting) pending[g] = pending[g - 1];
        visit();
    }

    float* s_m = smem;
    float* s_l = smem + warps;
    float* s_acc = smem + 2 * warps;
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < PER; ++e)
        if (e < count) s_acc[warp * head_dim + lane * PER + e] = acc[e];
    __syncthreads();

    float m_all = -INFINITY;
    for (int w = 0; w < warps; ++w) m_all = fmaxf(m_all, s_m[w]);
    float denom = 0.f;
    for (int w = 0; w < warps; ++w)
        if (s_m[w] != -INFINITY) denom += s_l[w] * __expf(s_m[w] - m_all);
    float* o = out + (long long)qi * heads * head_dim + (long long)h * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float num = 0.f;
        for (int w = 0; w < warps; ++w)
            if (s_m[w] != -INFINITY) num += s_acc[w * head_dim + d] * __expf(s_m[w] - m_all);
        o[d] = denom > 0.f ? num / denom : 0.f;
    }
}

template <int PER, int KG>
__device__ __forceinline__ void attend(const float* q, const float* k, const float* v, float* out, int heads, int kv_heads,
                                       int head_dim, float scale, int prefix_arg, int region_arg, int queries,
                                       const int* window, const int* mask) {
    pdl_enter();
    // Heads of 32 * PER (64, 128, ...) fill every lane's run: no per-element checks there.
    if (head_dim == 32 * PER) {
        attend_keys<PER, KG, true>(q, k, v, out, heads, kv_heads, head_dim, scale, prefix_arg, region_arg, queries, window,
                                   mask);
    } else {
        attend_keys<PER, KG, false>(q, k, v, out, heads, kv_heads, head_dim, scale, prefix_arg, region_arg, queries, window,
                                    mask);
    }
}

// PER = 1 .. 8 (head_dim up to 256); KG keeps a group's K and V runs within 64 registers.
#define ATTENTION_ENTRY(NAME, PER, KG)                                                                               \
    extern "C" __global__ void __launch_bounds__(ATTENTION_MAX_THREADS) NAME(                                         \
        const float* q, const float* k, const float* v, float* out, int heads, int kv_heads, int head_dim, float scale, \
        int prefix_arg, int region_arg, int queries, const int* window, const int* mask) {                              \
        attend<PER, KG>(q, k, v, out, heads, kv_heads, head_dim, scale, prefix_arg, region_arg, queries, window, mask); \
    }
ATTENTION_ENTRY(attention_f32_p1, 1, 16)
ATTENTION_ENTRY(attention_f32_p2, 2, 16)
ATTENTION_ENTRY(attention_f32_p3, 3, 8)
ATTENTION_ENTRY(attention_f32_p4, 4, 8)
ATTENTION_ENTRY(attention_f32_p5, 5, 4)
ATTENTION_ENTRY(attention_f32_p6, 6, 4)
ATTENTION_ENTRY(attention_f32_p7, 7, 4)
ATTENTION_ENTRY(attention_f32_p8, 8, 4)
