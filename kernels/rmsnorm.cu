// RMSNorm, optionally fused with the residual add. One block per row; rows are addressed
// as (blockIdx.x, blockIdx.y) with an outer and an inner stride, so per-head norms
// (Qwen3's q_norm/k_norm over [tokens, heads, head_dim] inside a fused qkv buffer) and
// writes into half of a concatenated buffer (EAGLE-3's [embed | hidden]) need no copies.
//
//   plain:  out = x / rms(x) * w
//   fused:  residual += delta; out = residual / rms(residual) * w
// Each thread reads back only what it wrote itself, so the fused form needs no barrier
// between the add and the normalisation.

struct RowAddr {
    long long outer;
    long long inner;
};

__device__ __forceinline__ long long row_offset(RowAddr a) {
    return (long long)blockIdx.x * a.outer + (long long)blockIdx.y * a.inner;
}

// dst = src * inv * w, for one row; src may be what this same thread just wrote.
template <typename Tin, typename Tout>
__device__ void scale_row(const Tin* src, const bf16* __restrict__ w, Tout* dst, int n, float inv, bool vec) {
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
        for (int i = threadIdx.x; i < n; i += blockDim.x) put(dst + i, to_f32(src[i]) * inv * to_f32(w[i]));
    }
}

template <typename Tin, typename Tout>
__device__ void rmsnorm_row(const Tin* __restrict__ x, RowAddr xa, const bf16* __restrict__ w,
                            Tout* __restrict__ out, RowAddr oa, int n, float eps) {
    __shared__ float scratch[32];
    const Tin* src = x + row_offset(xa);
    Tout* dst = out + row_offset(oa);
    const bool vec = (n % 8 == 0) && aligned16(src) && aligned16(dst) && aligned16(w);
    float ss = 0.f;
    if (vec) {
        for (int i = threadIdx.x * 8; i < n; i += blockDim.x * 8) {
            float v[8];
            load8(src + i, v);
#pragma unroll
            for (int j = 0; j < 8; ++j) ss += v[j] * v[j];
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            float v = to_f32(src[i]);
            ss += v * v;
        }
    }
    scale_row(src, w, dst, n, rsqrtf(block_sum(ss, scratch) / (float)n + eps), vec);
}

extern "C" __global__ void rmsnorm_f32_bf16(const float* x, long long x_outer, long long x_inner,
                                            const bf16* w, bf16* out, long long o_outer,
                                            long long o_inner, int n, float eps) {
    rmsnorm_row(x, RowAddr{x_outer, x_inner}, w, out, RowAddr{o_outer, o_inner}, n, eps);
}

extern "C" __global__ void rmsnorm_bf16_bf16(const bf16* x, long long x_outer, long long x_inner,
                                             const bf16* w, bf16* out, long long o_outer,
                                             long long o_inner, int n, float eps) {
    rmsnorm_row(x, RowAddr{x_outer, x_inner}, w, out, RowAddr{o_outer, o_inner}, n, eps);
}

// residual (f32, [rows, n] dense) += delta (bf16, row stride delta_stride); then the norm.
extern "C" __global__ void add_rmsnorm(float* residual, const bf16* delta, long long delta_stride,
                                       const bf16* w, bf16* out, long long out_stride, int n,
                                       float eps) {
    __shared__ float scratch[32];
    float* res = residual + (long long)blockIdx.x * n;
    const bf16* d = delta + (long long)blockIdx.x * delta_stride;
    bf16* dst = out + (long long)blockIdx.x * out_stride;
    const bool vec = (n % 8 == 0) && aligned16(res) && aligned16(d) && aligned16(dst) && aligned16(w);
    float ss = 0.f;
    if (vec) {
        for (int i = threadIdx.x * 8; i < n; i += blockDim.x * 8) {
            float r[8], v[8];
            load8(res + i, r);
            load8(d + i, v);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                r[j] += v[j];
                ss += r[j] * r[j];
            }
            store8(res + i, r);
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            float r = res[i] + to_f32(d[i]);
            res[i] = r;
            ss += r * r;
        }
    }
    scale_row(res, w, dst, n, rsqrtf(block_sum(ss, scratch) / (float)n + eps), vec);
}
