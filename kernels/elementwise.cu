// Element-wise ops and row movement on f32 activations. Grid-stride loops over `len`
// elements unless said otherwise.

#define GRID_STRIDE(i, len) \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (len); i += (long long)gridDim.x * blockDim.x)

// out = silu(gate) * up
extern "C" __global__ void silu_mul_f32(const float* gate, const float* up, float* out, long long len) {
    pdl_enter();
    GRID_STRIDE(i, len) {
        const float g = gate[i];
        out[i] = g / (1.f + __expf(-g)) * up[i];
    }
}

// The gated MLP's activation from one stacked gate-up matmul (`products` [rows, 2 * cols]: a
// row's gate products, then its up products): act = silu(gate) * up ([rows, cols]), as
// silu_mul_f32 computes it, and, when `copy` is not NULL, act rounded to bf16 there (the
// operand of the cuBLAS down matmul: src/backend/cuda/gemm.rs, `stage`).
extern "C" __global__ void silu_mul_stacked_f32(const float* products, float* act, bf16* copy, int cols, long long len) {
    pdl_enter();
    GRID_STRIDE(i, len) {
        const long long r = i / cols, c = i - r * cols;
        const float g = products[2 * r * cols + c];
        const float a = g / (1.f + __expf(-g)) * products[(2 * r + 1) * cols + c];
        act[i] = a;
        if (copy) put(copy + i, a);
    }
}

// dst += src
extern "C" __global__ void add_f32(float* dst, const float* src, long long len) {
    pdl_enter();
    GRID_STRIDE(i, len) dst[i] += src[i];
}

// x[r, c] += bias[c] for the first len = rows * cols elements (Qwen2's q/k/v bias).
extern "C" __global__ void add_bias_f32(float* x, const bf16* bias, int cols, long long len) {
    pdl_enter();
    GRID_STRIDE(i, len) x[i] += __bfloat162float(bias[i % cols]);
}

// The bf16 copy of activations that cuBLAS multiplies (prefill-sized matmuls).
extern "C" __global__ void f32_to_bf16(const float* src, bf16* dst, long long len) {
    pdl_enter();
    GRID_STRIDE(i, len) dst[i] = __float2bfloat16_rn(src[i]);
}

// x as high + low, both bf16: the high part x rounded, the low part what that rounding left
// out, for a cuBLAS product of x's f32 values to about 16 bits (Matmuls::run_split).
extern "C" __global__ void f32_to_bf16_split(const float* src, bf16* high, bf16* low, long long len) {
    pdl_enter();
    GRID_STRIDE(i, len) {
        bf16 h = __float2bfloat16_rn(src[i]);
        high[i] = h;
        low[i] = __float2bfloat16_rn(src[i] - __bfloat162float(h));
    }
}

// dst[dst_start + r] = src[src_start + r] for r < rows (same width). The starts come from
// `starts` ([src_start, dst_start] on the device) when it is not NULL, so a replayed graph
// writes the KV cache at the new position. The row kernels here (copy, gather, move) also
// move the rows of a bf16 KV cache as they are, two values to a float slot (the host halves
// `cols`).
template <typename T>
__device__ __forceinline__ void copy_rows(const float* src, T* dst, int cols, int rows, int src_start_arg,
                                          int dst_start_arg, const int* starts) {
    const long long src_start = starts ? starts[0] : src_start_arg;
    const long long dst_start = starts ? starts[1] : dst_start_arg;
    const long long len = (long long)rows * cols;
    GRID_STRIDE(i, len) put(dst + dst_start * cols + i, src[src_start * cols + i]);
}

extern "C" __global__ void copy_rows_f32(const float* src, float* dst, int cols, int rows, int src_start_arg,
                                         int dst_start_arg, const int* starts) {
    pdl_enter();
    copy_rows(src, dst, cols, rows, src_start_arg, dst_start_arg, starts);
}

// copy_rows_f32 into a bf16 KV cache: each value rounded to nearest even.
extern "C" __global__ void copy_rows_to_bf16(const float* src, bf16* dst, int cols, int rows, int src_start_arg,
                                             int dst_start_arg, const int* starts) {
    pdl_enter();
    copy_rows(src, dst, cols, rows, src_start_arg, dst_start_arg, starts);
}

// dst[r, dst_col + c] = src[r, c] for r < rows, c < src_cols (concatenating features).
extern "C" __global__ void copy_cols_f32(const float* src, int src_cols, float* dst, int dst_cols, int dst_col,
                                         int rows) {
    pdl_enter();
    const long long len = (long long)rows * src_cols;
    GRID_STRIDE(i, len) dst[(i / src_cols) * dst_cols + dst_col + i % src_cols] = src[i];
}

// dst[r] = src[rows[r]] for r < n. Grid: n blocks.
extern "C" __global__ void gather_rows_f32(const float* src, float* dst, int cols, const int* rows) {
    pdl_enter();
    const float* s = src + (long long)rows[blockIdx.x] * cols;
    float* d = dst + (long long)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
}

// t[dst_start + i] = t[src_rows[i]] for i < count, in order: committing an accepted tree
// path. params = [dst_start, src_rows...]. Sources are ascending and never before their
// destination, so moving row by row in order never overwrites a row before it is read.
// One block; a barrier between rows.
extern "C" __global__ void move_rows_f32(float* t, int cols, const int* params, int count) {
    pdl_enter();
    const long long dst_start = params[0];
    for (int i = 0; i < count; ++i) {
        const long long s = params[1 + i], d = dst_start + i;
        if (s != d)
            for (int c = threadIdx.x; c < cols; c += blockDim.x) t[d * cols + c] = t[s * cols + c];
        __syncthreads();
    }
}

// A batched forward's new K and V rows into the pool (bf16): row r goes to the slot of its own
// token, the last slot it sees in paged attention's table (kernels/attention.cu). Grid:
// the forward's rows (one that belongs to no sequence sees no keys and stores nothing).
extern "C" __global__ void store_kv_paged_f32(const float* k_new, const float* v_new, bf16* k_cache, bf16* v_cache,
                                              int width, const int* table) {
    pdl_enter();
    const long long r = blockIdx.x;
    if (table[2 * r] == 0) return;
    const long long slot = table[table[2 * r + 1] + table[2 * r] - 1];
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        put(k_cache + slot * width + c, k_new[r * width + c]);
        put(v_cache + slot * width + c, v_new[r * width + c]);
    }
}

// The ids chain drafting keeps on the device (src/engine/drafter.rs, ChainTokens).
// dst[at + i] = map[src[i * stride]] (src[i * stride] when map is NULL) for i < n: the first
// index of each row of a top-k, as an id of the vocabulary map leads to. `at` comes from
// `starts` ([at] on the device) when it is not NULL.
extern "C" __global__ void pick_ids_i32(const int* src, int stride, const int* map, int n, int* dst, int at_arg,
                                        const int* starts) {
    pdl_enter();
    const long long at = starts ? starts[0] : at_arg;
    GRID_STRIDE(i, n) {
        const int best = src[i * stride];
        dst[at + i] = map ? map[best] : best;
    }
}

// dst[base + i] = src[from[i]] for i < n where from[i] >= 0; the other entries keep theirs.
extern "C" __global__ void gather_ids_i32(const int* src, const int* from, int n, int* dst, int base) {
    pdl_enter();
    GRID_STRIDE(i, n) {
        const int f = from[i];
        if (f >= 0) dst[base + i] = src[f];
    }
}
