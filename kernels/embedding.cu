// Token embedding lookup: out[t, :] = table[ids[t], :] (bf16 table, f32 activations).
// An id outside [0, vocab) writes zeros and records itself in *bad_id, so the host can
// name the token at the next sync instead of reading out of bounds. One block per token.
extern "C" __global__ void embedding_f32(const int* ids, const bf16* table, float* out, int hidden, int vocab,
                                         int* bad_id) {
    pdl_enter();
    const int t = blockIdx.x;
    const int id = ids[t];
    float* dst = out + (long long)t * hidden;
    const bool valid = id >= 0 && id < vocab;
    if (!valid) {
        if (threadIdx.x == 0) atomicExch(bad_id, id);
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = 0.f;
        return;
    }
    const bf16* src = table + (long long)id * hidden;
    if (hidden % 8 == 0 && aligned16(src) && aligned16(dst)) {
        for (int i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) {
            float v[8];
            load8(src + i, v);
            store8(dst + i, v);
        }
    } else {
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = __bfloat162float(src[i]);
    }
}
