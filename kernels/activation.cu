// out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i], with gate and up fused in one
// GEMM output of width 2 * inter. Grid: (tokens, ceil(inter / (8 * blockDim.x))).
extern "C" __global__ void silu_mul_bf16(const bf16* gate_up, long long in_stride, bf16* out,
                                         long long out_stride, int inter) {
    const bf16* g = gate_up + (long long)blockIdx.x * in_stride;
    const bf16* u = g + inter;
    bf16* o = out + (long long)blockIdx.x * out_stride;
    const bool vec = (inter % 8 == 0) && aligned16(g) && aligned16(u) && aligned16(o);
    if (vec) {
        const int i = (blockIdx.y * blockDim.x + threadIdx.x) * 8;
        if (i < inter) {
            float a[8], b[8];
            load8(g + i, a);
            load8(u + i, b);
#pragma unroll
            for (int j = 0; j < 8; ++j) a[j] = a[j] / (1.f + __expf(-a[j])) * b[j];
            store8(o + i, a);
        }
    } else {
        for (int i = (blockIdx.y * blockDim.x + threadIdx.x) * 8, end = min(i + 8, inter); i < end; ++i) {
            const float a = __bfloat162float(g[i]);
            o[i] = __float2bfloat16_rn(a / (1.f + __expf(-a)) * __bfloat162float(u[i]));
        }
    }
}

// x[t, i] += bias[i] (Qwen2's qkv bias). Grid: (tokens, ceil(n / blockDim.x)).
extern "C" __global__ void add_bias_bf16(bf16* x, long long stride, const bf16* bias, int n) {
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i < n) {
        bf16* p = x + (long long)blockIdx.x * stride + i;
        *p = __float2bfloat16_rn(__bfloat162float(*p) + __bfloat162float(bias[i]));
    }
}

// dst[i, :] = src[idx[i], :]; the row list lives on the device (e.g. accepted tree nodes).
// Grid: rows. Separate entry points per element type.
template <typename T>
__device__ void gather_row(const T* src, long long src_stride, T* dst, long long dst_stride,
                           const int* idx, int cols) {
    const T* s = src + (long long)idx[blockIdx.x] * src_stride;
    T* d = dst + (long long)blockIdx.x * dst_stride;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) d[i] = s[i];
}

extern "C" __global__ void gather_rows_bf16(const bf16* src, long long src_stride, bf16* dst,
                                            long long dst_stride, const int* idx, int cols) {
    gather_row(src, src_stride, dst, dst_stride, idx, cols);
}

extern "C" __global__ void gather_rows_f32(const float* src, long long src_stride, float* dst,
                                           long long dst_stride, const int* idx, int cols) {
    gather_row(src, src_stride, dst, dst_stride, idx, cols);
}

// Element type conversions (f32 residual stream <-> bf16 activations). Grid-stride.
extern "C" __global__ void f32_to_bf16(const float* src, bf16* dst, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

extern "C" __global__ void bf16_to_f32(const bf16* src, float* dst, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}
