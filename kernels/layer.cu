// A whole decoder layer (pre-norm attention with RoPE, then a SwiGLU MLP, each added to the
// residual stream) in one persistent launch, for a drafter's forward of up to
// LAYER_MAX_ROWS rows. The module is attention.cu's device code followed by this file.
//
// Why: a small drafter at batch 1 is latency-bound. Its seven launches a layer each pay a
// launch's ramp and drain for a few microseconds of work, so a 0.5B draft forward cost
// nearly what a 1.5B target step does, which capped the speculative speed-up. Here one
// block per SM runs the layer's five phases with a grid-wide barrier between dependent
// ones:
//   A  RMSNorm of h (every block, into shared memory); q, k, v (+ bias); RoPE; q to its
//      scratch, k and v into their cache rows. A warp takes a RoPE pair of rows, so the
//      rotation needs no exchange.
//   B  attention, a (query, head) per block at a time (attention.cu's `attend_keys`).
//   C  o projection, added into h.
//   D  RMSNorm of h; gate and up; SiLU(gate) * up.
//   E  down projection, added into h.
// The sums run in other orders than the op-by-op kernels', so rows differ from theirs in the
// last bits: only a drafter, whose rows the target verifies, may use this (a target's verify
// rows must equal its decode steps bit for bit).
//
// Activations written inside the launch are read with ld.global.cg (L2, never a stale L1
// line). The barrier needs every block resident at once: the host launches one block per SM
// after checking that one fits, and a barrier that waits over a second traps (a device
// error at the next sync, not a hang).

#define LAYER_THREADS 512
#define LAYER_WARPS (LAYER_THREADS / 32)
#define LAYER_MAX_ROWS 8

// Sense-reversing barrier over the grid: bar[0] counts arrivals, bar[LAYER_BARRIER_GEN] is
// the generation, a cache line away so the blocks polling it do not queue behind the
// arrivals' atomics. The last block to arrive resets the count, so the words are ready for
// the next barrier, launch or graph replay.
#define LAYER_BARRIER_GEN 32
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void grid_barrier(unsigned* bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned* generation = bar + LAYER_BARRIER_GEN;
        const unsigned seen = load_acquire(generation);
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(generation, 1u);
        } else {
            const long long start = clock64();
            while (load_acquire(generation) == seen) {
                if (clock64() - start > 4000000000ll) __trap();
            }
        }
        __threadfence();
    }
    __syncthreads();
}

// Copy rows [rows][cols] of a buffer written in this launch into shared memory.
__device__ __forceinline__ void stage_rows(const float* src, float* dst, int rows, int cols) {
    const int n4 = rows * cols / 4;
    for (int i = threadIdx.x; i < n4; i += blockDim.x)
        reinterpret_cast<float4*>(dst)[i] = __ldcg(reinterpret_cast<const float4*>(src) + i);
    __syncthreads();
}

// RMSNorm of the residual rows into shared memory, a warp per row.
__device__ __forceinline__ void stage_normed(const float* h, const bf16* w, float* xs, int rows, int hidden, float eps) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int r = warp; r < rows; r += LAYER_WARPS) {
        const float* src = h + (long long)r * hidden;
        float* dst = xs + r * hidden;
        float ss = 0.f;
        for (int i = lane * 4; i < hidden; i += 128) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(src + i));
            *reinterpret_cast<float4*>(dst + i) = v;
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
        const float inv = rsqrtf(warp_sum(ss) / (float)hidden + eps);
        __syncwarp();
        for (int i = lane; i < hidden; i += 32) dst[i] = dst[i] * inv * __bfloat162float(w[i]);
    }
    __syncthreads();
}

// Chunks of 8 weights a lane loads before using any: a warp's row of up to 32 * 8 *
// LAYER_BATCH columns is one round of loads.
#define LAYER_BATCH 4

// NW weight rows against the staged x rows [rows][k]: every lane ends with all the sums.
template <int NW>
__device__ __forceinline__ void warp_dots(const bf16* const (&w)[NW], const float* xs, int k, int rows,
                                          float (&acc)[NW][LAYER_MAX_ROWS]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int n = 0; n < NW; ++n)
#pragma unroll
        for (int r = 0; r < LAYER_MAX_ROWS; ++r) acc[n][r] = 0.f;
    for (int base = lane * 8; base < k; base += 256 * LAYER_BATCH) {
        uint4 wv[NW][LAYER_BATCH];
#pragma unroll
        for (int b = 0; b < LAYER_BATCH; ++b)
#pragma unroll
            for (int n = 0; n < NW; ++n)
                wv[n][b] = base + 256 * b < k ? ld_stream(w[n] + base + 256 * b) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int b = 0; b < LAYER_BATCH; ++b) {
            const int c = base + 256 * b;
            if (c >= k) break;
#pragma unroll
            for (int r = 0; r < LAYER_MAX_ROWS; ++r) {
                if (r >= rows) break;
                float xv[8];
                load8(xs + r * k + c, xv);
#pragma unroll
                for (int n = 0; n < NW; ++n) {
                    float wf[8];
                    unpack8(wv[n][b], wf);
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[n][r] += wf[e] * xv[e];
                }
            }
        }
    }
#pragma unroll
    for (int n = 0; n < NW; ++n)
#pragma unroll
        for (int r = 0; r < LAYER_MAX_ROWS; ++r)
            if (r < rows) acc[n][r] = warp_sum(acc[n][r]);
}

// Rows of a pass of `block_rows`.
#define LAYER_PASS_ROWS 8

// h[r][j] += W[j] . x[r] for every output row j: block b takes rows b, b + G, ... four at a
// time, its threads splitting K by 8-wide chunks (every weight load of a pass in flight at
// once), and the warps' partial sums meet in shared memory (`partial`, LAYER_WARPS *
// LAYER_PASS_ROWS * LAYER_MAX_ROWS floats).
__device__ __forceinline__ void block_rows(const bf16* w, const float* xs, int k, int rows, int n_out, float* h,
                                           int h_width, float* partial) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int chunks = k / 8;
    for (int first = blockIdx.x; first < n_out; first += gridDim.x * LAYER_PASS_ROWS) {
        float acc[LAYER_PASS_ROWS][LAYER_MAX_ROWS];
#pragma unroll
        for (int t = 0; t < LAYER_PASS_ROWS; ++t)
#pragma unroll
            for (int r = 0; r < LAYER_MAX_ROWS; ++r) acc[t][r] = 0.f;
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            float wv[LAYER_PASS_ROWS][8];
#pragma unroll
            for (int t = 0; t < LAYER_PASS_ROWS; ++t) {
                const int j = first + t * gridDim.x;
                if (j < n_out) unpack8(ld_stream(w + (long long)j * k + 8 * c), wv[t]);
                else
#pragma unroll
                    for (int e = 0; e < 8; ++e) wv[t][e] = 0.f;
            }
#pragma unroll
            for (int r = 0; r < LAYER_MAX_ROWS; ++r) {
                if (r >= rows) break;
                float xv[8];
                load8(xs + r * k + 8 * c, xv);
#pragma unroll
                for (int t = 0; t < LAYER_PASS_ROWS; ++t)
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[t][r] += wv[t][e] * xv[e];
            }
        }
#pragma unroll
        for (int t = 0; t < LAYER_PASS_ROWS; ++t)
#pragma unroll
            for (int r = 0; r < LAYER_MAX_ROWS; ++r) {
                if (r >= rows) break;
                const float v = warp_sum(acc[t][r]);
                if (lane == 0) partial[(warp * LAYER_PASS_ROWS + t) * LAYER_MAX_ROWS + r] = v;
            }
        __syncthreads();
        if (threadIdx.x < LAYER_PASS_ROWS * LAYER_MAX_ROWS) {
            const int t = threadIdx.x / LAYER_MAX_ROWS, r = threadIdx.x % LAYER_MAX_ROWS;
            const int j = first + t * gridDim.x;
            if (r < rows && j < n_out) {
                float sum = 0.f;
                for (int v = 0; v < LAYER_WARPS; ++v) sum += partial[(v * LAYER_PASS_ROWS + t) * LAYER_MAX_ROWS + r];
                float* dst = h + (long long)r * h_width + j;
                *dst = __ldcg(dst) + sum;
            }
        }
        __syncthreads();
    }
}

// Phase A's unit u: a RoPE pair of a q or k head, or two rows of a v head.
__device__ __forceinline__ void qkv_unit(int u, const float* xs, const bf16* wq, const bf16* wk, const bf16* wv,
                                         const bf16* bq, const bf16* bk, const bf16* bv, float* q, float* k_cache,
                                         float* v_cache, const float* cos_table, const float* sin_table,
                                         const int* positions, int interleaved, int rows, int hidden, int heads,
                                         int kv_heads, int head_dim, int slot) {
    const int half = head_dim / 2;
    const int head = u / half, j = u % half;
    const int kind = head < heads ? 0 : head < heads + kv_heads ? 1 : 2;
    const int hh = kind == 0 ? head : kind == 1 ? head - heads : head - heads - kv_heads;
    const bf16* w = kind == 0 ? wq : kind == 1 ? wk : wv;
    const bf16* bias = kind == 0 ? bq : kind == 1 ? bk : bv;
    // v has no rotation: any two of its rows will do.
    const int a = kind == 2 || interleaved ? 2 * j : j;
    const int b = kind == 2 || interleaved ? 2 * j + 1 : j + half;
    const long long row_a = (long long)hh * head_dim + a, row_b = (long long)hh * head_dim + b;
    const bf16* const pair[2] = {w + row_a * hidden, w + row_b * hidden};
    float acc[2][LAYER_MAX_ROWS];
    warp_dots<2>(pair, xs, hidden, rows, acc);
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < LAYER_MAX_ROWS; ++r) {
        if (r >= rows || lane != r) continue;
        float x0 = acc[0][r], x1 = acc[1][r];
        if (bias) {
            x0 += __bfloat162float(bias[row_a]);
            x1 += __bfloat162float(bias[row_b]);
        }
        const long long kv_row = (long long)(slot + r) * kv_heads * head_dim;
        if (kind == 2) {
            v_cache[kv_row + row_a] = x0;
            v_cache[kv_row + row_b] = x1;
            continue;
        }
        const long long t = (long long)positions[r] * half + j;
        float r0, r1;
        rotate_pair(x0, x1, cos_table[t], sin_table[t], r0, r1);
        float* dst = kind == 0 ? q + (long long)r * heads * head_dim : k_cache + kv_row;
        dst[row_a] = r0;
        dst[row_b] = r1;
    }
}

template <int PER, int KG>
__device__ __forceinline__ void decoder_layer(
    float* h, const bf16* ln1, const bf16* wq, const bf16* wk, const bf16* wv, const bf16* bq, const bf16* bk,
    const bf16* bv, const bf16* wo, const bf16* ln2, const bf16* wg, const bf16* wu, const bf16* wd, float* q,
    float* attn, float* act, float* k_cache, float* v_cache, const float* cos_table, const float* sin_table,
    const int* positions, int interleaved, int rows, int hidden, int heads, int kv_heads, int head_dim, int inter,
    float eps, float scale, int prefix_arg, int region_arg, const int* window, const int* mask, unsigned* bar, int phases) {
    extern __shared__ float smem[];
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int global_warp = blockIdx.x * LAYER_WARPS + warp, all_warps = gridDim.x * LAYER_WARPS;
    const int prefix = window ? window[0] : prefix_arg;
    const int region = window ? window[1] : region_arg;
    const int q_width = heads * head_dim;
    // After the largest staged rows (the host sizes the launch for both).
    float* partial = smem + max(rows * max(max(hidden, q_width), inter), LAYER_WARPS * (head_dim + 2));

    // A
    if (phases & 1) {
    stage_normed(h, ln1, smem, rows, hidden, eps);
    const int units = (heads + 2 * kv_heads) * (head_dim / 2);
    for (int u = global_warp; u < units; u += all_warps)
        qkv_unit(u, smem, wq, wk, wv, bq, bk, bv, q, k_cache, v_cache, cos_table, sin_table, positions, interleaved,
                 rows, hidden, heads, kv_heads, head_dim, prefix + region - rows);
    }
    grid_barrier(bar);

    // B
    if (phases & 2)
    for (int item = blockIdx.x; item < rows * heads; item += gridDim.x) {
        attend_keys<PER, KG, true>(q, k_cache, v_cache, attn, heads, kv_heads, head_dim, scale, prefix, region, rows,
                                   nullptr, mask, item / heads, item % heads);
        __syncthreads();
    }
    grid_barrier(bar);

    // C
    if (phases & 4) {
    stage_rows(attn, smem, rows, q_width);
    }
    if (phases & 4) block_rows(wo, smem, q_width, rows, hidden, h, hidden, partial);
    grid_barrier(bar);

    // D
    if (phases & 8) stage_normed(h, ln2, smem, rows, hidden, eps);
    if (phases & 8)
    // Two units a warp at a time (gate and up rows of j and of j + all_warps): more loads in flight.
    for (int j = global_warp; j < inter; j += 2 * all_warps) {
        const int j2 = min(j + all_warps, inter - 1);
        const bf16* const rows4[4] = {wg + (long long)j * hidden, wu + (long long)j * hidden, wg + (long long)j2 * hidden,
                                      wu + (long long)j2 * hidden};
        float acc[4][LAYER_MAX_ROWS];
        warp_dots<4>(rows4, smem, hidden, rows, acc);
#pragma unroll
        for (int r = 0; r < LAYER_MAX_ROWS; ++r)
            if (r < rows && lane == r) {
                const float g = acc[0][r], g2 = acc[2][r];
                act[(long long)r * inter + j] = g / (1.f + __expf(-g)) * acc[1][r];
                act[(long long)r * inter + j2] = g2 / (1.f + __expf(-g2)) * acc[3][r];
            }
    }
    grid_barrier(bar);

    // E
    if (phases & 16) stage_rows(act, smem, rows, inter);
    if (phases & 16) block_rows(wd, smem, inter, rows, hidden, h, hidden, partial);
}

// Heads of 32 * PER: 64 (p2) and 128 (p4), with attention.cu's key groups for them.
#define LAYER_ENTRY(NAME, PER, KG)                                                                                      \
    extern "C" __global__ void __launch_bounds__(LAYER_THREADS, 1) NAME(                                                 \
        float* h, const bf16* ln1, const bf16* wq, const bf16* wk, const bf16* wv, const bf16* bq, const bf16* bk,      \
        const bf16* bv, const bf16* wo, const bf16* ln2, const bf16* wg, const bf16* wu, const bf16* wd, float* q,      \
        float* attn, float* act, float* k_cache, float* v_cache, const float* cos_table, const float* sin_table,        \
        const int* positions, int interleaved, int rows, int hidden, int heads, int kv_heads, int head_dim, int inter, \
        float eps, float scale, int prefix_arg, int region_arg, const int* window, const int* mask, unsigned* bar, int phases) {   \
        decoder_layer<PER, KG>(h, ln1, wq, wk, wv, bq, bk, bv, wo, ln2, wg, wu, wd, q, attn, act, k_cache, v_cache,   \
                               cos_table, sin_table, positions, interleaved, rows, hidden, heads, kv_heads, head_dim,  \
                               inter, eps, scale, prefix_arg, region_arg, window, mask, bar, phases);                         \
    }
LAYER_ENTRY(decoder_layer_p2, 2, 16)
LAYER_ENTRY(decoder_layer_p4, 4, 8)
