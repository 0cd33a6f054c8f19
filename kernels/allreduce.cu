// The all-reduce between the GPUs of one process, through peer memory (the host side is
// src/backend/cuda/peer.rs). NCCL's all-reduce of a decode step's few KB costs far more
// than the bytes: it is a chain of protocol steps. Here every rank writes each value into
// every peer's inbox over NVLink as one 8-byte word that also carries the call's number,
// so a value and its "ready" travel together (no fence, no separate flag), then waits for
// the peers' words in its own inbox and adds everything in rank order: every rank gets
// the same bits.
//
// Each block owns one chunk of the vector and its own call counter, so blocks never wait
// on each other. Inboxes alternate between two halves by the call's parity: a rank can be
// only one call ahead of a peer (it needs that peer's values for the call it is in), so
// the half it writes is never the one the peer still reads.

#define AR_CHUNK 1024
#define AR_THREADS 256
#define AR_MAX_WORLD 8
// A peer that never arrives (its rank died) must not hang this GPU forever.
#define AR_TIMEOUT_NS 10000000000ull

__device__ __forceinline__ void store_word(unsigned long long* p, unsigned long long v) {
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long load_word(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Peer `r`'s value of call `call` from its word in this rank's inbox, once it is there.
__device__ __forceinline__ float await_value(const unsigned long long* word, unsigned call) {
    unsigned long long w = load_word(word);
    if ((unsigned)(w >> 32) != call) {
        const unsigned long long start = global_ns();
        do {
            if (global_ns() - start > AR_TIMEOUT_NS) __trap();
            w = load_word(word);
        } while ((unsigned)(w >> 32) != call);
    }
    return __uint_as_float((unsigned)w);
}

// Sum the first `len` values of `x` over the ranks: into `x` when `h` is NULL, else added
// to `h` (the residual stream) with `x` left as this rank's part. `inboxes` holds every
// rank's inbox address (2 halves x world slots x `cap` words); `calls` is this rank's
// per-block call counter.
extern "C" __global__ void __launch_bounds__(AR_THREADS)
    peer_all_reduce_f32(float* x, float* h, int len, int cap, const unsigned long long* inboxes, unsigned* calls,
                        int rank, int world) {
    __shared__ unsigned call_s;
    pdl_enter();
    const int b = blockIdx.x;
    if (threadIdx.x == 0) call_s = calls[b] + 1;
    __syncthreads();
    const unsigned call = call_s;
    const size_t half = (size_t)(call & 1) * world * cap;
    const unsigned long long stamp = (unsigned long long)call << 32;
    const unsigned long long* own = (const unsigned long long*)inboxes[rank] + half;
    const int hi = min(len, (b + 1) * AR_CHUNK);
    for (int i = b * AR_CHUNK + threadIdx.x; i < hi; i += AR_THREADS) {
        const float mine = x[i];
        for (int q = 0; q < world; ++q)
            if (q != rank)
                store_word((unsigned long long*)inboxes[q] + half + (size_t)rank * cap + i, stamp | __float_as_uint(mine));
        float v[AR_MAX_WORLD];
#pragma unroll
        for (int r = 0; r < AR_MAX_WORLD; ++r)
            v[r] = r >= world ? 0.f : r == rank ? mine : await_value(own + (size_t)r * cap + i, call);
        // Pairwise over the ranks, the same tree the row-parallel split cut the K slices by.
#pragma unroll
        for (int w = 1; w < AR_MAX_WORLD; w <<= 1)
#pragma unroll
            for (int r = 0; r + w < AR_MAX_WORLD; r += 2 * w)
                if (r + w < world) v[r] += v[r + w];
        if (h) h[i] += v[0];
        else x[i] = v[0];
    }
    if (threadIdx.x == 0) calls[b] = call;
}
