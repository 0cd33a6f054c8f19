// RMSNorm over f32 rows with a bf16 weight, one block per row:
//   rmsnorm_f32:  out = x / rms(x) * w   (in place allowed: Qwen3's per-head norm runs over
//                                        [tokens * heads, head_dim])
// The residual add before a decoder layer's norms runs inside the o and down matmuls
// (gemv.cu, `accumulate`), so the norm is a kernel of its own.

// dst = src * inv * w over one row.
__device__ void scale_row(const float* src, const bf16* __restrict__ w, float* dst, int n, float inv, bool vec) {
    if (vec) {
        for (int i = threadIdx.x * 8; i < n; i += blockDim.x * 8) {
            float v[8], g[8];
            load8(src + i, v);
            load8(w + i, g);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = v[j] * inv * g[j];
            store8(dst + i, v);
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i] * inv * __bfloat162float(w[i]);
    }
}

extern "C" __global__ void rmsnorm_f32(const float* x, const bf16* w, float* out, int n, float eps) {
    pdl_enter();
    __shared__ float scratch[32];
    const float* src = x + (long long)blockIdx.x * n;
    float* dst = out + (long long)blockIdx.x * n;
    const bool vec = (n % 8 == 0) && aligned16(src) && aligned16(dst) && aligned16(w);
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += src[i] * src[i];
    scale_row(src, w, dst, n, rsqrtf(block_sum(ss, scratch) / (float)n + eps), vec);
}
