// Skinny matmul for decode and verify steps: y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n])
// for up to 8 rows of f32 x and a bf16 W in the [out, in] layout. At these sizes the work
// is reading W once. Each warp streams R rows of W with 16-byte loads, several in flight
// per lane, and reuses every x value it loads for its R rows: with R = 4 a verify step's
// 5 rows of x cost L1 about 2.5x the weight bytes instead of 10x, so verify costs about
// what decode does. The sum for (m, n) runs over k in the same order whatever M is, so a
// row's result does not depend on how many rows share the launch. f32 accumulation.
// Offered when K % 8 == 0 and W, x are 16-byte aligned.
// Grid: ceil(N / (R * warps_per_block)). Block: a multiple of 32 threads.

template <int M, int R, int UNROLL>
__device__ void gemv_rows(const float* __restrict__ x, const bf16* __restrict__ w, int n_out, int k_in,
                          const bf16* __restrict__ bias, float* __restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
    if (n0 >= n_out) return;
    const bf16* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = w + (long long)min(n0 + r, n_out - 1) * k_in;
    float acc[M][R];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = 0.f;
    for (int k0 = lane * 8; k0 < k_in; k0 += 256 * UNROLL) {
        uint4 wv[UNROLL][R];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int k = k0 + u * 256;
            if (k < k_in)
#pragma unroll
                for (int r = 0; r < R; ++r) wv[u][r] = __ldg(reinterpret_cast<const uint4*>(wr[r] + k));
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int k = k0 + u * 256;
            if (k < k_in) {
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    float xf[8];
                    load8(x + (long long)m * k_in + k, xf);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        float wf[8];
                        unpack8(wv[u][r], wf);
#pragma unroll
                        for (int j = 0; j < 8; ++j) acc[m][r] = fmaf(wf[j], xf[j], acc[m][r]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int n = n0 + r;
            if (n < n_out) {
                const float b = bias ? __bfloat162float(bias[n]) : 0.f;
#pragma unroll
                for (int m = 0; m < M; ++m) y[(long long)m * n_out + n] = acc[m][r] + b;
            }
        }
    }
}

template <int R, int UNROLL>
__device__ void gemv_m(int m, const float* x, const bf16* w, int n_out, int k_in, const bf16* bias, float* y) {
    switch (m) {
        case 1: gemv_rows<1, R, UNROLL>(x, w, n_out, k_in, bias, y); break;
        case 2: gemv_rows<2, R, UNROLL>(x, w, n_out, k_in, bias, y); break;
        case 3: gemv_rows<3, R, UNROLL>(x, w, n_out, k_in, bias, y); break;
        case 4: gemv_rows<4, R, UNROLL>(x, w, n_out, k_in, bias, y); break;
        case 5: gemv_rows<5, R, UNROLL>(x, w, n_out, k_in, bias, y); break;
        case 6: gemv_rows<6, R, UNROLL>(x, w, n_out, k_in, bias, y); break;
        case 7: gemv_rows<7, R, UNROLL>(x, w, n_out, k_in, bias, y); break;
        case 8: gemv_rows<8, R, UNROLL>(x, w, n_out, k_in, bias, y); break;
        default: break;
    }
}

// One output row per warp: for narrow W (few rows), so enough warps stream it.
extern "C" __global__ void gemv_f32(int m, const float* x, const bf16* w, int n_out, int k_in, const bf16* bias,
                                    float* y) {
    gemv_m<1, 4>(m, x, w, n_out, k_in, bias, y);
}

// Four output rows per warp: for wide W, where x reuse matters more than warp count.
extern "C" __global__ void gemv4_f32(int m, const float* x, const bf16* w, int n_out, int k_in, const bf16* bias,
                                     float* y) {
    gemv_m<4, 2>(m, x, w, n_out, k_in, bias, y);
}
