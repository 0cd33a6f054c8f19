// The DeepSeek-V3 family's ops (src/backend/latent.rs): per-head products, absorbed MLA over
// the paged latent pool, and the routed experts. Activations f32, weights bf16, as the rest.
// Each row's result depends only on that row's inputs, so a sequence decodes the same bits
// alone or batched.

#define LATENT_WARPS 8
// kv_lora_rank up to 512 and qk_rope_head_dim up to 64: a lane's share of each.
#define MLA_LORA_PER 16
#define MLA_ROPE_PER 2
// Keys a warp of the absorbed attention has in flight at once.
#define MLA_KEYS 2
// Rows of a slot table's header (SLOT_TABLE_HEADER in src/backend/latent.rs).
#define SLOT_HEADER 3
// Experts one router block scores, and groups (n_group) it keeps.
#define ROUTE_MAX_EXPERTS 1024
#define ROUTE_MAX_GROUPS 64
// (token, expert) pairs an expert block accumulates at once; output rows a warp takes.
#define MOE_PAIRS 8
#define MOE_ROWS_PER_WARP 4
// The chunks of a weight row a lane has in flight at once (a step's linears are bound by how
// many bytes are on the way).
#define ROW_LOADS 4

// out[r, h*b + j] = x[r, h*a ..][..a] · w[h*b + j] for r < n. Grid: (heads, ceil(b /
// LATENT_WARPS)); a warp per output column, over every row.
extern "C" __global__ void head_matmul_bf16(const float* x, const bf16* w, float* out, int a, int b, int n) {
    pdl_enter();
    const int h = blockIdx.x, heads = gridDim.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int j = blockIdx.y * LATENT_WARPS + warp;
    if (j >= b) return;
    const bf16* wr = w + ((long long)h * b + j) * a;
    for (int r = 0; r < n; ++r) {
        const float* xr = x + ((long long)r * heads + h) * a;
        float acc = 0.f;
        for (int d = lane; d < a; d += 32) acc += xr[d] * __bfloat162float(wr[d]);
        acc = warp_sum(acc);
        if (lane == 0) out[((long long)r * heads + h) * b + j] = acc;
    }
}

// Row r's new latent (normed c, rotated rope key) into its own pool slot. Grid: rows.
extern "C" __global__ void mla_store_f32(const float* c_new, const float* pe_new, float* c_cache, float* pe_cache, int lora,
                                         int rope, const int* table) {
    pdl_enter();
    const int r = blockIdx.x;
    const long long own = table[SLOT_HEADER * r + 2];
    for (int i = threadIdx.x; i < lora; i += blockDim.x) c_cache[own * lora + i] = c_new[(long long)r * lora + i];
    for (int i = threadIdx.x; i < rope; i += blockDim.x) pe_cache[own * rope + i] = pe_new[(long long)r * rope + i];
}

// Absorbed attention of head h of row r over the slots the table lists for it: each warp
// walks a strided share of the keys with an online softmax, then the warps' states merge.
// Grid: (heads, rows), LATENT_WARPS warps.
extern "C" __global__ void __launch_bounds__(LATENT_WARPS * 32)
    mla_attention_f32(const float* q_lat, const float* q_pe, const float* c_cache, const float* pe_cache, float* out, int lora,
                      int rope, float scale, const int* table) {
    __shared__ float part_m[LATENT_WARPS], part_l[LATENT_WARPS];
    __shared__ float part_o[LATENT_WARPS][MLA_LORA_PER * 32];
    pdl_enter();
    const int h = blockIdx.x, heads = gridDim.x, r = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int visible = table[SLOT_HEADER * r];
    const int* slots = table + table[SLOT_HEADER * r + 1];
    const float* ql = q_lat + ((long long)r * heads + h) * lora;
    const float* qp = q_pe + ((long long)r * heads + h) * rope;
    float q1[MLA_LORA_PER], q2[MLA_ROPE_PER], acc[MLA_LORA_PER];
#pragma unroll
    for (int i = 0; i < MLA_LORA_PER; ++i) {
        const int d = lane + 32 * i;
        q1[i] = d < lora ? ql[d] * scale : 0.f;
        acc[i] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < MLA_ROPE_PER; ++i) {
        const int d = lane + 32 * i;
        q2[i] = d < rope ? qp[d] * scale : 0.f;
    }
    float m = -INFINITY, l = 0.f;
    // MLA_KEYS keys at a time: their loads and warp sums go out together, then each key
    // updates the running softmax in order, as one at a time would.
    for_each_slot<MLA_KEYS>(slots, warp, LATENT_WARPS, visible, [&](const int (&slot)[MLA_KEYS], int n) {
        float cv[MLA_KEYS][MLA_LORA_PER], dot[MLA_KEYS];
#pragma unroll
        for (int k = 0; k < MLA_KEYS; ++k) {
            const float* c = c_cache + (long long)slot[k] * lora;
            const float* p = pe_cache + (long long)slot[k] * rope;
            float d = 0.f;
#pragma unroll
            for (int i = 0; i < MLA_LORA_PER; ++i) {
                const int at = lane + 32 * i;
                cv[k][i] = at < lora ? c[at] : 0.f;
                d += q1[i] * cv[k][i];
            }
#pragma unroll
            for (int i = 0; i < MLA_ROPE_PER; ++i) {
                const int at = lane + 32 * i;
                if (at < rope) d += q2[i] * p[at];
            }
            dot[k] = d;
        }
#pragma unroll
        for (int k = 0; k < MLA_KEYS; ++k) dot[k] = warp_sum(dot[k]);
#pragma unroll
        for (int k = 0; k < MLA_KEYS; ++k) {
            if (k >= n) break;
            const float m_new = fmaxf(m, dot[k]);
            const float keep = __expf(m - m_new), weight = __expf(dot[k] - m_new);
            l = l * keep + weight;
#pragma unroll
            for (int i = 0; i < MLA_LORA_PER; ++i) acc[i] = acc[i] * keep + weight * cv[k][i];
            m = m_new;
        }
    });
    if (lane == 0) {
        part_m[warp] = m;
        part_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < MLA_LORA_PER; ++i) part_o[warp][lane + 32 * i] = acc[i];
    __syncthreads();
    float top = -INFINITY;
    for (int w = 0; w < LATENT_WARPS; ++w) top = fmaxf(top, part_m[w]);
    float total = 0.f;
    for (int w = 0; w < LATENT_WARPS; ++w) total += part_m[w] == -INFINITY ? 0.f : part_l[w] * __expf(part_m[w] - top);
    for (int d = threadIdx.x; d < lora; d += blockDim.x) {
        float o = 0.f;
        for (int w = 0; w < LATENT_WARPS; ++w)
            if (part_m[w] != -INFINITY) o += part_o[w][d] * __expf(part_m[w] - top);
        out[((long long)r * heads + h) * lora + d] = o / total;
    }
}

// The best of `v[0..len)` not yet taken, ties to the lower index (as the CPU router's
// stable sort); every lane gets it, and it is marked taken.
__device__ __forceinline__ int take_best(const float* v, int* taken, int len) {
    const int lane = threadIdx.x & 31;
    float best = -INFINITY;
    int at = 0x7fffffff;
    for (int i = lane; i < len; i += 32)
        if (!taken[i] && ranks_before(v[i], i, best, at)) {
            best = v[i];
            at = i;
        }
    warp_best(best, at);
    __syncwarp();
    if (lane == 0) taken[at] = 1;
    __syncwarp();
    return at;
}

// DeepSeek-V3's noaux_tc routing of row r (src/backend/cpu/route.rs): sigmoid scores, the
// bias only to choose, groups by their top-2 sum, the best topk_groups groups, the top
// per_token experts of those, weighed by the unbiased scores. Grid: rows, one warp.
extern "C" __global__ void moe_route_f32(const float* logits, int logit_cols, const float* bias, int experts, int groups,
                                         int topk_groups, int per_token, int norm_topk, float scaling, int* chosen,
                                         float* weights, int weight_cols) {
    __shared__ float scores[ROUTE_MAX_EXPERTS], choice[ROUTE_MAX_EXPERTS], group_score[ROUTE_MAX_GROUPS];
    __shared__ int taken[ROUTE_MAX_EXPERTS], picked[ROUTE_MAX_EXPERTS];
    pdl_enter();
    const int r = blockIdx.x, lane = threadIdx.x;
    const int group_size = experts / groups;
    for (int e = lane; e < experts; e += 32) {
        const float s = 1.f / (1.f + expf(-logits[(long long)r * logit_cols + e]));
        scores[e] = s;
        choice[e] = s + bias[e];
    }
    __syncwarp();
    for (int g = lane; g < groups; g += 32) {
        float a = -INFINITY, b = -INFINITY;
        for (int i = 0; i < group_size; ++i) {
            const float v = choice[g * group_size + i];
            if (v > a) {
                b = a;
                a = v;
            } else if (v > b) {
                b = v;
            }
        }
        group_score[g] = group_size > 1 ? a + b : a;
        taken[g] = 0;
    }
    __syncwarp();
    for (int e = lane; e < experts; e += 32) picked[e] = 0;
    __syncwarp();
    for (int k = 0; k < topk_groups; ++k) {
        const int g = take_best(group_score, taken, groups);
        for (int e = lane; e < group_size; e += 32) picked[g * group_size + e] = 1;
    }
    __syncwarp();
    for (int e = lane; e < experts; e += 32) {
        if (!picked[e]) choice[e] = 0.f;
        taken[e] = 0;
    }
    __syncwarp();
    float total = 0.f;
    for (int k = 0; k < per_token; ++k) {
        const int e = take_best(choice, taken, experts);
        total += scores[e];
        if (lane == 0) picked[k] = e;
    }
    __syncwarp();
    const float norm = norm_topk ? total + 1e-20f : 1.f;
    for (int k = lane; k < per_token; k += 32) {
        chosen[(long long)r * per_token + k] = picked[k];
        weights[(long long)r * weight_cols + k] = scores[picked[k]] / norm * scaling;
    }
}

// The pairs (row i, slot j) = i * per_token + j grouped by this rank's expert, in pair order
// within each (src/backend/latent.rs moe_plan_len): plan[0] the active experts, then
// (expert, run start, run length) for each, then the pairs from plan[1 + 3 * min(count,
// pairs)]. Each thread counts and then places the pairs of its experts; one thread lays the
// runs out between. One block of ROUTE_MAX_EXPERTS threads at most.
extern "C" __global__ void moe_plan_i32(const int* chosen, int pairs, int first, int count, int* plan) {
    __shared__ int runs[ROUTE_MAX_EXPERTS], starts[ROUTE_MAX_EXPERTS];
    pdl_enter();
    for (int e = threadIdx.x; e < count; e += blockDim.x) {
        int run = 0;
        for (int p = 0; p < pairs; ++p) run += chosen[p] - first == e;
        runs[e] = run;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int active = 0, placed = 0;
        for (int e = 0; e < count; ++e) {
            starts[e] = placed;
            if (runs[e] > 0) {
                plan[1 + 3 * active] = e;
                plan[2 + 3 * active] = placed;
                plan[3 + 3 * active] = runs[e];
                ++active;
                placed += runs[e];
            }
        }
        plan[0] = active;
    }
    __syncthreads();
    const int list = 1 + 3 * min(count, pairs);
    for (int e = threadIdx.x; e < count; e += blockDim.x) {
        int at = list + starts[e];
        for (int p = 0; p < pairs && at < list + starts[e] + runs[e]; ++p)
            if (chosen[p] - first == e) plan[at++] = p;
    }
}

// Sixteen float8_e4m3fn weights from a 16-byte-aligned address as floats, exactly: the
// hardware converts pairs to f16 (which holds every e4m3 value), then to f32. The lower byte
// of a pair is the lower half of the result.
__device__ __forceinline__ void unpack16_e4m3(const uint4& raw, float (&out)[16]) {
    const unsigned short* pairs = (const unsigned short*)&raw;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        unsigned int h;
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(pairs[i]));
        asm("cvt.f32.f16 %0, %1;" : "=f"(out[2 * i]) : "h"((unsigned short)(h & 0xffff)));
        asm("cvt.f32.f16 %0, %1;" : "=f"(out[2 * i + 1]) : "h"((unsigned short)(h >> 16)));
    }
}

// The stacked expert weights as the expert kernels read them: CHUNK consecutive weights of a
// row at a time (a lane's 16 bytes, fetched as Raw and expanded to f32 when they are used),
// and the scale that chunk's partial sum takes. A kernel takes a row's handle (`row`: where
// its bytes and scales start) once and reads its chunks through it, so the per-chunk work is
// an add and a shift, not the divisions that find a row's scales.
struct Bf16Experts {
    static constexpr int CHUNK = 8;
    using Raw = uint4;
    using Row = const bf16*;
    const bf16* w;
    int width;
    __device__ __forceinline__ Row row(long long r) const { return w + r * width; }
    __device__ __forceinline__ Raw fetch(Row row, int d) const { return ld_stream(row + d); }
    __device__ __forceinline__ void expand(const Raw& raw, float (&out)[CHUNK]) const { unpack8(raw, out); }
    __device__ __forceinline__ float scale(Row, int) const { return 1.f; }
};

// Weights as the checkpoint stores them (stacked experts, dense linears): their bytes, rows of
// `width` values, 16 values a lane at a time, and their f32 scales; each format says how to
// read them.
struct StoredExperts {
    static constexpr int CHUNK = 16;
    const unsigned char* w;
    int width;
    const float* scales;
};

// FP8 e4m3 bytes with one scale per (block_rows, block_cols) block, the grids stacked as the
// rows are (block_cols a multiple of 16, the widths whole blocks). A chunk's scale column is
// d / block_cols, a shift when block_cols is a power of two (DeepSeek's 128, the transposed
// key half's 16).
struct Fp8Experts : StoredExperts {
    int block_rows, block_cols;
    using Raw = uint4;
    struct Row {
        const unsigned char* bytes;
        const float* scales;
        int shift;  // log2(block_cols), or -1
        int block_cols;
    };
    __device__ __forceinline__ Row row(long long r) const {
        const int shift = (block_cols & (block_cols - 1)) == 0 ? __ffs(block_cols) - 1 : -1;
        return {w + r * width, scales + (r / block_rows) * (width / block_cols), shift, block_cols};
    }
    __device__ __forceinline__ const void* at(const Row& row, int d) const { return row.bytes + d; }
    __device__ __forceinline__ Raw fetch(const Row& row, int d) const { return ld_stream(row.bytes + d); }
    __device__ __forceinline__ void expand(const Raw& raw, float (&out)[CHUNK]) const { unpack16_e4m3(raw, out); }
    __device__ __forceinline__ float scale(const Row& row, int d) const {
        return row.scales[row.shift >= 0 ? d >> row.shift : d / row.block_cols];
    }
};

// compressed-tensors pack-quantized INT4 (src/model/quantized.rs, Int4Linear): element c of a
// row in bits 4c..4c+4 of the row's bytes, as q + 8, one f32 scale per group of 2^group_shift
// elements of a row; each weight is q * scale rounded to the scales' dtype (`rounding` 0:
// f32, 1: bf16, 2: f16), as the CPU dequantizes it, so the weights are the CPU's to the bit.
// The widths are multiples of the group, and the group of CHUNK: a chunk has one scale.
struct Int4Experts : StoredExperts {
    int group_shift, rounding;
    // The chunk's 16 packed values and its group's scale.
    struct Raw {
        uint2 u;
        float s;
    };
    struct Row {
        const unsigned char* bytes;
        const float* scales;
    };
    __device__ __forceinline__ Row row(long long r) const { return {w + r * (width / 2), scales + ((r * width) >> group_shift)}; }
    __device__ __forceinline__ Raw fetch(const Row& row, int d) const { return {ld_stream8(row.bytes + d / 2), row.scales[d >> group_shift]}; }
    __device__ __forceinline__ void expand(const Raw& raw, float (&out)[CHUNK]) const {
        const uint2 u = raw.u;
        const float s = raw.s;
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            const unsigned word = i < 8 ? u.x : u.y;
            const int q = (int)((word >> (4 * (i % 8))) & 0xfu) - 8;
            const float v = (float)q * s;
            if (rounding == 1) {
                out[i] = __bfloat162float(__float2bfloat16_rn(v));
            } else if (rounding == 2) {
                unsigned short h;
                asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
                asm("cvt.f32.f16 %0, %1;" : "=f"(out[i]) : "h"(h));
            } else {
                out[i] = v;
            }
        }
    }
    __device__ __forceinline__ float scale(const Row&, int) const { return 1.f; }
};

// CHUNK weights against CHUNK activations from a 32-byte-aligned address.
template <int CHUNK>
__device__ __forceinline__ float dot_chunk(const float (&w)[CHUNK], const float* x) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < CHUNK; i += 8) {
        float v[8];
        load8(x + i, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) s += w[i + j] * v[j];
    }
    return s;
}

// R weight rows against np <= MOE_PAIRS activation rows over columns [lo, hi) (lo a multiple
// of 32 * CHUNK), x_of(q) the start of row q: sums[r][q] = w_rows[r][lo..hi] · x_q[lo..hi]
// over the whole warp. A lane visits its chunks in the same order whatever R, so each sum is
// the same bits alone or beside another row.
template <int R, class W, class X>
__device__ __forceinline__ void row_dots(const W& w, const typename W::Row (&rows)[R], int lo, int hi, int np, X x_of,
                                         float (&sums)[R][MOE_PAIRS]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int q = 0; q < MOE_PAIRS; ++q) sums[r][q] = 0.f;
    // Where each input row starts, found once for the whole row of weights.
    const float* xs[MOE_PAIRS];
#pragma unroll
    for (int q = 0; q < MOE_PAIRS; ++q) xs[q] = q < np ? x_of(q) : nullptr;
    constexpr int STEP = 32 * W::CHUNK;
    for (int d0 = lo + W::CHUNK * lane; d0 < hi; d0 += ROW_LOADS * STEP) {
        // Every load of the round first, then the arithmetic.
        typename W::Raw raw[R][ROW_LOADS];
        float sc[R][ROW_LOADS];
#pragma unroll
        for (int u = 0; u < ROW_LOADS; ++u) {
            if (d0 + u * STEP < hi) {
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    raw[r][u] = w.fetch(rows[r], d0 + u * STEP);
                    sc[r][u] = w.scale(rows[r], d0 + u * STEP);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < ROW_LOADS; ++u) {
            if (d0 + u * STEP >= hi) break;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float wv[W::CHUNK];
                w.expand(raw[r][u], wv);
#pragma unroll
                for (int q = 0; q < MOE_PAIRS; ++q) {
                    if (q >= np) break;
                    sums[r][q] += sc[r][u] * dot_chunk(wv, xs[q] + d0 + u * STEP);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int q = 0; q < MOE_PAIRS; ++q) {
            if (q >= np) break;
            sums[r][q] = warp_sum(sums[r][q]);
        }
}

// One active expert's gate and up rows over its pairs: act[p, o] = silu(gate_o · x) * (up_o ·
// x), x the pair's token row; the calling kernel has waited for the one before. Grid:
// (min(count, pairs), ceil(inner / (LATENT_WARPS * MOE_ROWS_PER_WARP))).
template <class W>
__device__ __forceinline__ void gate_up_rows(const float* x, W w, const int* plan, int per_token, int hidden, int inner, int list,
                                             float* act) {
    if (blockIdx.x >= plan[0]) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int e = plan[1 + 3 * blockIdx.x], start = plan[2 + 3 * blockIdx.x], run = plan[3 + 3 * blockIdx.x];
    const int* pairs = plan + list + start;
    for (int k = 0; k < MOE_ROWS_PER_WARP; ++k) {
        const int o = (blockIdx.y * LATENT_WARPS + warp) * MOE_ROWS_PER_WARP + k;
        if (o >= inner) return;
        const long long gate = (long long)e * 2 * inner + o;
        const typename W::Row rows[2] = {w.row(gate), w.row(gate + inner)};
        for (int p0 = 0; p0 < run; p0 += MOE_PAIRS) {
            const int np = min(MOE_PAIRS, run - p0);
            // Lane q holds pair p0 + q and its token: a chunk finds x_q by a shuffle, where a
            // load of the pair and a division stood between it and its loads of x.
            const int pair = pairs[p0 + min(lane, np - 1)], token = pair / per_token;
            float sums[2][MOE_PAIRS];
            row_dots(w, rows, 0, hidden, np, [&](int q) { return x + (long long)__shfl_sync(FULL_WARP, token, q) * hidden; }, sums);
#pragma unroll
            for (int q = 0; q < MOE_PAIRS; ++q) {
                if (q >= np) break;
                const float g = sums[0][q], u = sums[1][q];
                const int at = __shfl_sync(FULL_WARP, pair, q);
                if (lane == 0) act[(long long)at * inner + o] = g / (1.f + __expf(-g)) * u;
            }
        }
    }
}

// The warp's `per_warp` output rows o < n_out of its block's share (`block` the block's
// index along them): weight row row_of(o) against each of `count` inputs, MOE_PAIRS at a
// time. Input i is named by key_of(i) (a pair, or i itself), x_of(key) its start; lane 0
// hands each sum to put(key, o, sum). Lane q holds the key of the round's input q, so a
// chunk finds its x by a shuffle, not by a load.
template <class W, class Row, class Key, class X, class Put>
__device__ __forceinline__ void warp_rows(const W& w, int per_warp, int block, int n_out, Row row_of, int width, int count,
                                          Key key_of, X x_of, Put put) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int k = 0; k < per_warp; ++k) {
        const int o = (block * LATENT_WARPS + warp) * per_warp + k;
        if (o >= n_out) return;
        for (int i0 = 0; i0 < count; i0 += MOE_PAIRS) {
            const int np = min(MOE_PAIRS, count - i0);
            const int held = key_of(i0 + min(lane, np - 1));
            const typename W::Row rows[1] = {w.row(row_of(o))};
            float sums[1][MOE_PAIRS];
            row_dots(w, rows, 0, width, np, [&](int q) { return x_of(__shfl_sync(FULL_WARP, held, q)); }, sums);
#pragma unroll
            for (int q = 0; q < MOE_PAIRS; ++q) {
                if (q >= np) break;
                const int key = __shfl_sync(FULL_WARP, held, q);
                if (lane == 0) put(key, o, sums[0][q]);
            }
        }
    }
}

// One active expert's down rows over its pairs: y[p, o] = down_o · act[p]. Grid:
// (min(count, pairs), ceil(hidden / (LATENT_WARPS * MOE_ROWS_PER_WARP))).
template <class W>
__device__ __forceinline__ void down_rows(const float* act, W w, const int* plan, int hidden, int inner, int list, float* y) {
    if (blockIdx.x >= plan[0]) return;
    const int e = plan[1 + 3 * blockIdx.x], start = plan[2 + 3 * blockIdx.x], run = plan[3 + 3 * blockIdx.x];
    const int* pairs = plan + list + start;
    warp_rows(
        w, MOE_ROWS_PER_WARP, blockIdx.y, hidden, [&](int o) { return (long long)e * hidden + o; }, inner, run,
        [&](int i) { return pairs[i]; }, [&](int pair) { return act + (long long)pair * inner; },
        [&](int pair, int o, float sum) { y[(long long)pair * hidden + o] = sum; });
}

// Before a kernel waits on the one that writes its x: the columns [lo, hi) of the weight row
// its warp will take, asked of L2, so the weight stream starts while the previous kernel
// drains (the loads that use them come after the wait and find them there).
template <class W>
__device__ __forceinline__ void prefetch_row(const W& w, const typename W::Row& row, int lo, int hi) {
    const int lane = threadIdx.x & 31;
    for (int d = lo + W::CHUNK * lane; d < hi; d += 32 * W::CHUNK) asm volatile("prefetch.global.L2 [%0];" ::"l"(w.at(row, d)));
}

// bf16 experts (hidden and inner multiples of 8).
extern "C" __global__ void __launch_bounds__(LATENT_WARPS * 32)
    moe_gate_up_bf16(const float* x, const bf16* gate_up, const int* plan, int per_token, int hidden, int inner, int list,
                     float* act) {
    pdl_enter();
    gate_up_rows(x, Bf16Experts{gate_up, hidden}, plan, per_token, hidden, inner, list, act);
}

extern "C" __global__ void __launch_bounds__(LATENT_WARPS * 32)
    moe_down_bf16(const float* act, const bf16* down, const int* plan, int hidden, int inner, int list, float* y) {
    pdl_enter();
    down_rows(act, Bf16Experts{down, inner}, plan, hidden, inner, list, y);
}

// The entry points of experts as the checkpoint stores them: FP8 with block scales, INT4 with
// group scales. W is built from its StoredExperts (the bytes, the row width, the scales) and
// the format's two numbers (A, B).
#define MOE_STORED_ENTRIES(FORMAT, W, A, B)                                                                           \
    extern "C" __global__ void __launch_bounds__(LATENT_WARPS * 32)                                                   \
        moe_gate_up_##FORMAT(const float* x, const unsigned char* gate_up, const float* scales, int A, int B,        \
                             const int* plan, int per_token, int hidden, int inner, int list, float* act) {           \
        pdl_enter();                                                                                                  \
        gate_up_rows(x, W{{gate_up, hidden, scales}, A, B}, plan, per_token, hidden, inner, list, act);                 \
    }                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(LATENT_WARPS * 32)                                                   \
        moe_down_##FORMAT(const float* act, const unsigned char* down, const float* scales, int A, int B,            \
                          const int* plan, int hidden, int inner, int list, float* y) {                               \
        pdl_enter();                                                                                                  \
        down_rows(act, W{{down, inner, scales}, A, B}, plan, hidden, inner, list, y);                                   \
    }
MOE_STORED_ENTRIES(fp8, Fp8Experts, block_rows, block_cols)
MOE_STORED_ENTRIES(int4, Int4Experts, group_shift, rounding)

// head_matmul_bf16's product by FP8 weights as stored (a multiple of 16 and of block_cols,
// block_cols of 16). Grid: (heads, ceil(b / LATENT_WARPS)); a warp per output column, over
// the rows MOE_PAIRS at a time.
extern "C" __global__ void __launch_bounds__(LATENT_WARPS * 32)
    head_matmul_fp8(const float* x, const unsigned char* w, const float* scales, int block_rows, int block_cols, float* out, int a,
                    int b, int n) {
    pdl_launch_dependents();
    const int h = blockIdx.x, heads = gridDim.x;
    const Fp8Experts fp8{{w, a, scales}, block_rows, block_cols};
    const auto row_of = [&](int j) { return (long long)h * b + j; };
    const int col = blockIdx.y * LATENT_WARPS + (threadIdx.x >> 5);
    if (col < b) prefetch_row(fp8, fp8.row(row_of(col)), 0, a);
    pdl_wait();
    warp_rows(
        fp8, 1, blockIdx.y, b, row_of, a, n, [](int r) { return r; }, [&](int r) { return x + ((long long)r * heads + h) * a; },
        [&](int r, int j, float sum) { out[((long long)r * heads + h) * b + j] = sum; });
}

// A dense FP8 linear kept as the checkpoint stores it, over the first `rows` rows of x
// ([.., k_in], k_in a multiple of block_cols, block_cols of 16): y[m, o] = w_o · x[m], or
// y[m, o] += it with `accumulate` (the residual add). Activations and sums in f32 and the
// weights the CPU's to the bit, so a decode, verify or short prefill computes what the host
// reference does (src/backend/cuda/stored.rs). `splits` warps (1, 2, 4 or 8) share a row,
// each over one slice of K in whole spans of a warp's chunks, and their sums are added in
// slice order: a weight of few rows (kv_a_proj's 64 rope rows) still puts enough warps on
// its loads, and the cut depends on the weight alone, so a row is the same bits at any row
// count. Grid: ceil(n_out / (LATENT_WARPS / splits)).
extern "C" __global__ void __launch_bounds__(LATENT_WARPS * 32)
    linear_fp8(const float* x, const unsigned char* w, const float* scales, int block_rows, int block_cols, int rows, int k_in,
               int n_out, int splits, int accumulate, float* y) {
    pdl_launch_dependents();
    __shared__ float partial[LATENT_WARPS][MOE_PAIRS];
    const Fp8Experts fp8{{w, k_in, scales}, block_rows, block_cols};
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int o = blockIdx.x * (LATENT_WARPS / splits) + warp / splits, slice = warp % splits;
    constexpr int SPAN = 32 * Fp8Experts::CHUNK;
    const int len = (k_in + SPAN * splits - 1) / (SPAN * splits) * SPAN;
    const int lo = min(k_in, slice * len), hi = min(k_in, lo + len);
    // A warp past the last row still meets the block's barriers, with nothing to read.
    const bool live = o < n_out;
    const Fp8Experts::Row row[1] = {fp8.row(live ? o : 0)};
    if (live) prefetch_row(fp8, row[0], lo, hi);
    pdl_wait();
    for (int i0 = 0; i0 < rows; i0 += MOE_PAIRS) {
        const int np = min(MOE_PAIRS, rows - i0);
        float sums[1][MOE_PAIRS];
        row_dots(fp8, row, live ? lo : hi, hi, np, [&](int q) { return x + (long long)(i0 + q) * k_in; }, sums);
        // Lane q takes input q's sum (every lane holds all of them after the warp sum).
        float sum = 0.f;
#pragma unroll
        for (int q = 0; q < MOE_PAIRS; ++q)
            if (q == lane) sum = sums[0][q];
        if (splits > 1) {
            if (lane < MOE_PAIRS) partial[warp][lane] = sum;
            __syncthreads();
            sum = 0.f;
            if (lane < np)
                for (int s = 0; s < splits; ++s) sum += partial[warp - slice + s][lane];
            __syncthreads();
        }
        if (live && slice == 0 && lane < np) {
            float* out = y + (long long)(i0 + lane) * n_out + o;
            *out = accumulate ? *out + sum : sum;
        }
    }
}

// A dense FP8 linear's [rows, cols] values rounded to bf16, for cuBLAS at prefill sizes.
// Grid-stride over chunks of 16 values (cols a multiple of 16).
extern "C" __global__ void dequant_fp8_bf16(const unsigned char* w, const float* scales, int block_rows, int block_cols, int rows,
                                            int cols, bf16* out) {
    pdl_enter();
    const Fp8Experts fp8{{w, cols, scales}, block_rows, block_cols};
    const long long chunks = (long long)rows * cols / Fp8Experts::CHUNK;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < chunks; i += (long long)gridDim.x * blockDim.x) {
        const long long row = i * Fp8Experts::CHUNK / cols;
        const int d = (int)(i * Fp8Experts::CHUNK % cols);
        const Fp8Experts::Row handle = fp8.row(row);
        float v[Fp8Experts::CHUNK];
        fp8.expand(fp8.fetch(handle, d), v);
        const float s = fp8.scale(handle, d);
#pragma unroll
        for (int j = 0; j < Fp8Experts::CHUNK; ++j) out[row * cols + d + j] = __float2bfloat16_rn(v[j] * s);
    }
}

// out[i] = Σ_j weights[i][j] · y[i * per_token + j] over the slots whose expert this rank
// holds, in slot order. Grid: (rows, column blocks): a decode row's columns spread over
// many SMs, where one block took them all in turn.
extern "C" __global__ void moe_combine_f32(const float* y, const int* chosen, const float* weights, int weight_cols,
                                           int per_token, int first, int count, int hidden, float* out) {
    pdl_enter();
    const int i = blockIdx.x;
    for (int d = blockIdx.y * blockDim.x + threadIdx.x; d < hidden; d += gridDim.y * blockDim.x) {
        float o = 0.f;
        for (int j = 0; j < per_token; ++j) {
            const int local = chosen[(long long)i * per_token + j] - first;
            if (local >= 0 && local < count)
                o += weights[(long long)i * weight_cols + j] * y[((long long)i * per_token + j) * hidden + d];
        }
        out[(long long)i * hidden + d] = o;
    }
}
