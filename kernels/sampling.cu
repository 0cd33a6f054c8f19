// Decoding on f32 rows [rows, cols]: argmax, softmax, top-k and inverse-CDF sampling,
// with the CPU reference's tie rules (the lowest index wins).

// out[r] = argmax(x[r, :cols]). Grid: rows.
extern "C" __global__ void argmax_f32(const float* x, int cols, int* out) {
    pdl_enter();
    __shared__ float sv[32];
    __shared__ int si[32];
    const float* row = x + (long long)blockIdx.x * cols;
    float best = -INFINITY;
    int best_i = 0x7fffffff;
    auto consider = [&](float v, int i) {
        if (ranks_before(v, i, best, best_i)) {
            best = v;
            best_i = i;
        }
    };
    // A vocabulary row is long: 16-byte loads, several in flight per thread.
    const int vec = aligned16(row) ? cols / 4 : 0;
#pragma unroll 4
    for (int j = threadIdx.x; j < vec; j += blockDim.x) {
        const float4 v = reinterpret_cast<const float4*>(row)[j];
        consider(v.x, 4 * j);
        consider(v.y, 4 * j + 1);
        consider(v.z, 4 * j + 2);
        consider(v.w, 4 * j + 3);
    }
    for (int i = 4 * vec + threadIdx.x; i < cols; i += blockDim.x) consider(row[i], i);
    block_best(best, best_i, sv, si);
    if (threadIdx.x == 0) out[blockIdx.x] = best_i;
}

// In place: x[r] = softmax(x[r] / temperature). Grid: rows.
extern "C" __global__ void softmax_f32(float* x, int cols, float temperature) {
    pdl_enter();
    __shared__ float scratch[32];
    float* row = x + (long long)blockIdx.x * cols;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) mx = fmaxf(mx, row[i]);
    mx = block_max(mx, scratch);
    float total = 0.f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float e = __expf((row[i] - mx) / temperature);
        row[i] = e;
        total += e;
    }
    const float inv = 1.f / block_sum(total, scratch);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) row[i] *= inv;
}

// The k largest entries of each row, best first, ties to the lower index:
// values[r * values_cols + j], indices[r * k + j]. k passes, each taking the best element
// ranked strictly after the previous pick, so no exclusion list is needed. Grid: rows.
extern "C" __global__ void topk_f32(const float* x, int cols, int k, float* values, int values_cols,
                                    int* indices) {
    pdl_enter();
    __shared__ float sv[32];
    __shared__ int si[32];
    const float* row = x + (long long)blockIdx.x * cols;
    float prev_v = INFINITY;
    int prev_i = -1;
    for (int j = 0; j < k; ++j) {
        float best = -INFINITY;
        int best_i = 0x7fffffff;
        for (int i = threadIdx.x; i < cols; i += blockDim.x) {
            const float v = row[i];
            if (ranks_before(prev_v, prev_i, v, i) && ranks_before(v, i, best, best_i)) {
                best = v;
                best_i = i;
            }
        }
        block_best(best, best_i, sv, si);
        if (threadIdx.x == 0) {
            values[(long long)blockIdx.x * values_cols + j] = best;
            indices[(long long)blockIdx.x * k + j] = best_i;
        }
        prev_v = best;
        prev_i = best_i;
    }
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
