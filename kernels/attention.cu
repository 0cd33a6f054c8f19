// Flash-style attention over a layer's KV cache (bf16 [slots, kv_heads * head_dim], each
// value widened to f32 as it is loaded, which is exact; q, the sums and the output are f32), one
// kernel for prefill (causal), decode (one query) and tree verification (an explicit
// mask), and one for a batch of sequences over a paged pool. It never materialises the
// scores: each warp keeps a running max and sum (online softmax) and the warps' states are
// merged at the end, as in flash-decoding.
//
// attention_f32_p{PER}: slots [0, prefix) are committed and visible to every query. Slots
// [prefix, prefix + region) hold the current region; the `queries` queries are its last
// rows. Query i sees region slot j when
//   mask == NULL : j <= region - queries + i                    (causal)
//   mask != NULL : mask[i * region + j] != 0                    ([queries, region] of 0/1)
// prefix and region are read from `window` ([prefix, region] on the device) when it is
// not NULL, so a captured graph replays at any length; else from the arguments.
//
// paged_attention_f32_p{PER}: row r of the forward (r = row_base + blockIdx.y) sees the
// keys at the pool slots table[table[2r + 1] + j] for j < table[2r] (its sequence's slots
// in position order, its own last): the host writes the table once per forward.
//
// Grid: (heads / HG * slots, rows). Heads are the fast index so that the query heads sharing
// a KV head run side by side and read its keys once from HBM. Block: `warps` warps. A query
// that sees V keys is split used = min(splits, max(1, V / ATTENTION_SPLIT_KEYS)) ways: by
// V alone, so a query sums the same alone, batched, or as a verify row. The host sizes the
// slots to fill the GPU, not to the splits: a slot takes every slots-th split (a slot past
// `used` returns at once). Key rank r of the query's visible sequence goes to worker r % (used *
// warps) (worker = split * warps + warp), KG of a worker's keys at a time (their K and V
// rows loaded together, so several loads are in flight); lane l holds a run of PER =
// ceil(head_dim / 32) elements of q and of the output (head_dim up to 256). With more than
// one split, each block writes its merged state to `partial` and the last block of the
// (row, head) to finish (counted in `counters`, which it resets) merges them in split order.
// One entry point per PER: with PER known, the registers hold exactly the run, so a small
// head takes more keys per group (KG) and a warp waits on fewer rounds of loads.
// Dynamic shared memory: warps * (head_dim + 2) floats.
#define ATTENTION_MAX_THREADS 512
// Keys per split of a long query (see above); the host sizes its split grid by the same number.
#define ATTENTION_SPLIT_KEYS 2048

// A bf16 value widened to f32: a bf16 is the upper half of an f32, so this is exact.
__device__ __forceinline__ float widen_low(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float widen_high(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

// Four (two) consecutive values as f32: q and activations are f32, K and V bf16 (from an
// 8- or 4-byte-aligned address, widened as they arrive).
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float2 load2(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float4 load4(const bf16* p) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    return make_float4(widen_low(u.x), widen_high(u.x), widen_low(u.y), widen_high(u.y));
}
__device__ __forceinline__ float2 load2(const bf16* p) {
    const unsigned u = *reinterpret_cast<const unsigned*>(p);
    return make_float2(widen_low(u), widen_high(u));
}

// The lane's `count` (<= PER) elements, the rest zero. WIDE: every lane holds a full run
// (head_dim == 32 * PER, which also aligns each run), loaded in pieces of 4 or 2 values
// where PER allows; otherwise element by element. Without a branch either way: the loads
// of a group of keys stay together.
template <int PER, bool WIDE, typename T>
__device__ __forceinline__ void load_lane(const T* p, int count, float (&v)[PER]) {
    if (WIDE && PER % 4 == 0) {
#pragma unroll
        for (int e = 0; e < PER / 4; ++e) {
            const float4 f = load4(p + 4 * e);
            v[4 * e] = f.x;
            v[4 * e + 1] = f.y;
            v[4 * e + 2] = f.z;
            v[4 * e + 3] = f.w;
        }
    } else if (WIDE && PER % 2 == 0) {
#pragma unroll
        for (int e = 0; e < PER / 2; ++e) {
            const float2 f = load2(p + 2 * e);
            v[2 * e] = f.x;
            v[2 * e + 1] = f.y;
        }
    } else {
#pragma unroll
        for (int e = 0; e < PER; ++e) v[e] = WIDE || e < count ? to_f32(p[e]) : 0.f;
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

// The keys one query sees: ranks [0, prefix) at slots[r] (or slot r when slots is NULL),
// then the region's visible slots prefix + j in order.
struct Keys {
    int prefix;
    const int* slots;
    int region;
    // Causal visibility: region slot j is visible when j <= last_visible.
    int last_visible;
    // Or this row of a [queries, region] mask.
    const int* mask_row;

    __device__ __forceinline__ bool sees(int j) const { return mask_row ? mask_row[j] != 0 : j <= last_visible; }

    __device__ int visible() const {
        if (!mask_row) return prefix + max(0, min(region, last_visible + 1));
        int n = prefix;
        for (int j = 0; j < region; ++j) n += mask_row[j] != 0;
        return n;
    }
};

// Where one (row, head)'s block states meet when its keys are split over blocks.
struct Splits {
    int count;
    float* partial;
    int* counters;
};

// Whether this block is the last of a (row, head group)'s `used` split blocks to get here,
// counted at the group's first pair: the last merges them, and its reads then see every
// block's writes.
__device__ __forceinline__ bool last_split(const Splits& splits, int pair, int used) {
    __shared__ int s_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(&splits.counters[pair], 1) == used - 1;
    __syncthreads();
    const bool last = s_last != 0;
    if (last) __threadfence();
    return last;
}

// Element d of one head's output from its `used` split states ([max, sum, width sums] each),
// merged in split order.
__device__ __forceinline__ float merged_split(const volatile float* states, int used, int width, int d) {
    float m_max = -INFINITY;
    for (int z = 0; z < used; ++z) m_max = fmaxf(m_max, states[z * (width + 2)]);
    float total = 0.f, num = 0.f;
    for (int z = 0; z < used; ++z) {
        const float mz = states[z * (width + 2)];
        if (mz == -INFINITY) continue;
        const float c = __expf(mz - m_max);
        total += states[z * (width + 2) + 1] * c;
        num += states[z * (width + 2) + 2 + d] * c;
    }
    return total > 0.f ? num / total : 0.f;
}

// One block: the HG query heads h0 .. h0 + HG - 1, which share KV head kvh, so that each
// K and V row is read once for all of them (they came from HBM once before, but from L2
// once per head, which bounded batched and long-context decode). Each head's sums are
// formed exactly as a block of its own forms them.
template <int PER, int KG, bool WIDE, int HG>
__device__ __forceinline__ void attend_split(const float* q, const bf16* k, const bf16* v, float* o, int heads,
                                             int kv_heads, int head_dim, float scale, const Keys& keys, int pair,
                                             Splits splits, int split, int used) {
    extern __shared__ float smem[];
    const int h0 = (blockIdx.x % (heads / HG)) * HG;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int kvh = h0 / (heads / kv_heads);
    const int workers = used * warps, worker = split * warps + warp;
    // Lanes hold consecutive runs of PER elements; with a head_dim that is not a multiple
    // of 32 the last lanes hold fewer (or none).
    const int count = max(0, min(PER, head_dim - lane * PER));
    const long long kv_width = (long long)kv_heads * head_dim;
    const bf16* kbase = k + (long long)kvh * head_dim + lane * PER;
    const bf16* vbase = v + (long long)kvh * head_dim + lane * PER;

    float qv[HG][PER], acc[HG][PER], m[HG], l[HG];
#pragma unroll
    for (int i = 0; i < HG; ++i) {
        load_lane<PER, WIDE>(q + i * head_dim + lane * PER, count, qv[i]);
#pragma unroll
        for (int e = 0; e < PER; ++e) {
            qv[i][e] = e < count ? qv[i][e] * scale : 0.f;
            acc[i][e] = 0.f;
        }
        m[i] = -INFINITY;
        l[i] = 0.f;
    }
    // Up to KG slots of this warp waiting to be visited (warp-uniform). A group is visited
    // whole: the slots after the last waiting one repeat it (no branch around the loads) and
    // weigh 0, which leaves the sums as they are.
    int pending[KG];
    int waiting = 0;
    // Visit the waiting keys: one running-softmax update per head for the group, in a fixed order.
    auto visit = [&]() {
        float kr[KG][PER], vr[KG][PER];
#pragma unroll
        for (int g = 0; g < KG; ++g) {
            const long long row = (long long)pending[g] * kv_width;
            load_lane<PER, WIDE>(kbase + row, count, kr[g]);
            load_lane<PER, WIDE>(vbase + row, count, vr[g]);
        }
        // Each lane ends up with one key's score (of the `32 / KG` lanes that share it), so
        // the max and the exponential are taken once per key, not once per key and lane.
        const int mine = lane / (32 / KG);
#pragma unroll
        for (int i = 0; i < HG; ++i) {
            float dot[KG];
#pragma unroll
            for (int g = 0; g < KG; ++g) {
                // q is zero past the lane's run, and so are the loaded elements.
                float d = 0.f;
#pragma unroll
                for (int e = 0; e < PER; ++e) d += qv[i][e] * kr[g][e];
                dot[g] = d;
            }
            const float score = transposed_sum<KG>(dot, lane);
            const float m_new = fmaxf(m[i], warp_reduce(mine < waiting ? score : -INFINITY, MaxOp()));
            const float corr = __expf(m[i] - m_new);
            const float p_mine = mine < waiting ? __expf(score - m_new) : 0.f;
            float p[KG];
#pragma unroll
            for (int g = 0; g < KG; ++g) p[g] = __shfl_sync(0xffffffffu, p_mine, g * (32 / KG));
            float p_sum = 0.f;
#pragma unroll
            for (int g = 0; g < KG; ++g) p_sum += p[g];
            l[i] = l[i] * corr + p_sum;
#pragma unroll
            for (int e = 0; e < PER; ++e) {
                float a = acc[i][e] * corr;
#pragma unroll
                for (int g = 0; g < KG; ++g) a += p[g] * vr[g][e];
                acc[i][e] = a;
            }
            m[i] = m_new;
        }
        waiting = 0;
    };
    auto queue = [&](int slot) {
#pragma unroll
        for (int g = 0; g < KG; ++g)
            if (g == waiting) pending[g] = slot;
        if (++waiting == KG) visit();
    };
    // Keys go to workers by their rank in the query's visible sequence, not by slot, and a
    // worker's keys are grouped in that order too: a verify-tree query then sums exactly
    // as the same token decoded alone after its ancestors were committed, and a paged
    // query as the same query over contiguous slots, so speculative and batched greedy
    // output equal target-only output.
    if (keys.slots)
        for_each_slot<1>(keys.slots, worker, workers, keys.prefix, [&](const int (&slot)[1], int) { queue(slot[0]); });
    else {
        // Contiguous ranks (one sequence's committed keys): whole groups go straight to
        // `visit`, the same keys in the same groups as `queue` forms them. Queueing them key
        // by key cost a 32K-token batch-1 decode 7 % of its speed (testdata/gpu/run-37).
        int r = worker;
        for (; r + (KG - 1) * workers < keys.prefix; r += KG * workers) {
#pragma unroll
            for (int g = 0; g < KG; ++g) pending[g] = r + g * workers;
            waiting = KG;
            visit();
        }
        for (; r < keys.prefix; r += workers) queue(r);
    }
    for (int j = 0, rank = keys.prefix; j < keys.region; ++j) {
        if (!keys.sees(j)) continue;
        if (rank % workers == worker) queue(keys.prefix + j);
        ++rank;
    }
    if (waiting > 0) {
#pragma unroll
        for (int g = 1; g < KG; ++g)
            if (g >= waiting) pending[g] = pending[g - 1];
        visit();
    }

    // Each head's warp states side by side: warps * (head_dim + 2) floats a head.
    const int stride = warps * (head_dim + 2);
#pragma unroll
    for (int i = 0; i < HG; ++i) {
        float* s_m = smem + i * stride;
        float* s_acc = s_m + 2 * warps;
        if (lane == 0) {
            s_m[warp] = m[i];
            s_m[warps + warp] = l[i];
        }
#pragma unroll
        for (int e = 0; e < PER; ++e)
            if (e < count) s_acc[warp * head_dim + lane * PER + e] = acc[i][e];
    }
    __syncthreads();

    bool merge = false;
    for (int i = 0; i < HG; ++i) {
        const float* s_m = smem + i * stride;
        const float* s_l = s_m + warps;
        const float* s_acc = s_m + 2 * warps;
        float m_all = -INFINITY;
        for (int w = 0; w < warps; ++w) m_all = fmaxf(m_all, s_m[w]);
        float denom = 0.f;
        for (int w = 0; w < warps; ++w)
            if (s_m[w] != -INFINITY) denom += s_l[w] * __expf(s_m[w] - m_all);
        float* state = used > 1 ? splits.partial + ((long long)(pair + i) * splits.count + split) * (head_dim + 2) : nullptr;
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
            float num = 0.f;
            for (int w = 0; w < warps; ++w)
                if (s_m[w] != -INFINITY) num += s_acc[w * head_dim + d] * __expf(s_m[w] - m_all);
            if (state)
                state[2 + d] = num;
            else
                o[i * head_dim + d] = denom > 0.f ? num / denom : 0.f;
        }
        if (state && threadIdx.x == 0) {
            state[0] = m_all;
            state[1] = denom;
        }
        merge = state != nullptr;
    }
    if (!merge || !last_split(splits, pair, used)) return;
    for (int i = 0; i < HG; ++i) {
        const volatile float* states = splits.partial + (long long)(pair + i) * splits.count * (head_dim + 2);
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x) o[i * head_dim + d] = merged_split(states, used, head_dim, d);
    }
    if (threadIdx.x == 0) splits.counters[pair] = 0;
}

// A block's share of a query's splits: the grid holds gridDim.x / (heads / HG) split slots,
// and slot z takes splits z, z + slots, ... of the `used` the query's own key count calls
// for. Each split sums as a block of its own would, so the bits depend on the key count
// alone, not on the slots a launch has: a large batch launches one slot and no idle blocks.
template <int PER, int KG, bool WIDE, int HG>
__device__ __forceinline__ void attend_keys(const float* q, const bf16* k, const bf16* v, float* o, int heads, int kv_heads,
                                            int head_dim, float scale, const Keys keys, int pair, Splits splits) {
    const int groups = heads / HG, slot = blockIdx.x / groups, slots = gridDim.x / groups;
    const int used = min(splits.count, max(1, keys.visible() / ATTENTION_SPLIT_KEYS));
    for (int split = slot; split < used; split += slots) {
        // The last split's states are still being read from shared memory.
        if (split != slot) __syncthreads();
        attend_split<PER, KG, WIDE, HG>(q, k, v, o, heads, kv_heads, head_dim, scale, keys, pair, splits, split, used);
    }
}

template <int PER, int KG, int HG>
__device__ __forceinline__ void attend(const float* q, const bf16* k, const bf16* v, float* o, int heads, int kv_heads,
                                       int head_dim, float scale, const Keys& keys, int pair, Splits splits) {
    // Heads of 32 * PER (64, 128, ...) fill every lane's run: no per-element checks there.
    if (head_dim == 32 * PER) {
        attend_keys<PER, KG, true, HG>(q, k, v, o, heads, kv_heads, head_dim, scale, keys, pair, splits);
    } else {
        attend_keys<PER, KG, false, HG>(q, k, v, o, heads, kv_heads, head_dim, scale, keys, pair, splits);
    }
}

template <int PER, int KG, int HG>
__device__ __forceinline__ void attend_window(const float* q, const bf16* k, const bf16* v, float* out, int heads,
                                              int kv_heads, int head_dim, float scale, int prefix_arg, int region_arg,
                                              int queries, const int* window, const int* mask, int splits,
                                              float* partial, int* counters) {
    pdl_enter();
    const int qi = blockIdx.y, h0 = (blockIdx.x % (heads / HG)) * HG;
    const int prefix = window ? window[0] : prefix_arg;
    const int region = window ? window[1] : region_arg;
    const Keys keys{prefix, nullptr, region, region - queries + qi, mask ? mask + (long long)qi * region : nullptr};
    const long long at = (long long)qi * heads * head_dim + (long long)h0 * head_dim;
    attend<PER, KG, HG>(q + at, k, v, out + at, heads, kv_heads, head_dim, scale, keys, qi * heads + h0,
                        Splits{splits, partial, counters});
}

template <int PER, int KG, int HG>
__device__ __forceinline__ void attend_paged(const float* q, const bf16* k, const bf16* v, float* out, int heads,
                                             int kv_heads, int head_dim, float scale, const int* table, int row_base,
                                             int splits, float* partial, int* counters) {
    pdl_enter();
    const int row = row_base + blockIdx.y, h0 = (blockIdx.x % (heads / HG)) * HG;
    const Keys keys{table[2 * row], table + table[2 * row + 1], 0, -1, nullptr};
    const long long at = (long long)row * heads * head_dim + (long long)h0 * head_dim;
    attend<PER, KG, HG>(q + at, k, v, out + at, heads, kv_heads, head_dim, scale, keys, blockIdx.y * heads + h0,
                        Splits{splits, partial, counters});
}

// PER = 1 .. 8 (head_dim up to 256); KG keeps a group's K and V runs within 64 registers.
// NAME is the entry's suffix: _p{PER}, and _g2 for blocks of two heads, for heads of 128
// (the host takes it where the heads sharing a KV head are even, unless the blocks would be
// few). The bits depend on KG, not on the heads a block, so _g2 takes _p4's KG: a query sums
// the same in a batch as alone. Four heads of 8 keys would spill, and 4 keys a group slow
// the one-head kernel. Each compiled entry adds to a cold start's kernel compile.
#define ATTENTION_ENTRY(NAME, PER, KG, HG)                                                                             \
    extern "C" __global__ void __launch_bounds__(ATTENTION_MAX_THREADS) attention_f32##NAME(                           \
        const float* q, const bf16* k, const bf16* v, float* out, int heads, int kv_heads, int head_dim, float scale,   \
        int prefix_arg, int region_arg, int queries, const int* window, const int* mask, int splits, float* partial,    \
        int* counters) {                                                                                                \
        attend_window<PER, KG, HG>(q, k, v, out, heads, kv_heads, head_dim, scale, prefix_arg, region_arg, queries,     \
                                   window, mask, splits, partial, counters);                                            \
    }                                                                                                                   \
    extern "C" __global__ void __launch_bounds__(ATTENTION_MAX_THREADS) paged_attention_f32##NAME(                     \
        const float* q, const bf16* k, const bf16* v, float* out, int heads, int kv_heads, int head_dim, float scale,   \
        const int* table, int row_base, int splits, float* partial, int* counters) {                                    \
        attend_paged<PER, KG, HG>(q, k, v, out, heads, kv_heads, head_dim, scale, table, row_base, splits, partial,     \
                                  counters);                                                                            \
    }
ATTENTION_ENTRY(_p1, 1, 16, 1)
ATTENTION_ENTRY(_p2, 2, 16, 1)
ATTENTION_ENTRY(_p3, 3, 8, 1)
ATTENTION_ENTRY(_p4, 4, 8, 1)
ATTENTION_ENTRY(_p5, 5, 4, 1)
ATTENTION_ENTRY(_p6, 6, 4, 1)
ATTENTION_ENTRY(_p7, 7, 4, 1)
ATTENTION_ENTRY(_p8, 8, 4, 1)
ATTENTION_ENTRY(_p4_g2, 4, 8, 2)

// Causal prefill attention in tiles, for forwards of many queries (a prompt chunk): a block
// takes PREFILL_TILE_Q consecutive query rows of one head, and each tile of PREFILL_TILE_K
// keys is loaded into shared memory once for all of them (the one-query-a-block kernel
// above reads every key once per query). Query i of the launch is forward row row0 + i and
// sees keys [0, visible0 + i): at slot j (slots NULL) or slots[j]. With `table` set (a
// sequence of a paged batch, laid out as for paged_attention_f32), visible0 = table[2 * row0]
// and slots = table + table[2 * row0 + 1]; else visible0 is the argument.
//
// Grid: (heads, ceil(queries / PREFILL_TILE_Q)). Block: PREFILL_WARPS warps, each with
// PREFILL_TILE_Q / PREFILL_WARPS queries held in registers, lane l holding elements
// 4l .. 4l + 3 of each (head_dim up to 128, a multiple of 4). A warp walks the tile's keys
// PREFILL_KG at a time as the step kernel does, each group's K and V runs loaded from shared
// memory once for all its queries. Dynamic shared memory: 2 * PREFILL_TILE_K * head_dim floats.
#define PREFILL_TILE_Q 16
#define PREFILL_TILE_K 32
#define PREFILL_WARPS 4
#define PREFILL_KG 8

// Keys [base, base + PREFILL_TILE_K) of one KV head into shared memory (zeros past `keys`).
// A thread's loads are all issued before its first store, so they are in flight together:
// loading element by element, each waiting on the last, made the tile loads most of a
// prefill's time. WIDE (head_dim 128): pieces of 4 values (8 bytes of bf16), PREFILL_TILE_K * 32 / blockDim each.
template <bool WIDE>
__device__ __forceinline__ void load_tile(const bf16* k, const bf16* v, float* ks, float* vs, int base, int keys,
                                          const int* slots, long long head_at, long long kv_width, int head_dim) {
    if constexpr (WIDE) {
        constexpr int PIECES = PREFILL_TILE_K * 32 / (PREFILL_WARPS * 32);
        float4 kp[PIECES], vp[PIECES];
#pragma unroll
        for (int r = 0; r < PIECES; ++r) {
            const int at = threadIdx.x + r * PREFILL_WARPS * 32, j = at / 32, c = at % 32;
            kp[r] = vp[r] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (base + j < keys) {
                const long long row = (slots ? slots[base + j] : base + j) * kv_width + head_at;
                kp[r] = load4(k + row + 4 * c);
                vp[r] = load4(v + row + 4 * c);
            }
        }
#pragma unroll
        for (int r = 0; r < PIECES; ++r) {
            const int at = threadIdx.x + r * PREFILL_WARPS * 32;
            reinterpret_cast<float4*>(ks)[at] = kp[r];
            reinterpret_cast<float4*>(vs)[at] = vp[r];
        }
    } else {
        for (int i = threadIdx.x; i < PREFILL_TILE_K * head_dim; i += blockDim.x) {
            const int j = i / head_dim, e = i % head_dim;
            float kv_k = 0.f, kv_v = 0.f;
            if (base + j < keys) {
                const long long row = (slots ? slots[base + j] : base + j) * kv_width + head_at;
                kv_k = to_f32(k[row + e]);
                kv_v = to_f32(v[row + e]);
            }
            ks[i] = kv_k;
            vs[i] = kv_v;
        }
    }
}

template <bool WIDE>
__device__ __forceinline__ void prefill_tiles(const float* q, const bf16* k, const bf16* v, float* out, int heads,
                                              int kv_heads, int head_dim, float scale, int row0, int queries,
                                              int visible0_arg, const int* table) {
    constexpr int QW = PREFILL_TILE_Q / PREFILL_WARPS;
    constexpr int KG = PREFILL_KG;
    extern __shared__ float prefill_smem[];
    float* ks = prefill_smem;                       // [TILE_K][head_dim]
    float* vs = ks + PREFILL_TILE_K * head_dim;     // [TILE_K][head_dim]
    const int h = blockIdx.x, kvh = h / (heads / kv_heads);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int count = max(0, min(4, head_dim - lane * 4));
    const int first = blockIdx.y * PREFILL_TILE_Q;  // the block's first query
    const int tile_queries = min(PREFILL_TILE_Q, queries - first);
    const int visible0 = table ? table[2 * row0] : visible0_arg;
    const int* slots = table ? table + table[2 * row0 + 1] : nullptr;
    const long long q_width = (long long)heads * head_dim, kv_width = (long long)kv_heads * head_dim;

    float qv[QW][4], acc[QW][4], m[QW], l[QW];
    int visible[QW];
#pragma unroll
    for (int w = 0; w < QW; ++w) {
        const int qi = warp * QW + w;
        visible[w] = qi < tile_queries ? visible0 + first + qi : 0;
        const float* qrow = q + (row0 + first + min(qi, tile_queries - 1)) * q_width + (long long)h * head_dim;
        load_lane<4, WIDE>(qrow + lane * 4, count, qv[w]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            qv[w][e] = e < count ? qv[w][e] * scale : 0.f;
            acc[w][e] = 0.f;
        }
        m[w] = -INFINITY;
        l[w] = 0.f;
    }
    // Keys the block's last query sees: the tiles to visit.
    const int keys = visible0 + first + tile_queries - 1;
    for (int base = 0; base < keys; base += PREFILL_TILE_K) {
        __syncthreads();
        load_tile<WIDE>(k, v, ks, vs, base, keys, slots, (long long)kvh * head_dim, kv_width, head_dim);
        __syncthreads();
        const int tile_keys = min(PREFILL_TILE_K, keys - base);
        for (int g0 = 0; g0 < tile_keys; g0 += KG) {
            float kr[KG][4], vr[KG][4];
#pragma unroll
            for (int g = 0; g < KG; ++g) {
                load_lane<4, WIDE>(ks + (g0 + g) * head_dim + lane * 4, count, kr[g]);
                load_lane<4, WIDE>(vs + (g0 + g) * head_dim + lane * 4, count, vr[g]);
            }
            // Each lane ends up with one key's score (of the 32 / KG lanes that share it).
            const int mine = lane / (32 / KG);
#pragma unroll
            for (int w = 0; w < QW; ++w) {
                if (base + g0 >= visible[w]) continue;
                float dot[KG];
#pragma unroll
                for (int g = 0; g < KG; ++g) {
                    float d = 0.f;
#pragma unroll
                    for (int e = 0; e < 4; ++e) d += qv[w][e] * kr[g][e];
                    dot[g] = d;
                }
                const float score = transposed_sum<KG>(dot, lane);
                const bool seen = base + g0 + mine < visible[w];
                const float m_new = fmaxf(m[w], warp_reduce(seen ? score : -INFINITY, MaxOp()));
                const float corr = __expf(m[w] - m_new);
                const float p_mine = seen ? __expf(score - m_new) : 0.f;
                float p_sum = 0.f, a[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) a[e] = acc[w][e] * corr;
#pragma unroll
                for (int g = 0; g < KG; ++g) {
                    const float pg = __shfl_sync(0xffffffffu, p_mine, g * (32 / KG));
                    p_sum += pg;
#pragma unroll
                    for (int e = 0; e < 4; ++e) a[e] += pg * vr[g][e];
                }
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[w][e] = a[e];
                l[w] = l[w] * corr + p_sum;
                m[w] = m_new;
            }
        }
    }
#pragma unroll
    for (int w = 0; w < QW; ++w) {
        const int qi = warp * QW + w;
        if (qi >= tile_queries) break;
        float* o = out + (row0 + first + qi) * q_width + (long long)h * head_dim + lane * 4;
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (e < count) o[e] = l[w] > 0.f ? acc[w][e] / l[w] : 0.f;
    }
}

extern "C" __global__ void __launch_bounds__(PREFILL_WARPS * 32)
    prefill_attention_f32(const float* q, const bf16* k, const bf16* v, float* out, int heads, int kv_heads,
                          int head_dim, float scale, int row0, int queries, int visible0_arg, const int* table) {
    pdl_enter();
    // Heads of 128 fill every lane's run: no per-element checks there.
    if (head_dim == 128)
        prefill_tiles<true>(q, k, v, out, heads, kv_heads, head_dim, scale, row0, queries, visible0_arg, table);
    else
        prefill_tiles<false>(q, k, v, out, heads, kv_heads, head_dim, scale, row0, queries, visible0_arg, table);
}

// A warp's 16 query rows on tf32 mma.m16n8k8 tiles, as the tensor-core kernels below hold
// them: each thread keeps rows g and g + 8 (g = lane / 4, t = lane % 4). In S = Q·Kᵀ, k-slots
// t and t + 4 of an 8-wide d step are elements 2t and 2t + 1 (the same for Q and K, so the sum
// is the same dot product), which ldmatrix gives as one pair of a K row. The scores stay in the
// accumulator registers, at keys 2t and 2t + 1 of each 8-key tile; P·V takes k-slot t as key
// 2t and t + 4 as key 2t + 1, so the scores are already its A operand, and ldmatrix.trans gives
// V's matching pair of rows. K and V rows sit D + 8 values apart in shared memory, which keeps
// both ldmatrix reads conflict-free.
template <int D>
struct MmaRows {
    static constexpr int S = D + 8, DT = D / 8;
    // Q (times the scale) as A fragments.
    unsigned qa[DT][4];
    // The output sums, the running max of rows g and g + 8, and this thread's share of their
    // softmax sums (the quad's four shares are added by `sums`).
    float o[DT][4];
    float m_lo, m_hi, l_lo, l_hi;

    // Rows g and g + 8 of Q from `lo` and `hi` (an absent row is zeros).
    __device__ __forceinline__ void start(const float* lo, const float* hi, float scale, int t) {
#pragma unroll
        for (int s = 0; s < DT; ++s) {
            const float2 l2 = lo ? load2(lo + 8 * s + 2 * t) : make_float2(0.f, 0.f);
            const float2 h2 = hi ? load2(hi + 8 * s + 2 * t) : make_float2(0.f, 0.f);
            qa[s][0] = tf32_of(l2.x * scale);
            qa[s][1] = tf32_of(h2.x * scale);
            qa[s][2] = tf32_of(l2.y * scale);
            qa[s][3] = tf32_of(h2.y * scale);
        }
#pragma unroll
        for (int n = 0; n < DT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
        m_lo = m_hi = -INFINITY;
        l_lo = l_hi = 0.f;
    }

    // The scores of NT 8-key tiles whose K rows start at `ks`, each over d in two chains of
    // products (two in flight instead of one), added at the end.
    template <int NT>
    __device__ __forceinline__ void scores(float (&s)[NT][4], const bf16* ks, int lane) const {
        const int ld_row = lane & 7, ld_matrix = lane >> 3;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            float odd[4] = {0.f, 0.f, 0.f, 0.f};
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int d4 = 0; d4 < DT; d4 += 4) {
                unsigned kb[4];
                ldmatrix_x4<false>(kb, ks + (8 * j + ld_row) * S + 8 * (d4 + ld_matrix));
#pragma unroll
                for (int m = 0; m < 4; ++m)
                    mma_tf32(m % 2 ? odd : s[j], qa[d4 + m][0], qa[d4 + m][1], qa[d4 + m][2], qa[d4 + m][3], tf32_low(kb[m]),
                             tf32_high(kb[m]));
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] += odd[e];
        }
    }

    // Fold NT tiles of scores (masked keys at -inf) into the running softmax and O += P·V
    // with the V rows at `vs`. Rows that have seen no key yet stay at zero.
    template <int NT>
    __device__ __forceinline__ void fold(float (&s)[NT][4], const bf16* vs, int lane) {
        const int ld_row = lane & 7, ld_matrix = lane >> 3;
        float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            mx_lo = fmaxf(mx_lo, fmaxf(s[j][0], s[j][1]));
            mx_hi = fmaxf(mx_hi, fmaxf(s[j][2], s[j][3]));
        }
#pragma unroll
        for (int offset = 1; offset < 4; offset *= 2) {
            mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, offset));
            mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, offset));
        }
        // The exponentials of a row with no key yet start from 0, which leaves its sums at zero.
        const float base_lo = mx_lo == -INFINITY ? 0.f : mx_lo, base_hi = mx_hi == -INFINITY ? 0.f : mx_hi;
        const float c_lo = __expf(m_lo - base_lo), c_hi = __expf(m_hi - base_hi);
        l_lo *= c_lo;
        l_hi *= c_hi;
#pragma unroll
        for (int n = 0; n < DT; ++n) {
            o[n][0] *= c_lo;
            o[n][1] *= c_lo;
            o[n][2] *= c_hi;
            o[n][3] *= c_hi;
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const float p0 = __expf(s[j][0] - base_lo), p1 = __expf(s[j][1] - base_lo);
            const float p2 = __expf(s[j][2] - base_hi), p3 = __expf(s[j][3] - base_hi);
            l_lo += p0 + p1;
            l_hi += p2 + p3;
            const unsigned a0 = tf32_of(p0), a1 = tf32_of(p2), a2 = tf32_of(p1), a3 = tf32_of(p3);
#pragma unroll
            for (int n4 = 0; n4 < DT; n4 += 4) {
                unsigned vb[4];
                ldmatrix_x4<true>(vb, vs + (8 * j + ld_row) * S + 8 * (n4 + ld_matrix));
#pragma unroll
                for (int m = 0; m < 4; ++m) mma_tf32(o[n4 + m], a0, a1, a2, a3, tf32_low(vb[m]), tf32_high(vb[m]));
            }
        }
        m_lo = mx_lo;
        m_hi = mx_hi;
    }

    // The quad's softmax sums of rows g and g + 8 (every lane of the quad ends with them).
    __device__ __forceinline__ void sums() {
#pragma unroll
        for (int offset = 1; offset < 4; offset *= 2) {
            l_lo += __shfl_xor_sync(0xffffffffu, l_lo, offset);
            l_hi += __shfl_xor_sync(0xffffffffu, l_hi, offset);
        }
    }
};

// The same causal prefill on the tensor cores (tf32 mma.m16n8k8, f32 accumulation), for
// heads of D = 64 or 128: a block takes PREFILL_MMA_TILE_Q consecutive queries of one head,
// 16 a warp as the rows of its MmaRows; both products are mma tiles: S = Q·Kᵀ over a tile of
// PREFILL_MMA_TILE_K keys, then O += P·V. The K and V tiles stay bf16 in shared memory (a bf16
// is exact in tf32), copied there by cp.async two tiles deep: the next tile's copies are in
// flight while this one's products run (copied through registers and synchronised before any
// product, the loads were most of the kernel's time: testdata/gpu/run-22/NOTES.md). A query's
// sums depend on its own keys and the tile grid from key 0 only, so a prompt sums the same
// however it was chunked. Dynamic shared memory: 2 (stages) * 2 (K, V) * PREFILL_MMA_TILE_K *
// (D + 8) bf16.
#define PREFILL_MMA_TILE_Q 64
#define PREFILL_MMA_TILE_K 32
#define PREFILL_MMA_WARPS 4

template <int D>
__device__ __forceinline__ void prefill_mma(const float* q, const bf16* k, const bf16* v, float* out, int heads,
                                            int kv_heads, float scale, int row0, int queries, int visible0_arg,
                                            const int* table) {
    constexpr int S = D + 8, KT = PREFILL_MMA_TILE_K, NT = KT / 8, DT = D / 8, THREADS = PREFILL_MMA_WARPS * 32;
    // 16-byte pieces of one tile's K (or V) rows, and a thread's share.
    constexpr int ROW_PIECES = D / 8, PIECES = KT * ROW_PIECES / THREADS;
    static_assert(DT % 4 == 0 && KT * ROW_PIECES % THREADS == 0, "ldmatrix takes four 8-wide steps at a time");
    extern __shared__ __align__(16) unsigned char prefill_stages[];
    bf16* stages = reinterpret_cast<bf16*>(prefill_stages);  // [2][K, V][KT][S]
    const int h = blockIdx.x, kvh = h / (heads / kv_heads);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int first = blockIdx.y * PREFILL_MMA_TILE_Q;
    const int tile_queries = min(PREFILL_MMA_TILE_Q, queries - first);
    const int visible0 = table ? table[2 * row0] : visible0_arg;
    const int* slots = table ? table + table[2 * row0 + 1] : nullptr;
    const long long q_width = (long long)heads * D, kv_width = (long long)kv_heads * D, head_at = (long long)kvh * D;
    // The thread's two rows (rows past the launch's queries repeat its last and are not written).
    const int r_lo = warp * 16 + g, r_hi = r_lo + 8;
    const int q_lo = min(r_lo, tile_queries - 1), q_hi = min(r_hi, tile_queries - 1);
    const int vis_lo = visible0 + first + q_lo, vis_hi = visible0 + first + q_hi;
    const bool idle = warp * 16 >= tile_queries;
    // Keys the block's last query sees, and the warp's last.
    const int keys = visible0 + first + tile_queries - 1;
    const int warp_keys = visible0 + first + min(warp * 16 + 15, tile_queries - 1);

    // Tile `base` into stage `stage` (zeros past the keys the block sees).
    auto copy_tile = [&](int base, int stage) {
        bf16* ks = stages + stage * 2 * KT * S;
        bf16* vs = ks + KT * S;
#pragma unroll
        for (int r = 0; r < PIECES; ++r) {
            const int at = threadIdx.x + r * THREADS, j = at / ROW_PIECES, c = at % ROW_PIECES;
            const bool valid = base + j < keys;
            const long long row = valid ? (slots ? slots[base + j] : base + j) * kv_width + head_at + 8 * c : 0;
            cp_async16(ks + j * S + 8 * c, k + row, valid);
            cp_async16(vs + j * S + 8 * c, v + row, valid);
        }
        cp_async_commit();
    };
    copy_tile(0, 0);

    MmaRows<D> rows;
    rows.start(q + (row0 + first + q_lo) * q_width + (long long)h * D, q + (row0 + first + q_hi) * q_width + (long long)h * D,
               scale, t);

    for (int base = 0, stage = 0; base < keys; base += KT, stage ^= 1) {
        // The next tile's copies go out before this one's products; an empty group at the end
        // keeps the wait below the same.
        if (base + KT < keys)
            copy_tile(base + KT, stage ^ 1);
        else
            cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16* ks = stages + stage * 2 * KT * S;
        const bf16* vs = ks + KT * S;
        if (!idle && base < warp_keys) {
            float s[NT][4];
            rows.scores(s, ks, lane);
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int key = base + 8 * j + 2 * t;
                if (key >= vis_lo) s[j][0] = -INFINITY;
                if (key + 1 >= vis_lo) s[j][1] = -INFINITY;
                if (key >= vis_hi) s[j][2] = -INFINITY;
                if (key + 1 >= vis_hi) s[j][3] = -INFINITY;
            }
            rows.fold(s, vs, lane);
        }
        // Every warp is done with this stage before the next iteration copies into it.
        __syncthreads();
    }
    cp_async_wait<0>();
    rows.sums();
    const float inv_lo = rows.l_lo > 0.f ? 1.f / rows.l_lo : 0.f, inv_hi = rows.l_hi > 0.f ? 1.f / rows.l_hi : 0.f;
    float* lo = out + (row0 + first + r_lo) * q_width + (long long)h * D + 2 * t;
    float* hi = out + (row0 + first + r_hi) * q_width + (long long)h * D + 2 * t;
#pragma unroll
    for (int n = 0; n < DT; ++n) {
        if (r_lo < tile_queries) *reinterpret_cast<float2*>(lo + 8 * n) = make_float2(rows.o[n][0] * inv_lo, rows.o[n][1] * inv_lo);
        if (r_hi < tile_queries) *reinterpret_cast<float2*>(hi + 8 * n) = make_float2(rows.o[n][2] * inv_hi, rows.o[n][3] * inv_hi);
    }
}

// Step attention on the tensor cores for batches of many sequences (paged decode and chain
// verify rows), for heads of D = 64 or 128 where the query heads sharing a KV head are at
// most 16: a block takes one query row and one KV head, whose G = heads / kv_heads query heads
// are the A rows of tf32 mma.m16n8k8 tiles (rows past G are zeros), so each K and V row is
// read once for all of them (the one-query-a-block kernel reads it once per head or two, which
// bounded batched decode: testdata/gpu/run-23/NOTES.md). The keys come in tiles of
// STEP_MMA_TILE_K, copied by cp.async STEP_MMA_STAGES deep, and each of the block's warps takes
// a quarter of every tile with a running softmax of its own; the warps merge in order at the
// end. A row that sees V keys (at table slots, as
// for paged_attention_f32) is split used = min(splits, max(1, V / STEP_MMA_SPLIT_KEYS)) ways
// into equal runs, each tiled from its start: the bits depend on V alone, so a row sums the
// same in any batch this kernel runs. Split states merge as in attend_split. Grid: (kv_heads *
// slots, rows), slot z taking splits z, z + slots, ... Dynamic shared memory: STEP_MMA_STAGES
// * 2 (K, V) * STEP_MMA_TILE_K * (D + 8) bf16 (more than the warps' states for the merge).
#define STEP_MMA_TILE_K 64
#define STEP_MMA_WARPS 4
#define STEP_MMA_STAGES 3
#define STEP_MMA_SPLIT_KEYS 512

template <int D>
__device__ __forceinline__ void step_mma_split(const float* q, const bf16* k, const bf16* v, float* o, int heads,
                                               int kv_heads, float scale, const int* slots, int pair, Splits splits,
                                               int split, int used, int total) {
    constexpr int S = D + 8, KT = STEP_MMA_TILE_K, DT = D / 8, THREADS = STEP_MMA_WARPS * 32;
    constexpr int ROW_PIECES = D / 8, PIECES = KT * ROW_PIECES / THREADS, WARP_KEYS = KT / STEP_MMA_WARPS;
    static_assert(DT % 4 == 0 && WARP_KEYS == 16, "a warp takes two 8-key tiles of each tile");
    extern __shared__ __align__(16) unsigned char step_stages[];
    bf16* stages = reinterpret_cast<bf16*>(step_stages);  // [STAGES][K, V][KT][S]
    const int kvh = blockIdx.x % kv_heads, group = heads / kv_heads, h0 = kvh * group;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const long long kv_width = (long long)kv_heads * D, head_at = (long long)kvh * D;
    // This split's ranks.
    const int lo = (int)((long long)split * total / used), hi = (int)((long long)(split + 1) * total / used);
    const int tiles = (hi - lo + KT - 1) / KT;

    auto copy_tile = [&](int tile) {
        bf16* ks = stages + (tile % STEP_MMA_STAGES) * 2 * KT * S;
        bf16* vs = ks + KT * S;
        const int base = lo + tile * KT;
#pragma unroll
        for (int r = 0; r < PIECES; ++r) {
            const int at = threadIdx.x + r * THREADS, j = at / ROW_PIECES, c = at % ROW_PIECES;
            const bool valid = base + j < hi;
            const long long row = valid ? slots[base + j] * kv_width + head_at + 8 * c : 0;
            cp_async16(ks + j * S + 8 * c, k + row, valid);
            cp_async16(vs + j * S + 8 * c, v + row, valid);
        }
    };
    // The first STAGES - 1 tiles go out before anything else (a group each, empty or not, so
    // that the wait below always leaves the same count in flight).
#pragma unroll
    for (int tile = 0; tile < STEP_MMA_STAGES - 1; ++tile) {
        if (tile < tiles) copy_tile(tile);
        cp_async_commit();
    }

    // The G heads' queries are rows g and g + 8 (zeros past G).
    MmaRows<D> rows;
    rows.start(g < group ? q + (long long)(h0 + g) * D : nullptr, g + 8 < group ? q + (long long)(h0 + g + 8) * D : nullptr,
               scale, t);

    for (int tile = 0; tile < tiles; ++tile) {
        // Tile + STAGES - 1 goes into the stage tile - 1 used, which every warp left at the
        // end of the last iteration.
        if (tile + STEP_MMA_STAGES - 1 < tiles) copy_tile(tile + STEP_MMA_STAGES - 1);
        cp_async_commit();
        cp_async_wait<STEP_MMA_STAGES - 1>();
        __syncthreads();
        const bf16* ks = stages + (tile % STEP_MMA_STAGES) * 2 * KT * S + warp * WARP_KEYS * S;
        const bf16* vs = ks + KT * S;
        const int first = lo + tile * KT + warp * WARP_KEYS;
        float s[2][4];
        rows.scores(s, ks, lane);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int rank = first + 8 * j + 2 * t;
            if (rank >= hi) s[j][0] = s[j][2] = -INFINITY;
            if (rank + 1 >= hi) s[j][1] = s[j][3] = -INFINITY;
        }
        // A warp's share of the last tile may be past the split: its rows then stay as they are.
        rows.fold(s, vs, lane);
        __syncthreads();
    }
    cp_async_wait<0>();
    rows.sums();
    // The warps' states in the stage memory (free now): per warp, 16 rows of [max, sum, D sums].
    float* states = reinterpret_cast<float*>(step_stages);
    constexpr int ROW = D + 2;
    float* mine = states + warp * 16 * ROW;
    if (t == 0) {
        mine[g * ROW] = rows.m_lo;
        mine[g * ROW + 1] = rows.l_lo;
        mine[(g + 8) * ROW] = rows.m_hi;
        mine[(g + 8) * ROW + 1] = rows.l_hi;
    }
#pragma unroll
    for (int n = 0; n < DT; ++n) {
        mine[g * ROW + 2 + 8 * n + 2 * t] = rows.o[n][0];
        mine[g * ROW + 3 + 8 * n + 2 * t] = rows.o[n][1];
        mine[(g + 8) * ROW + 2 + 8 * n + 2 * t] = rows.o[n][2];
        mine[(g + 8) * ROW + 3 + 8 * n + 2 * t] = rows.o[n][3];
    }
    __syncthreads();
    // Each head's warps merged in order: its output, or its split's state.
    for (int at = threadIdx.x; at < group * D; at += THREADS) {
        const int i = at / D, d = at % D;
        float m_all = -INFINITY;
        for (int w = 0; w < STEP_MMA_WARPS; ++w) m_all = fmaxf(m_all, states[(w * 16 + i) * ROW]);
        float denom = 0.f, num = 0.f;
        for (int w = 0; w < STEP_MMA_WARPS; ++w) {
            const float* st = states + (w * 16 + i) * ROW;
            if (st[0] == -INFINITY) continue;
            const float c = __expf(st[0] - m_all);
            denom += st[1] * c;
            num += st[2 + d] * c;
        }
        if (used == 1) {
            o[(long long)(h0 + i) * D + d] = denom > 0.f ? num / denom : 0.f;
        } else {
            float* state = splits.partial + ((long long)(pair + i) * splits.count + split) * (D + 2);
            state[2 + d] = num;
            if (d == 0) {
                state[0] = m_all;
                state[1] = denom;
            }
        }
    }
    if (used == 1 || !last_split(splits, pair, used)) return;
    for (int at = threadIdx.x; at < group * D; at += THREADS) {
        const int i = at / D, d = at % D;
        o[(long long)(h0 + i) * D + d] = merged_split(splits.partial + (long long)(pair + i) * splits.count * (D + 2), used, D, d);
    }
    __syncthreads();
    if (threadIdx.x == 0) splits.counters[pair] = 0;
}

// One row's block: its splits (see above).
template <int D>
__device__ __forceinline__ void step_mma(const float* q, const bf16* k, const bf16* v, float* o, int heads, int kv_heads,
                                         float scale, const int* slots, int total, int pair, Splits splits) {
    const int used = min(splits.count, max(1, total / STEP_MMA_SPLIT_KEYS));
    const int slot = blockIdx.x / kv_heads, count = gridDim.x / kv_heads;
    for (int split = slot; split < used; split += count) {
        // The last split's states are still being read from shared memory.
        if (split != slot) __syncthreads();
        step_mma_split<D>(q, k, v, o, heads, kv_heads, scale, slots, pair, splits, split, used, total);
    }
}

// The tensor-core kernels of one head width: the prefill (prefill_mma) and the step
// attention over a paged pool (step_mma), with the arguments of paged_attention_f32_p*.
#define MMA_ENTRY(D)                                                                                                   \
    extern "C" __global__ void __launch_bounds__(PREFILL_MMA_WARPS * 32) prefill_attention_tf32_d##D(                   \
        const float* q, const bf16* k, const bf16* v, float* out, int heads, int kv_heads, int head_dim, float scale,   \
        int row0, int queries, int visible0_arg, const int* table) {                                                   \
        pdl_enter();                                                                                                    \
        prefill_mma<D>(q, k, v, out, heads, kv_heads, scale, row0, queries, visible0_arg, table);                       \
    }                                                                                                                   \
    extern "C" __global__ void __launch_bounds__(STEP_MMA_WARPS * 32) paged_attention_tf32_d##D(                        \
        const float* q, const bf16* k, const bf16* v, float* out, int heads, int kv_heads, int head_dim, float scale,   \
        const int* table, int row_base, int splits, float* partial, int* counters) {                                    \
        pdl_enter();                                                                                                    \
        const int row = row_base + blockIdx.y, h0 = blockIdx.x % kv_heads * (heads / kv_heads);                         \
        const long long at = (long long)row * heads * D;                                                               \
        step_mma<D>(q + at, k, v, out + at, heads, kv_heads, scale, table + table[2 * row + 1], table[2 * row],         \
                    blockIdx.y * heads + h0, Splits{splits, partial, counters});                                        \
    }
MMA_ENTRY(64)
MMA_ENTRY(128)
