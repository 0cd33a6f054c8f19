// Token embedding lookup: out[t, :] = table[ids[t], :]. One block per token.
// An id outside [0, vocab) writes zeros and sets *bad_id, so the host can name the token
// instead of reading out of bounds.

template <typename Tout>
__device__ void embedding_row(const int* __restrict__ ids, const bf16* __restrict__ table,
                              Tout* __restrict__ out, int hidden, int vocab, int out_stride,
                              int* __restrict__ bad_id) {
    const int t = blockIdx.x;
    const int id = ids[t];
    Tout* dst = out + (long long)t * out_stride;
    const bool valid = id >= 0 && id < vocab;
    if (!valid && threadIdx.x == 0) atomicExch(bad_id, id);
    const bf16* src = table + (long long)(valid ? id : 0) * hidden;
    const bool vec = (hidden % 8 == 0) && aligned16(src) && aligned16(dst);
    int start = 0;
    if (vec) {
        for (int i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) {
            float v[8];
            load8(src + i, v);
            if (!valid) {
#pragma unroll
                for (int j = 0; j < 8; ++j) v[j] = 0.f;
            }
            store8(dst + i, v);
        }
        start = hidden;
    }
    for (int i = start + threadIdx.x; i < hidden; i += blockDim.x) put(dst + i, valid ? to_f32(src[i]) : 0.f);
}

extern "C" __global__ void embedding_bf16(const int* ids, const bf16* table, bf16* out, int hidden,
                                          int vocab, int out_stride, int* bad_id) {
    embedding_row(ids, table, out, hidden, vocab, out_stride, bad_id);
}

extern "C" __global__ void embedding_f32(const int* ids, const bf16* table, float* out, int hidden,
                                         int vocab, int out_stride, int* bad_id) {
    embedding_row(ids, table, out, hidden, vocab, out_stride, bad_id);
}
