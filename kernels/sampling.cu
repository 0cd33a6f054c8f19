// Decoding on f32 rows [rows, cols]: argmax, softmax, top-k and inverse-CDF sampling,
// with the CPU reference's tie rules (the lowest index wins).

// A vocabulary row is too long for one block to read quickly, so argmax, softmax and top-k
// each take two launches: a grid of (chunks, rows) blocks reads the row in chunks (the
// chunk count comes from the host: `chunk_count` in backend/cuda/chunked.rs), then the
// chunks' results are merged in chunk order, which gives what one pass over the row gives.

// Chunk c of `chunks` over a row of `cols`: [lo, hi), chunk starts on a multiple of 4.
__device__ __forceinline__ void chunk_bounds(int cols, int chunks, int c, int& lo, int& hi) {
    const int per = ((cols + chunks - 1) / chunks + 3) & ~3;
    lo = min(cols, c * per);
    hi = min(cols, lo + per);
}

// The best (value, index) of x[lo, hi) ranked strictly after (prev_v, prev_i); the whole
// block gets it.
__device__ __forceinline__ void best_after(const float* x, int lo, int hi, float prev_v, int prev_i, float& best,
                                           int& best_i, float* sv, int* si) {
    best = -INFINITY;
    best_i = 0x7fffffff;
#pragma unroll 8
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const float v = x[i];
        if (ranks_before(prev_v, prev_i, v, i) && ranks_before(v, i, best, best_i)) {
            best = v;
            best_i = i;
        }
    }
    block_best(best, best_i, sv, si);
}

// The k best entries of row[lo, hi), best first, into cand_v / cand_i[out + j] (a short
// chunk pads with -inf). Returns the best value (the chunk's max) to the whole block.
__device__ __forceinline__ float chunk_topk(const float* row, int lo, int hi, int k, float* cand_v, int* cand_i,
                                            long long out) {
    __shared__ float sv[32];
    __shared__ int si[32];
    float first = -INFINITY;
    float prev_v = INFINITY;
    int prev_i = -1;
    for (int j = 0; j < k; ++j) {
        float best;
        int best_i;
        best_after(row, lo, hi, prev_v, prev_i, best, best_i, sv, si);
        if (threadIdx.x == 0) {
            cand_v[out + j] = best;
            cand_i[out + j] = best_i;
        }
        if (j == 0) first = best;
        prev_v = best;
        prev_i = best_i;
    }
    return first;
}

// Pass 1 of argmax and top-k: the k best entries of chunk blockIdx.x of row blockIdx.y into
// cand_v / cand_i[(row * chunks + chunk) * k + j].
extern "C" __global__ void topk_chunks_f32(const float* x, int cols, int k, float* cand_v, int* cand_i) {
    pdl_enter();
    int lo, hi;
    chunk_bounds(cols, gridDim.x, blockIdx.x, lo, hi);
    const long long chunk = (long long)blockIdx.y * gridDim.x + blockIdx.x;
    chunk_topk(x + (long long)blockIdx.y * cols, lo, hi, k, cand_v, cand_i, chunk * k);
}

// The k best of n candidates (v, ix), best first, ties to the lower index: emit(j, value,
// index) on thread 0 for each.
template <typename Emit>
__device__ __forceinline__ void merge_best(const float* v, const int* ix, int n, int k, Emit emit) {
    __shared__ float sv[32];
    __shared__ int si[32];
    float prev_v = INFINITY;
    int prev_i = -1;
    for (int j = 0; j < k; ++j) {
        float best = -INFINITY;
        int best_i = 0x7fffffff;
        for (int c = threadIdx.x; c < n; c += blockDim.x)
            if (ranks_before(prev_v, prev_i, v[c], ix[c]) && ranks_before(v[c], ix[c], best, best_i)) {
                best = v[c];
                best_i = ix[c];
            }
        block_best(best, best_i, sv, si);
        if (threadIdx.x == 0) emit(j, best, best_i);
        prev_v = best;
        prev_i = best_i;
    }
}

// Pass 2: the k best of a row's chunks x k candidates: values[r * values_cols + j] (when
// values is not NULL) and indices[r * k + j]. Grid: rows.
extern "C" __global__ void topk_merge_f32(const float* cand_v, const int* cand_i, int chunks, int k, float* values,
                                          int values_cols, int* indices) {
    pdl_enter();
    const long long n = (long long)chunks * k, r = blockIdx.x;
    merge_best(cand_v + r * n, cand_i + r * n, (int)n, k, [&](int j, float best, int best_i) {
        if (values) values[r * values_cols + j] = best;
        indices[r * k + j] = best_i;
    });
}

// sum of exp((x - mx) / temperature) over row[lo, hi), the whole block getting it.
__device__ __forceinline__ float chunk_exp_sum(const float* row, int lo, int hi, float mx, float temperature,
                                               float* scratch) {
    float total = 0.f;
#pragma unroll 8
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) total += __expf((row[i] - mx) / temperature);
    return block_sum(total, scratch);
}

// Pass 1 of softmax(x / temperature): chunk blockIdx.x of row blockIdx.y's max m and
// sum of exp((x - m) / temperature), into stats[(row * chunks + chunk) * 2 + {0, 1}].
extern "C" __global__ void softmax_chunks_f32(const float* x, int cols, float temperature, float* stats) {
    pdl_enter();
    __shared__ float scratch[32];
    int lo, hi;
    chunk_bounds(cols, gridDim.x, blockIdx.x, lo, hi);
    const float* row = x + (long long)blockIdx.y * cols;
    float mx = -INFINITY;
#pragma unroll 8
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) mx = fmaxf(mx, row[i]);
    mx = block_max(mx, scratch);
    const float total = chunk_exp_sum(row, lo, hi, mx, temperature, scratch);
    if (threadIdx.x == 0) {
        float* out = stats + ((long long)blockIdx.y * gridDim.x + blockIdx.x) * 2;
        out[0] = mx;
        out[1] = total;
    }
}

// A row's max and 1 / sum of exp((x - max) / temperature), merged from its chunks' stats in
// chunk order (the same bits wherever it is done).
__device__ __forceinline__ void row_stats(const float* st, int chunks, float temperature, float& mx, float& inv) {
    mx = -INFINITY;
    for (int c = 0; c < chunks; ++c) mx = fmaxf(mx, st[2 * c]);
    float total = 0.f;
    for (int c = 0; c < chunks; ++c)
        if (st[2 * c] != -INFINITY) total += st[2 * c + 1] * __expf((st[2 * c] - mx) / temperature);
    inv = 1.f / total;
}

// Pass 2, in place: every block merges its row's chunk stats, then writes
// exp((x - max) / temperature) / sum over its own chunk.
extern "C" __global__ void softmax_apply_f32(float* x, int cols, float temperature, const float* stats) {
    pdl_enter();
    int lo, hi;
    chunk_bounds(cols, gridDim.x, blockIdx.x, lo, hi);
    float mx, inv;
    row_stats(stats + (long long)blockIdx.y * gridDim.x * 2, gridDim.x, temperature, mx, inv);
    float* row = x + (long long)blockIdx.y * cols;
#pragma unroll 8
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) row[i] = __expf((row[i] - mx) / temperature) * inv;
}

// A draft step reads only the top k of softmax(x) (temperature 1), so it need not write the
// probabilities of the whole row. Pass 1: a chunk's k best entries (as topk_chunks_f32), and
// its max (the best of them) and sum (as softmax_chunks_f32), in one launch.
extern "C" __global__ void softmax_topk_chunks_f32(const float* x, int cols, int k, float* cand_v, int* cand_i,
                                                   float* stats) {
    pdl_enter();
    __shared__ float scratch[32];
    int lo, hi;
    chunk_bounds(cols, gridDim.x, blockIdx.x, lo, hi);
    const float* row = x + (long long)blockIdx.y * cols;
    const long long chunk = (long long)blockIdx.y * gridDim.x + blockIdx.x;
    const float mx = chunk_topk(row, lo, hi, k, cand_v, cand_i, chunk * k);
    const float total = chunk_exp_sum(row, lo, hi, mx, 1.f, scratch);
    if (threadIdx.x == 0) {
        stats[chunk * 2] = mx;
        stats[chunk * 2 + 1] = total;
    }
}

// Pass 2: the k best candidates of a row (as topk_merge_f32), each written as the
// probability softmax_apply_f32 gives it. Grid: rows.
extern "C" __global__ void softmax_topk_merge_f32(const float* cand_v, const int* cand_i, int chunks, int k,
                                                  const float* stats, float* values, int values_cols, int* indices) {
    pdl_enter();
    const long long n = (long long)chunks * k, r = blockIdx.x;
    float mx, inv;
    row_stats(stats + r * chunks * 2, chunks, 1.f, mx, inv);
    merge_best(cand_v + r * n, cand_i + r * n, (int)n, k, [&](int j, float best, int best_i) {
        values[r * values_cols + j] = __expf(best - mx) * inv;  // temperature 1
        indices[r * k + j] = best_i;
    });
}

__device__ __forceinline__ bool listed(const int* list, int n, int i) {
    for (int s = 0; s < n; ++s)
        if (list[s] == i) return true;
    return false;
}

// *out = the index drawn from the probability row `probs[row]` by inverse CDF at `coin`,
// with the `n_excluded` ids in `excluded` removed and the rest renormalised; when they
// hold no mass, the row as is. Zero entries are never drawn; a draw past the end (rounding)
// takes the last live entry; *out = -1 when the row has no mass at all. Each thread owns
// one contiguous chunk, so the result is that of a sequential scan (up to float sum order).
// One block of at most 1024 threads.
extern "C" __global__ void sample_probs_f32(const float* probs, int cols, int row, const int* excluded,
                                            int n_excluded, float coin, int* out) {
    pdl_enter();
    __shared__ float scratch[32];
    __shared__ float chunk[1024];
    __shared__ float s_target, s_before;
    __shared__ int s_owner, s_keep_all;
    const float* p = probs + (long long)row * cols;
    const int per = (cols + blockDim.x - 1) / blockDim.x;
    const int lo = min(cols, (int)threadIdx.x * per), hi = min(cols, lo + per);
    float kept = 0.f;
    for (int i = lo; i < hi; ++i)
        if (p[i] > 0.f && !listed(excluded, n_excluded, i)) kept += p[i];
    const int keep_all = block_sum(kept, scratch) > 0.f ? 0 : 1;
    float local = 0.f;
    for (int i = lo; i < hi; ++i)
        if (p[i] > 0.f && (keep_all || !listed(excluded, n_excluded, i))) local += p[i];
    chunk[threadIdx.x] = local;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.f;
        for (int t = 0; t < blockDim.x; ++t) total += chunk[t];
        const float target = coin * total;
        float run = 0.f, run_last = 0.f;
        int owner = -1, last = -1;
        for (int t = 0; t < blockDim.x; ++t) {
            if (chunk[t] <= 0.f) continue;
            if (target < run + chunk[t]) {
                owner = t;
                break;
            }
            last = t;
            run_last = run;
            run += chunk[t];
        }
        if (owner < 0) {
            owner = last;
            run = run_last;
        }
        s_target = target;
        s_before = run;
        s_owner = owner;
        s_keep_all = keep_all;
        if (owner < 0) *out = -1;
    }
    __syncthreads();
    if ((int)threadIdx.x == s_owner) {
        float run = s_before;
        int pick = -1;
        for (int i = lo; i < hi; ++i) {
            if (!(p[i] > 0.f) || (!s_keep_all && listed(excluded, n_excluded, i))) continue;
            pick = i;
            run += p[i];
            if (s_target < run) break;
        }
        *out = pick;
    }
}
