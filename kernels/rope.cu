// Rotary position embedding on f32 activations ([rows, heads * head_dim]). cos/sin are the
// host-computed tables [max_positions, head_dim / 2], already scaled (llama3 / YaRN,
// attention factor), so the GPU rotates exactly as the CPU reference does. NeoX style
// rotates (j, j + half); interleaved (GPT-J) rotates (2j, 2j + 1). Positions are read from
// device memory, so a captured graph replays at new positions.

// Rotate one head in place at `pos`; when `copy` is set, also write the rotated head there
// (a bf16 KV cache row, rounded).
__device__ __forceinline__ void rotate_head(float* head, int head_dim, const float* cos_table, const float* sin_table,
                                            long long pos, int interleaved, bf16* copy) {
    const int half = head_dim / 2;
    const float* c = cos_table + pos * half;
    const float* s = sin_table + pos * half;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        const int a = interleaved ? 2 * j : j;
        const int b = interleaved ? 2 * j + 1 : j + half;
        float r0, r1;
        rotate_pair(head[a], head[b], c[j], s[j], r0, r1);
        head[a] = r0;
        head[b] = r1;
        if (copy) {
            put(copy + a, r0);
            put(copy + b, r1);
        }
    }
}

// In place on every head of the first rows of x. Grid: (rows, heads).
extern "C" __global__ void rope_f32(float* x, int cols, int head_dim, const float* cos_table,
                                    const float* sin_table, const int* positions, int interleaved) {
    pdl_enter();
    float* head = x + (long long)blockIdx.x * cols + (long long)blockIdx.y * head_dim;
    rotate_head(head, head_dim, cos_table, sin_table, positions[blockIdx.x], interleaved, nullptr);
}

// One layer's step into its KV cache (bf16): rotate q and k in place, and write the rotated
// k and the v of row r into cache row slot + r. The slot is `slot_arg`, or `*slot_dev` when that
// is not NULL (a replayed graph writes at the new position). Grid: (rows, heads + kv_heads):
// blocks y < heads rotate a q head, the others a k head and move its v head.
extern "C" __global__ void rope_store_kv_f32(float* q, float* k, const float* v, int heads, int kv_heads,
                                             int head_dim, const float* cos_table, const float* sin_table,
                                             const int* positions, int interleaved, bf16* k_cache,
                                             bf16* v_cache, int slot_arg, const int* slot_dev) {
    pdl_enter();
    const int row = blockIdx.x, h = blockIdx.y;
    const long long pos = positions[row];
    if (h < heads) {
        rotate_head(q + ((long long)row * heads + h) * head_dim, head_dim, cos_table, sin_table, pos, interleaved,
                    nullptr);
        return;
    }
    const int kh = h - heads;
    const long long kv_width = (long long)kv_heads * head_dim;
    const long long slot = (slot_dev ? slot_dev[0] : slot_arg) + row;
    const long long src = row * kv_width + (long long)kh * head_dim;
    const long long dst = slot * kv_width + (long long)kh * head_dim;
    rotate_head(k + src, head_dim, cos_table, sin_table, pos, interleaved, k_cache + dst);
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) put(v_cache + dst + i, v[src + i]);
}

// The products of one stacked q, k, v matmul (`src`, [rows, (heads + 2 * kv_heads) * head_dim]
// f32) into q, k and v ([rows, their widths]), each plus its bias (NULL: none), with q and k
// rotated at the row's position when `rotate` is set (as rope_f32 rotates them). Grid: (rows,
// heads + 2 * kv_heads): block y moves one head of q, then of k, then of v.
extern "C" __global__ void split_qkv_f32(const float* src, float* q, float* k, float* v, const bf16* q_bias,
                                         const bf16* k_bias, const bf16* v_bias, int heads, int kv_heads,
                                         int head_dim, const float* cos_table, const float* sin_table,
                                         const int* positions, int interleaved, int rotate) {
    pdl_enter();
    const int row = blockIdx.x, y = blockIdx.y;
    const long long width = (long long)(heads + 2 * kv_heads) * head_dim;
    const float* from = src + row * width + (long long)y * head_dim;
    float* to;
    const bf16* bias;
    int head;
    if (y < heads) {
        head = y;
        to = q + ((long long)row * heads + head) * head_dim;
        bias = q_bias;
    } else if (y < heads + kv_heads) {
        head = y - heads;
        to = k + ((long long)row * kv_heads + head) * head_dim;
        bias = k_bias;
    } else {
        head = y - heads - kv_heads;
        to = v + ((long long)row * kv_heads + head) * head_dim;
        bias = v_bias;
    }
    if (bias) bias += (long long)head * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) to[i] = from[i] + (bias ? __bfloat162float(bias[i]) : 0.f);
    if (rotate && y < heads + kv_heads) {
        // Each thread rotates pairs other threads copied.
        __syncthreads();
        rotate_head(to, head_dim, cos_table, sin_table, positions[row], interleaved, nullptr);
    }
}
