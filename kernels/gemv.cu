// Skinny matmul for decode and verify steps: y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n])
// for up to 8 rows of f32 x and a bf16 W in the [out, in] layout. At these sizes the work
// is reading W once: each warp streams one row of W with 16-byte loads, several in flight
// per lane, and reuses every load for all rows of x (which stay in L1). f32 accumulation.
// The host times it against cuBLAS per shape at warm-up and keeps the faster; it is only
// offered when K % 8 == 0 and W, x are 16-byte aligned.
// Grid: ceil(N / warps_per_block). Block: a multiple of 32 threads.

#define GEMV_UNROLL 4

template <int M>
__device__ void gemv_rows(const float* __restrict__ x, const bf16* __restrict__ w, int n_out, int k_in,
                          const bf16* __restrict__ bias, float* __restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= n_out) return;
    const bf16* wr = w + (long long)n * k_in;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.f;
    for (int k0 = lane * 8; k0 < k_in; k0 += 256 * GEMV_UNROLL) {
        uint4 wv[GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; ++u) {
            const int k = k0 + u * 256;
            if (k < k_in) wv[u] = __ldg(reinterpret_cast<const uint4*>(wr + k));
        }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; ++u) {
            const int k = k0 + u * 256;
            if (k < k_in) {
                float wf[8];
                unpack8(wv[u], wf);
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    float xf[8];
                    load8(x + (long long)m * k_in + k, xf);
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[m] = fmaf(wf[j], xf[j], acc[m]);
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = warp_sum(acc[m]);
    if (lane == 0) {
        const float b = bias ? __bfloat162float(bias[n]) : 0.f;
#pragma unroll
        for (int m = 0; m < M; ++m) y[(long long)m * n_out + n] = acc[m] + b;
    }
}

extern "C" __global__ void gemv_f32(int m, const float* x, const bf16* w, int n_out, int k_in, const bf16* bias,
                                    float* y) {
    switch (m) {
        case 1: gemv_rows<1>(x, w, n_out, k_in, bias, y); break;
        case 2: gemv_rows<2>(x, w, n_out, k_in, bias, y); break;
        case 3: gemv_rows<3>(x, w, n_out, k_in, bias, y); break;
        case 4: gemv_rows<4>(x, w, n_out, k_in, bias, y); break;
        case 5: gemv_rows<5>(x, w, n_out, k_in, bias, y); break;
        case 6: gemv_rows<6>(x, w, n_out, k_in, bias, y); break;
        case 7: gemv_rows<7>(x, w, n_out, k_in, bias, y); break;
        case 8: gemv_rows<8>(x, w, n_out, k_in, bias, y); break;
        default: break;
    }
}
