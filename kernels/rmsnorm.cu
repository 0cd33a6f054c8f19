// RMSNorm over f32 rows with a bf16 weight, one block per row:
//   rmsnorm_f32:  out = x / rms(x) * w   (in place allowed: Qwen3's per-head norm runs over
//                                        [tokens * heads, head_dim])
// and, when `copy` is not NULL, the same rows rounded to bf16 there: the operand of the cuBLAS
// matmul that reads them next, which then converts nothing (src/backend/cuda/gemm.rs, `stage`).
// The residual add before a decoder layer's norms runs inside the o and down matmuls
// (gemv.cu, `accumulate`), so the norm is a kernel of its own.

// dst = src * inv * w over one row.
__device__ void scale_row(const float* src, const bf16* __restrict__ w, float* dst, bf16* copy, int n, float inv, bool vec) {
    if (vec) {
        for (int i = threadIdx.x * 8; i < n; i += blockDim.x * 8) {
            float v[8], g[8];
            load8(src + i, v);
            load8(w + i, g);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = v[j] * inv * g[j];
            store8(dst + i, v);
            if (copy) store8(copy + i, v);
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const float y = src[i] * inv * __bfloat162float(w[i]);
            dst[i] = y;
            if (copy) put(copy + i, y);
        }
    }
}

// Chunks of 8 floats a thread keeps in registers: rows up to 8 * RMSNORM_CHUNKS * blockDim.x
// take the one-round path below (the host gives a row about 8 entries per thread).
#define RMSNORM_CHUNKS 2

extern "C" __global__ void __launch_bounds__(1024) rmsnorm_f32(const float* x, const bf16* w, float* out, int n, float eps,
                                                            bf16* copy_rows) {
    pdl_enter();
    __shared__ float scratch[32];
    const float* src = x + (long long)blockIdx.x * n;
    float* dst = out + (long long)blockIdx.x * n;
    bf16* copy = copy_rows ? copy_rows + (long long)blockIdx.x * n : nullptr;
    const bool vec = (n % 8 == 0) && aligned16(src) && aligned16(dst) && aligned16(w) && (!copy || aligned16(copy));
    if (vec && n <= 8 * RMSNORM_CHUNKS * (int)blockDim.x) {
        // The row and its weights come in one round of loads, all issued before any is
        // used: a loop that waits on each load before issuing the next made this
        // latency-bound kernel cost several microseconds at every layer.
        float v[RMSNORM_CHUNKS][8], g[RMSNORM_CHUNKS][8];
        float ss = 0.f;
#pragma unroll
        for (int c = 0; c < RMSNORM_CHUNKS; ++c) {
            const int i = 8 * (threadIdx.x + c * blockDim.x);
            if (i < n) {
                load8(src + i, v[c]);
                load8(w + i, g[c]);
            }
        }
#pragma unroll
        for (int c = 0; c < RMSNORM_CHUNKS; ++c)
            if (8 * (threadIdx.x + c * blockDim.x) < n)
#pragma unroll
                for (int j = 0; j < 8; ++j) ss += v[c][j] * v[c][j];
        const float inv = rsqrtf(block_sum(ss, scratch) / (float)n + eps);
#pragma unroll
        for (int c = 0; c < RMSNORM_CHUNKS; ++c) {
            const int i = 8 * (threadIdx.x + c * blockDim.x);
            if (i < n) {
#pragma unroll
                for (int j = 0; j < 8; ++j) v[c][j] = v[c][j] * inv * g[c][j];
                store8(dst + i, v[c]);
                if (copy) store8(copy + i, v[c]);
            }
        }
        return;
    }
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += src[i] * src[i];
    scale_row(src, w, dst, copy, n, rsqrtf(block_sum(ss, scratch) / (float)n + eps), vec);
}
