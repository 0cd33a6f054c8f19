// A whole decoder layer (pre-norm attention with RoPE, then a SwiGLU MLP, each added to the
// residual stream) in two persistent launches, for a drafter's forward of a few rows. The
// module is attention.cu's device code followed by this file.
//
// Why: a small drafter at batch 1 is latency-bound. Its seven launches a layer each pay a
// launch's ramp and drain for a few microseconds of work, so a 0.5B draft forward cost
// nearly what a 1.5B target step does, which capped the speculative speed-up. Here a grid of
// one block per SM runs a layer's phases with a grid-wide barrier between dependent ones:
//   attention half
//   A  RMSNorm of h (every block, into shared memory); q, k, v (+ bias); RoPE; q to its
//      scratch, k and v into their cache rows. A warp takes a RoPE pair of rows, so the
//      rotation needs no exchange.
//   B  attention, a (query, head) per block at a time (attention.cu's `attend_keys`).
//   C  o projection, added into h.
//   MLP half
//   D  RMSNorm of h; gate and up; SiLU(gate) * up.
//   E  down projection, added into h.
// A block's weight rows do not depend on the activations, so it asks for them as it starts:
// the copy engine (cp.async.bulk) brings q/k/v, o, gate and up rows into shared memory, and
// down's rows into L2. Each half lets the next launch start beside it (two blocks a SM fit,
// `LAYER_BOUNDS`), so the next half's rows arrive while this one runs and its phases wait on
// barriers, not on DRAM. (A first form streamed each phase's rows from DRAM after its
// barrier, in one launch a layer, and lost to the op-by-op path; a second asked for all of a
// layer's rows at its start, and lost the time between launches.)
//
// The sums run in other orders than the op-by-op kernels', so rows differ from theirs in the
// last bits: only a drafter, whose rows the target verifies, may use this (a target's verify
// rows must equal its decode steps bit for bit).
//
// Activations written inside the launch are read with ld.global.cg (L2, never a stale L1
// line). A barrier needs every block of its grid resident at once: the host launches one
// block per SM after checking that one fits, and a barrier that waits over a second traps (a
// device error at the next sync, not a hang).

#define LAYER_THREADS 256
#define LAYER_WARPS (LAYER_THREADS / 32)
#define LAYER_MAX_ROWS 4

// A barrier over the grid on one 64-bit count that only grows: each block adds 1 and waits
// for the count to reach the barrier's mark. A launch starts from the multiple of the grid
// size at or below the count it first reads (every launch before it completed all its
// barriers, so only its own first arrivals can be past that multiple), and nothing is ever
// reset between barriers, launches or graph replays. Thread 0 holds the next mark.
struct GridBarrier {
    unsigned long long* count;
    unsigned long long next;
    __device__ __forceinline__ static unsigned long long load(const unsigned long long* p) {
        unsigned long long v;
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
        return v;
    }
    // After pdl_wait: the launch before has arrived everywhere.
    __device__ __forceinline__ GridBarrier(unsigned long long* c) : count(c), next(0) {
        if (threadIdx.x == 0) {
            const unsigned long long now = load(count);
            next = now - now % gridDim.x + gridDim.x;
        }
    }
    __device__ __forceinline__ void sync() {
        __syncthreads();
        if (threadIdx.x == 0) {
            asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(count) : "memory");
            const long long start = clock64();
            while (load(count) < next) {
                if (clock64() - start > 4000000000ll) __trap();
            }
            next += gridDim.x;
        }
        __syncthreads();
    }
};

// The copy engine's bulk loads into shared memory, each completing on an mbarrier.
__device__ __forceinline__ unsigned shared_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar) {
    unsigned done;
    do {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(shared_addr(bar))
            : "memory");
    } while (!done);
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     shared_addr(dst)),
                 "l"(src), "r"(bytes), "r"(shared_addr(bar))
                 : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// Block b's share [first, end) of n items, contiguous.
struct Share {
    int first, end;
    __device__ __forceinline__ Share(int n) {
        first = (int)((long long)blockIdx.x * n / gridDim.x);
        end = (int)((long long)(blockIdx.x + 1) * n / gridDim.x);
    }
    __device__ __forceinline__ int count() const { return end - first; }
};

// Loads a thread keeps in flight at once when it stages rows.
#define STAGE_BATCH 8

// Copy rows [rows][cols] of a buffer written in this launch into shared memory: each thread
// issues up to STAGE_BATCH loads before it stores any, so a round costs one trip to L2.
__device__ __forceinline__ void stage_rows(const float* src, float* dst, int rows, int cols) {
    const int n4 = rows * cols / 4;
    const float4* from = reinterpret_cast<const float4*>(src);
    float4* to = reinterpret_cast<float4*>(dst);
    for (int base = threadIdx.x; base < n4; base += STAGE_BATCH * blockDim.x) {
        float4 v[STAGE_BATCH];
#pragma unroll
        for (int b = 0; b < STAGE_BATCH; ++b) {
            const int i = base + b * blockDim.x;
            if (i < n4) v[b] = __ldcg(from + i);
        }
#pragma unroll
        for (int b = 0; b < STAGE_BATCH; ++b) {
            const int i = base + b * blockDim.x;
            if (i < n4) to[i] = v[b];
        }
    }
    __syncthreads();
}

// RMSNorm of the residual rows into shared memory: the rows staged whole, each row's sum of
// squares over the block (`sums`: LAYER_MAX_ROWS floats, then 32 for the block sum), then
// every element scaled with its weight.
__device__ __forceinline__ void stage_normed(const float* h, const bf16* w, float* xs, int rows, int hidden, float eps,
                                             float* sums) {
    stage_rows(h, xs, rows, hidden);
    const int n4 = hidden / 4;
    for (int r = 0; r < rows; ++r) {
        float ss = 0.f;
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            const float4 v = reinterpret_cast<const float4*>(xs + r * hidden)[i];
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
        ss = block_sum(ss, sums + LAYER_MAX_ROWS);
        if (threadIdx.x == 0) sums[r] = ss;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < rows * n4; i += blockDim.x) {
        const int r = i / n4, c = 4 * (i % n4);
        const float inv = rsqrtf(sums[r] / (float)hidden + eps);
        const uint2 packed = *reinterpret_cast<const uint2*>(w + c);
        const float2 w01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed.x));
        const float2 w23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed.y));
        float4* x = reinterpret_cast<float4*>(xs + r * hidden + c);
        float4 v = *x;
        v.x = v.x * inv * w01.x;
        v.y = v.y * inv * w01.y;
        v.z = v.z * inv * w23.x;
        v.w = v.w * inv * w23.y;
        *x = v;
    }
    __syncthreads();
}

// Chunks of 8 weights a lane loads before it uses any.
#define DOT_BATCH 4

// Two weight rows (in shared memory, or in global memory through L2) against the staged x
// rows [rows][k], over the 8-wide chunks [c0, c1) of k: each lane ends with the warp's sums.
__device__ __forceinline__ void warp_dots2(const bf16* w0, const bf16* w1, const float* xs, int k, int c0, int c1, int rows,
                                           float (&acc)[2][LAYER_MAX_ROWS]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int r = 0; r < LAYER_MAX_ROWS; ++r) acc[n][r] = 0.f;
    for (int base = c0 + lane; base < c1; base += 32 * DOT_BATCH) {
        uint4 a[DOT_BATCH], b[DOT_BATCH];
#pragma unroll
        for (int u = 0; u < DOT_BATCH; ++u) {
            const int c = base + 32 * u;
            a[u] = c < c1 ? *reinterpret_cast<const uint4*>(w0 + 8 * c) : make_uint4(0u, 0u, 0u, 0u);
            b[u] = c < c1 ? *reinterpret_cast<const uint4*>(w1 + 8 * c) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < DOT_BATCH; ++u) {
            const int c = base + 32 * u;
            if (c >= c1) break;
            float fa[8], fb[8];
            unpack8(a[u], fa);
            unpack8(b[u], fb);
#pragma unroll
            for (int r = 0; r < LAYER_MAX_ROWS; ++r) {
                if (r >= rows) break;
                float xv[8];
                load8(xs + r * k + 8 * c, xv);
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    acc[0][r] += fa[e] * xv[e];
                    acc[1][r] += fb[e] * xv[e];
                }
            }
        }
    }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int r = 0; r < LAYER_MAX_ROWS; ++r)
            if (r < rows) acc[n][r] = warp_sum(acc[n][r]);
}

// h[r][first + t] += W[t] . x[r] for the block's `n` weight rows in shared memory (`w`,
// [n][k]), in rounds of up to LAYER_WARPS pairs of rows: each pair's k is cut into runs so
// every warp has one, the warps' partial sums meet in `partial` (LAYER_WARPS * 2 *
// LAYER_MAX_ROWS floats) and one thread adds a row's runs in a fixed order.
__device__ __forceinline__ void rows_into(const bf16* w, int n, const float* xs, int k, int rows, int first, float* h,
                                          int h_width, float* partial) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int chunks = k / 8;
    for (int t_first = 0; t_first < n; t_first += 2 * LAYER_WARPS) {
        const int m = min(n - t_first, 2 * LAYER_WARPS);
        // Pieces of two rows (the second repeats the first at an odd end).
        const int pairs = (m + 1) / 2;
        const int cuts = max(1, LAYER_WARPS / pairs);
        for (int p = warp; p < pairs * cuts; p += LAYER_WARPS) {
            const int pair = p / cuts, cut = p % cuts;
            const int t0 = t_first + 2 * pair, t1 = min(t0 + 1, t_first + m - 1);
            float acc[2][LAYER_MAX_ROWS];
            warp_dots2(w + (long long)t0 * k, w + (long long)t1 * k, xs, k, chunks * cut / cuts,
                       chunks * (cut + 1) / cuts, rows, acc);
            if (lane == 0)
#pragma unroll
                for (int r = 0; r < LAYER_MAX_ROWS; ++r)
                    if (r < rows) {
                        partial[(p * 2) * LAYER_MAX_ROWS + r] = acc[0][r];
                        partial[(p * 2 + 1) * LAYER_MAX_ROWS + r] = acc[1][r];
                    }
        }
        __syncthreads();
        for (int i = threadIdx.x; i < m * rows; i += blockDim.x) {
            const int t = i / rows, r = i % rows;
            const int pair = t / 2, side = t % 2;
            float sum = 0.f;
            for (int cut = 0; cut < cuts; ++cut) sum += partial[((pair * cuts + cut) * 2 + side) * LAYER_MAX_ROWS + r];
            float* dst = h + (long long)r * h_width + first + t_first + t;
            *dst = __ldcg(dst) + sum;
        }
        __syncthreads();
    }
}

// Phase A's unit u: a RoPE pair of a q or k head, or two rows of a v head. Where its rows
// sit in wq, wk or wv, and which output they feed.
struct QkvUnit {
    int kind, head, j;  // kind 0 q, 1 k, 2 v; head within its kind; pair index
    long long row_a, row_b;
    __device__ __forceinline__ QkvUnit(int u, int heads, int kv_heads, int head_dim, int interleaved) {
        const int half = head_dim / 2;
        const int all = u / half;
        j = u % half;
        kind = all < heads ? 0 : all < heads + kv_heads ? 1 : 2;
        head = kind == 0 ? all : kind == 1 ? all - heads : all - heads - kv_heads;
        // v has no rotation: any two of its rows will do.
        const int a = kind == 2 || interleaved ? 2 * j : j;
        const int b = kind == 2 || interleaved ? 2 * j + 1 : j + half;
        row_a = (long long)head * head_dim + a;
        row_b = (long long)head * head_dim + b;
    }
};

// Phase A: the block's RoPE pairs of q, k and v rows (in shared memory at `wa`) against
// the normed rows in `xs`; q to its scratch, k and v into their cache rows.
__device__ __forceinline__ void qkv_rows(const Share& ua, const bf16* wa, const float* xs, const bf16* bq, const bf16* bk,
                                         const bf16* bv, float* q, float* k_cache, float* v_cache, const float* cos_table,
                                         const float* sin_table, const int* positions, int interleaved, int rows,
                                         int hidden, int heads, int kv_heads, int head_dim, int slot) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int half = head_dim / 2;
    for (int i = warp; i < ua.count(); i += LAYER_WARPS) {
        const QkvUnit un(ua.first + i, heads, kv_heads, head_dim, interleaved);
        float acc[2][LAYER_MAX_ROWS];
        warp_dots2(wa + (long long)(2 * i) * hidden, wa + (long long)(2 * i + 1) * hidden, xs, hidden, 0, hidden / 8, rows,
                   acc);
        const bf16* bias = un.kind == 0 ? bq : un.kind == 1 ? bk : bv;
#pragma unroll
        for (int r = 0; r < LAYER_MAX_ROWS; ++r) {
            if (r >= rows || lane != r) continue;
            float x0 = acc[0][r], x1 = acc[1][r];
            if (bias) {
                x0 += __bfloat162float(bias[un.row_a]);
                x1 += __bfloat162float(bias[un.row_b]);
            }
            const long long kv_row = (long long)(slot + r) * kv_heads * head_dim;
            if (un.kind == 2) {
                v_cache[kv_row + un.row_a] = x0;
                v_cache[kv_row + un.row_b] = x1;
                continue;
            }
            const long long t = (long long)positions[r] * half + un.j;
            float r0, r1;
            rotate_pair(x0, x1, cos_table[t], sin_table[t], r0, r1);
            float* dst = un.kind == 0 ? q + (long long)r * heads * head_dim : k_cache + kv_row;
            dst[un.row_a] = r0;
            dst[un.row_b] = r1;
        }
    }
}

// The attention half of a layer: phases A, B and C. Dynamic shared memory
// (`attention_half_bytes` in layer_layout.rs): scratch floats, the partial sums, the
// block's q/k/v and o rows in bf16, two mbarriers.
template <int PER, int KG>
__device__ __forceinline__ void attention_half(
    float* h, const bf16* ln1, const bf16* wq, const bf16* wk, const bf16* wv, const bf16* bq, const bf16* bk,
    const bf16* bv, const bf16* wo, float* q, float* attn, float* k_cache, float* v_cache, const float* cos_table,
    const float* sin_table, const int* positions, int interleaved, int rows, int hidden, int heads, int kv_heads,
    int head_dim, float eps, float scale, int prefix_arg, int region_arg, const int* window, const int* mask,
    unsigned long long* bar_count, int phases) {
    extern __shared__ float smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q_width = heads * head_dim;
    const int units = (heads + 2 * kv_heads) * (head_dim / 2);
    const Share ua(units), uc(hidden);
    const int max_a = (units + gridDim.x - 1) / gridDim.x, max_c = (hidden + gridDim.x - 1) / gridDim.x;
    const int staged = max(rows * max(hidden, q_width), LAYER_WARPS * (head_dim + 2));
    float* partial = smem + staged;
    bf16* wa = reinterpret_cast<bf16*>(partial + LAYER_WARPS * 2 * LAYER_MAX_ROWS);
    bf16* wc = wa + (long long)2 * max_a * hidden;
    unsigned long long* mbar = reinterpret_cast<unsigned long long*>(wc + (long long)max_c * q_width);
    const unsigned hidden_row = hidden * 2, q_row = q_width * 2;

    if (threadIdx.x == 0) {
        mbar_init(mbar);
        mbar_init(mbar + 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        mbar_expect(mbar, 2u * ua.count() * hidden_row);
        mbar_expect(mbar + 1, (unsigned)uc.count() * q_row);
    }
    __syncthreads();
    // Weights are no kernel's output: their loads start before the wait for the kernel
    // before. Warp 0's lanes issue a row each.
    if (warp == 0) {
        for (int i = lane; i < ua.count(); i += 32) {
            const QkvUnit un(ua.first + i, heads, kv_heads, head_dim, interleaved);
            const bf16* w = un.kind == 0 ? wq : un.kind == 1 ? wk : wv;
            bulk_load(wa + (long long)(2 * i) * hidden, w + un.row_a * hidden, hidden_row, mbar);
            bulk_load(wa + (long long)(2 * i + 1) * hidden, w + un.row_b * hidden, hidden_row, mbar);
        }
        if (lane == 0 && uc.count() > 0) bulk_load(wc, wo + (long long)uc.first * q_width, uc.count() * q_row, mbar + 1);
    }
    // The MLP half after this launch may take its place beside it and fetch its rows now.
    pdl_launch_dependents();
    pdl_wait();
    GridBarrier bar(bar_count);
    const int prefix = window ? window[0] : prefix_arg;
    const int region = window ? window[1] : region_arg;
    const int slot = prefix + region - rows;
    // The cache rows attention will read, on their way to L2 while A runs.
    if (threadIdx.x == 0 && blockIdx.x < 2 && slot > 0)
        prefetch_l2(blockIdx.x == 0 ? k_cache : v_cache, (unsigned)slot * kv_heads * head_dim * 4);

    // A
    if (phases & 1) stage_normed(h, ln1, smem, rows, hidden, eps, partial);
    mbar_wait(mbar);
    if (phases & 1)
        qkv_rows(ua, wa, smem, bq, bk, bv, q, k_cache, v_cache, cos_table, sin_table, positions, interleaved, rows, hidden,
                 heads, kv_heads, head_dim, slot);
    bar.sync();

    // B
    if (phases & 2)
        for (int item = blockIdx.x; item < rows * heads; item += gridDim.x) {
            attend_keys<PER, KG, true>(q, k_cache, v_cache, attn, heads, kv_heads, head_dim, scale, prefix, region, rows,
                                       nullptr, mask, item / heads, item % heads);
            __syncthreads();
        }
    bar.sync();

    // C
    if (phases & 4) stage_rows(attn, smem, rows, q_width);
    mbar_wait(mbar + 1);
    if (phases & 4) rows_into(wc, uc.count(), smem, q_width, rows, uc.first, h, hidden, partial);
}

// The MLP half: phase D (the block's gate and up rows in shared memory, interleaved) and
// phase E (its down rows read through L2, where it asked for them at the start). Dynamic
// shared memory (`mlp_half_bytes`): scratch floats, the partial sums, the gate/up rows, one
// mbarrier.
__device__ __forceinline__ void mlp_half(float* h, const bf16* ln2, const bf16* wg, const bf16* wu, const bf16* wd,
                                         float* act, int rows, int hidden, int inter, float eps,
                                         unsigned long long* bar_count, int phases) {
    extern __shared__ float smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const Share ud(inter), ue(hidden);
    float* partial = smem + rows * max(hidden, inter);
    bf16* wdd = reinterpret_cast<bf16*>(partial + LAYER_WARPS * 2 * LAYER_MAX_ROWS);
    unsigned long long* mbar =
        reinterpret_cast<unsigned long long*>(wdd + (long long)2 * ((inter + gridDim.x - 1) / gridDim.x) * hidden);
    const unsigned hidden_row = hidden * 2;
    if (threadIdx.x == 0) {
        mbar_init(mbar);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        mbar_expect(mbar, 2u * ud.count() * hidden_row);
        if (ue.count() > 0) prefetch_l2(wd + (long long)ue.first * inter, (unsigned)ue.count() * inter * 2);
    }
    __syncthreads();
    if (warp == 0)
        for (int i = lane; i < ud.count(); i += 32) {
            bulk_load(wdd + (long long)(2 * i) * hidden, wg + (long long)(ud.first + i) * hidden, hidden_row, mbar);
            bulk_load(wdd + (long long)(2 * i + 1) * hidden, wu + (long long)(ud.first + i) * hidden, hidden_row, mbar);
        }
    pdl_launch_dependents();
    pdl_wait();
    GridBarrier bar(bar_count);

    // D
    if (phases & 8) stage_normed(h, ln2, smem, rows, hidden, eps, partial);
    mbar_wait(mbar);
    if (phases & 8)
        for (int i = warp; i < ud.count(); i += LAYER_WARPS) {
            float acc[2][LAYER_MAX_ROWS];
            warp_dots2(wdd + (long long)(2 * i) * hidden, wdd + (long long)(2 * i + 1) * hidden, smem, hidden, 0,
                       hidden / 8, rows, acc);
            const int j = ud.first + i;
#pragma unroll
            for (int r = 0; r < LAYER_MAX_ROWS; ++r)
                if (r < rows && lane == r) {
                    const float g = acc[0][r];
                    act[(long long)r * inter + j] = g / (1.f + __expf(-g)) * acc[1][r];
                }
        }
    bar.sync();

    // E
    if (phases & 16) {
        stage_rows(act, smem, rows, inter);
        rows_into(wd + (long long)ue.first * inter, ue.count(), smem, inter, rows, ue.first, h, hidden, partial);
    }
}

// Both kernels are bounded for two blocks a SM: a launch's blocks sit beside the next
// launch's, which fetch their rows while these run.
// Heads of 32 * PER: 64 (p2) and 128 (p4), with attention.cu's key groups for them.
#define LAYER_ENTRY(NAME, PER, KG)                                                                                      \
    extern "C" __global__ void __launch_bounds__(LAYER_THREADS, 2) NAME(                                              \
        float* h, const bf16* ln1, const bf16* wq, const bf16* wk, const bf16* wv, const bf16* bq, const bf16* bk,      \
        const bf16* bv, const bf16* wo, float* q, float* attn, float* k_cache, float* v_cache, const float* cos_table,  \
        const float* sin_table, const int* positions, int interleaved, int rows, int hidden, int heads, int kv_heads,   \
        int head_dim, float eps, float scale, int prefix_arg, int region_arg, const int* window, const int* mask,      \
        unsigned long long* bar, int phases) {                                                                          \
        attention_half<PER, KG>(h, ln1, wq, wk, wv, bq, bk, bv, wo, q, attn, k_cache, v_cache, cos_table, sin_table,  \
                                positions, interleaved, rows, hidden, heads, kv_heads, head_dim, eps, scale, prefix_arg, \
                                region_arg, window, mask, bar, phases);                                                 \
    }
LAYER_ENTRY(layer_attention_p2, 2, 16)
LAYER_ENTRY(layer_attention_p4, 4, 8)

extern "C" __global__ void __launch_bounds__(LAYER_THREADS, 2)
    layer_mlp(float* h, const bf16* ln2, const bf16* wg, const bf16* wu, const bf16* wd, float* act, int rows, int hidden,
              int inter, float eps, unsigned long long* bar, int phases) {
    mlp_half(h, ln2, wg, wu, wd, act, rows, hidden, inter, eps, bar, phases);
}
