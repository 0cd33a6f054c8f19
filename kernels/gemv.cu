// Skinny matmuls for decode and verify steps: y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n])
// for up to 8 rows of f32 x and bf16 W in the [out, in] layout. At these sizes the work is
// streaming W from memory once, so everything here serves that:
//
// - A task is RR consecutive weight rows; a warp walks whole rows, each lane loading 16
//   bytes (8 weights) per row every 256 columns, U such column steps issued before the
//   first is used: RR * U loads of 16 bytes in flight per lane. Weights bypass L1
//   (read once), so x, which every warp re-reads, stays there.
// - The grid is persistent: as many blocks as fit on the GPU at once (the host asks the
//   driver), each warp taking tasks warp, warp + all_warps, ... so every SM streams until
//   the end and no wave of blocks is left half-empty.
// - One launch covers up to three matrices multiplying the same x (q, k and v), or a
//   gate and an up matrix whose products meet in SiLU(gate) * up without leaving
//   registers (`gemv_gate_up_*`).
//
// The sum for (m, n) runs over k in the same order whatever the row count M, RR or U: each
// lane accumulates its own columns (lane * 8 + 256 * i + j, ascending), then the warp adds
// the 32 lane sums in a fixed tree. A verify step's rows therefore equal, bit for bit, the
// decode steps they stand for, and the host may pick RR and U per shape for speed alone.
// K % 8 == 0 and 16-byte aligned W and x rows are required (the host checks).

#define GEMV_THREADS 256
#define GEMV_WARPS (GEMV_THREADS / 32)

// A streamed weight load: non-coherent path, no L1 allocation.
__device__ __forceinline__ uint4 ld_stream(const bf16* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

// acc[m][r] += this lane's share of x[m] . rows[r], for the first `m_rows` (<= MAXM) rows of x.
template <int MAXM, int RR, int U>
__device__ __forceinline__ void dot_rows(const float* __restrict__ x, int m_rows, int k_in, const bf16* (&rows)[RR],
                                         float (&acc)[MAXM][RR]) {
    const int lane = threadIdx.x & 31;
    for (int k0 = lane * 8; k0 < k_in; k0 += 256 * U) {
        uint4 wv[U][RR];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int k = k0 + u * 256;
#pragma unroll
            for (int r = 0; r < RR; ++r) wv[u][r] = k < k_in ? ld_stream(rows[r] + k) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int k = k0 + u * 256;
            if (k >= k_in) break;
            float wf[RR][8];
#pragma unroll
            for (int r = 0; r < RR; ++r) unpack8(wv[u][r], wf[r]);
#pragma unroll
            for (int m = 0; m < MAXM; ++m) {
                if (m < m_rows) {
                    float xf[8];
                    load8(x + (long long)m * k_in + k, xf);
#pragma unroll
                    for (int r = 0; r < RR; ++r)
#pragma unroll
                        for (int j = 0; j < 8; ++j) acc[m][r] = fmaf(wf[r][j], xf[j], acc[m][r]);
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MAXM; ++m)
#pragma unroll
        for (int r = 0; r < RR; ++r) acc[m][r] = warp_sum(acc[m][r]);
}

template <int MAXM, int RR>
__device__ __forceinline__ void zero(float (&acc)[MAXM][RR]) {
#pragma unroll
    for (int m = 0; m < MAXM; ++m)
#pragma unroll
        for (int r = 0; r < RR; ++r) acc[m][r] = 0.f;
}

__device__ __forceinline__ int global_warp() { return blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5); }
__device__ __forceinline__ int all_warps() { return gridDim.x * GEMV_WARPS; }

// One matrix of a multi-matrix launch.
struct GemvSegment {
    const bf16* w;
    const bf16* bias;
    float* y;
    int n;
};

// Segment s of three, chosen by value (indexing an array with a run-time s would put the
// array in local memory).
__device__ __forceinline__ GemvSegment pick(int s, const GemvSegment& a, const GemvSegment& b, const GemvSegment& c) {
    return s == 0 ? a : (s == 1 ? b : c);
}

// Tasks of RR rows over up to three matrices side by side (n = 0 for an unused one).
template <int MAXM, int RR, int U>
__device__ void gemv_segments(const float* x, int m_rows, int k_in, GemvSegment a, GemvSegment b, GemvSegment c) {
    const int end_a = (a.n + RR - 1) / RR;
    const int end_b = end_a + (b.n + RR - 1) / RR;
    const int end_c = end_b + (c.n + RR - 1) / RR;
    const int lane = threadIdx.x & 31;
    for (int t = global_warp(); t < end_c; t += all_warps()) {
        const int s = t < end_a ? 0 : (t < end_b ? 1 : 2);
        const GemvSegment g = pick(s, a, b, c);
        const int n0 = (t - (s == 0 ? 0 : (s == 1 ? end_a : end_b))) * RR;
        const bf16* rows[RR];
#pragma unroll
        for (int r = 0; r < RR; ++r) rows[r] = g.w + (long long)min(n0 + r, g.n - 1) * k_in;
        float acc[MAXM][RR];
        zero(acc);
        dot_rows<MAXM, RR, U>(x, m_rows, k_in, rows, acc);
        // Lane 0 writes: each lane's butterfly adds the 32 partial sums in its own order,
        // and lane 0's order is the one every configuration shares.
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < RR; ++r) {
                const int n = n0 + r;
                if (n < g.n) {
                    const float bias = g.bias ? __bfloat162float(g.bias[n]) : 0.f;
#pragma unroll
                    for (int m = 0; m < MAXM; ++m)
                        if (m < m_rows) g.y[(long long)m * g.n + n] = acc[m][r] + bias;
                }
            }
        }
    }
}

// act[m, n] = silu(x[m] . gate[n]) * (x[m] . up[n]); a task is RR / 2 rows of each matrix.
template <int MAXM, int RR, int U>
__device__ void gemv_gate_up(const float* x, int m_rows, int k_in, const bf16* gate, const bf16* up, float* act,
                             int n_out) {
    constexpr int HALF = RR / 2;
    const int tasks = (n_out + HALF - 1) / HALF;
    const int lane = threadIdx.x & 31;
    for (int t = global_warp(); t < tasks; t += all_warps()) {
        const int n0 = t * HALF;
        const bf16* rows[RR];
#pragma unroll
        for (int r = 0; r < HALF; ++r) {
            const long long row = (long long)min(n0 + r, n_out - 1) * k_in;
            rows[r] = gate + row;
            rows[HALF + r] = up + row;
        }
        float acc[MAXM][RR];
        zero(acc);
        dot_rows<MAXM, RR, U>(x, m_rows, k_in, rows, acc);
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < HALF; ++r) {
                const int n = n0 + r;
                if (n < n_out) {
#pragma unroll
                    for (int m = 0; m < MAXM; ++m) {
                        if (m < m_rows) {
                            const float g = acc[m][r];
                            act[(long long)m * n_out + n] = g / (1.f + __expf(-g)) * acc[m][HALF + r];
                        }
                    }
                }
            }
        }
    }
}

// The entry points, one per (most rows, weight rows per task, column steps in flight):
// gemv_m{MAXM}_r{RR}_u{U} and gemv_gate_up_m{MAXM}_r{RR}_u{U}. The host picks among them
// by row count and shape (backend/cuda/gemm.rs lists the same set).
#define GEMV_ENTRY(MAXM, RR, U)                                                                                  \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2) gemv_m##MAXM##_r##RR##_u##U(                     \
        const float* x, int m_rows, int k_in, const bf16* w0, const bf16* b0, float* y0, int n0, const bf16* w1, \
        const bf16* b1, float* y1, int n1, const bf16* w2, const bf16* b2, float* y2, int n2) {                  \
        gemv_segments<MAXM, RR, U>(x, m_rows, k_in, {w0, b0, y0, n0}, {w1, b1, y1, n1}, {w2, b2, y2, n2});       \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2) gemv_gate_up_m##MAXM##_r##RR##_u##U(             \
        const float* x, int m_rows, int k_in, const bf16* gate, const bf16* up, float* act, int n_out) {         \
        gemv_gate_up<MAXM, RR, U>(x, m_rows, k_in, gate, up, act, n_out);                                        \
    }

GEMV_ENTRY(1, 4, 4)
GEMV_ENTRY(1, 2, 8)
GEMV_ENTRY(2, 4, 4)
GEMV_ENTRY(2, 2, 8)
GEMV_ENTRY(4, 4, 2)
GEMV_ENTRY(4, 2, 4)
GEMV_ENTRY(8, 4, 2)
GEMV_ENTRY(8, 2, 4)
