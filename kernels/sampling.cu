// Picking tokens from f32 logits [rows, row_stride]: argmax, temperature sampling, the
// drafter's top-k, and the on-device speculative verification that leaves only the accept
// length and the committed tokens to read back.

// out[r] = argmax(logits[r, :vocab]), the first maximum on ties. Grid: rows.
extern "C" __global__ void argmax_f32(const float* logits, long long row_stride, int vocab, int* out) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const float* row = logits + (long long)blockIdx.x * row_stride;
    float best = -INFINITY;
    int best_i = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = row[i];
        if (ranks_before(v, i, best, best_i)) { best = v; best_i = i; }
    }
    block_best(best, best_i, sv, si);
    if (threadIdx.x == 0) out[blockIdx.x] = best_i;
}

__device__ __forceinline__ bool listed(const int* list, int n, int i) {
    for (int s = 0; s < n; ++s)
        if (list[s] == i) return true;
    return false;
}

// An index of `row` drawn with probability softmax(row / temperature), leaving out the
// `n_skip` indices in `skip` (the rejected children of a tree verify), for the uniform
// draw u in [0, 1). Each thread owns one contiguous chunk, so the draw is the smallest
// index whose running mass exceeds u * total, the same as a sequential scan.
// Needs blockDim.x <= 1024; every thread of the block must call it.
__device__ int sample_row(const float* row, int vocab, float temperature, float u, const int* skip, int n_skip) {
    __shared__ float scratch[32];
    __shared__ float chunk[1024];
    __shared__ float s_target, s_before;
    __shared__ int s_owner, s_pick;
    const float inv_t = 1.f / temperature;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        if (!listed(skip, n_skip, i)) mx = fmaxf(mx, row[i]);
    mx = block_max(mx, scratch);
    const int per = (vocab + blockDim.x - 1) / blockDim.x;
    const int lo = min(vocab, (int)threadIdx.x * per), hi = min(vocab, lo + per);
    float local = 0.f;
    for (int i = lo; i < hi; ++i)
        if (!listed(skip, n_skip, i)) local += __expf((row[i] - mx) * inv_t);
    chunk[threadIdx.x] = local;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.f;
        for (int t = 0; t < blockDim.x; ++t) total += chunk[t];
        const float target = u * total;
        float run = 0.f, run_last = 0.f;
        int owner = -1, last = -1;
        for (int t = 0; t < blockDim.x; ++t) {
            if (chunk[t] <= 0.f) continue;
            if (run + chunk[t] > target) { owner = t; break; }
            last = t;
            run_last = run;
            run += chunk[t];
        }
        if (owner < 0) {  // rounding put the draw past the end: take the last live chunk
            owner = last;
            run = run_last;
        }
        s_target = target;
        s_before = run;
        s_owner = owner;
        s_pick = -1;
    }
    __syncthreads();
    if ((int)threadIdx.x == s_owner) {
        float run = s_before;
        int last = -1, pick = -1;
        for (int i = lo; i < hi && pick < 0; ++i) {
            if (listed(skip, n_skip, i)) continue;
            last = i;
            run += __expf((row[i] - mx) * inv_t);
            if (run > s_target) pick = i;
        }
        s_pick = pick >= 0 ? pick : last;
    }
    __syncthreads();
    const int pick = s_pick;
    __syncthreads();
    return pick;
}

// out[r] = a draw from softmax(logits[r] / temperature). The uniform comes from
// (seed, *counter, r): the counter lives on the device so graph replays draw afresh.
// Grid: rows; block <= 1024.
extern "C" __global__ void sample_f32(const float* logits, long long row_stride, int vocab, float temperature,
                                      unsigned long long seed, const unsigned long long* counter, int* out) {
    const float u = uniform01(seed, *counter, blockIdx.x);
    const int pick = sample_row(logits + (long long)blockIdx.x * row_stride, vocab, temperature, u, nullptr, 0);
    if (threadIdx.x == 0) out[blockIdx.x] = pick;
}

// The drafter's top-k: probabilities softmax(logits[r]) (no temperature, as SGLang) of the
// k best indices, best first, ties to the lower index. With d2t, an index i of the draft
// vocabulary maps to the target token i + d2t[i]. k passes, each taking the best element
// ranked strictly after the previous pick, so no exclusion list is needed.
// Grid: rows. out_p/out_tok: [rows, k].
extern "C" __global__ void topk_f32(const float* logits, long long row_stride, int vocab, int k, const int* d2t,
                                    float* out_p, int* out_tok) {
    __shared__ float scratch[32];
    __shared__ float sv[32];
    __shared__ int si[32];
    const float* row = logits + (long long)blockIdx.x * row_stride;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, row[i]);
    mx = block_max(mx, scratch);
    float z = 0.f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) z += __expf(row[i] - mx);
    z = block_sum(z, scratch);
    float prev_v = INFINITY;
    int prev_i = -1;
    for (int j = 0; j < k; ++j) {
        float best = -INFINITY;
        int best_i = 0x7fffffff;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            const float v = row[i];
            if (ranks_before(prev_v, prev_i, v, i) && ranks_before(v, i, best, best_i)) { best = v; best_i = i; }
        }
        block_best(best, best_i, sv, si);
        if (threadIdx.x == 0) {
            out_p[(long long)blockIdx.x * k + j] = __expf(best - mx) / z;
            out_tok[(long long)blockIdx.x * k + j] = d2t ? best_i + d2t[best_i] : best_i;
        }
        prev_v = best;
        prev_i = best_i;
    }
}

// Greedy verification of a draft tree (SGLang's VerifyTreeGreedy; a chain is the tree
// whose every node has one child). Node 0 is the root (the last committed token); node i
// carries token candidates[i]; predict[i] is the target's argmax after node i;
// next_token/next_sibling link children in sibling order (-1 = none).
//   accepted[0..=n]   node indices of the accepted path, root first (their KV stays);
//                     entries past n are 0 so gathers over the full length stay in bounds
//   result[0]         tokens committed = n accepted draft tokens + 1 bonus token
//   result[1..]       those tokens
// One thread: the walk is a handful of comparisons.
extern "C" __global__ void verify_greedy(const int* candidates, const int* predict, const int* next_token,
                                         const int* next_sibling, int max_depth, int* accepted, int* result) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    int last = 0, n = 0;
    accepted[0] = 0;
    for (int depth = 1; depth <= max_depth; ++depth) {
        int cur = next_token[last];
        while (cur != -1 && candidates[cur] != predict[last]) cur = next_sibling[cur];
        if (cur == -1) break;
        ++n;
        accepted[n] = cur;
        result[n] = candidates[cur];
        last = cur;
    }
    result[n + 1] = predict[last];
    result[0] = n + 1;
    for (int i = n + 1; i <= max_depth; ++i) accepted[i] = 0;
}

// Lossless verification with sampling (target-only: the draft proposals count as certain).
// At each accepted node, its children are tried in sibling order: child c is accepted with
// probability p(c) / (1 - mass of the children rejected so far), where p = softmax of the
// node's logits / temperature; that is exact rejection sampling from p. When every child
// is rejected, or the node has none, the bonus token is drawn from p without the rejected
// children. Outputs as verify_greedy. Uniforms: (seed, *counter, node) for the accept
// tests and (seed, *counter, 1 << 20) for the bonus draw.
// One block (<= 1024 threads); logits [nodes, row_stride].
extern "C" __global__ void verify_sample(const float* logits, long long row_stride, int vocab, float temperature,
                                         const int* candidates, const int* next_token, const int* next_sibling,
                                         int max_depth, unsigned long long seed, const unsigned long long* counter,
                                         int* accepted, int* result) {
    __shared__ float scratch[32];
    __shared__ int rejected[64];
    __shared__ int n_rejected, s_last, s_n, s_cur;
    __shared__ float s_rejected_mass;
    const unsigned long long ctr = *counter;
    if (threadIdx.x == 0) {
        s_last = 0;
        s_n = 0;
        accepted[0] = 0;
    }
    __syncthreads();
    for (int depth = 1; depth <= max_depth; ++depth) {
        const int last = s_last;
        const float* row = logits + (long long)last * row_stride;
        float mx = -INFINITY;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, row[i]);
        mx = block_max(mx, scratch);
        float z = 0.f;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) z += __expf((row[i] - mx) / temperature);
        z = block_sum(z, scratch);
        if (threadIdx.x == 0) {
            n_rejected = 0;
            s_rejected_mass = 0.f;
            int cur = next_token[last];
            s_cur = -1;
            while (cur != -1) {
                const float p = __expf((row[candidates[cur]] - mx) / temperature) / z;
                const float remaining = fmaxf(1.f - s_rejected_mass, 1e-20f);
                if (uniform01(seed, ctr, cur) * remaining < p) { s_cur = cur; break; }
                s_rejected_mass += p;
                if (n_rejected < 64) rejected[n_rejected++] = candidates[cur];
                cur = next_sibling[cur];
            }
            if (s_cur != -1) {
                s_n += 1;
                accepted[s_n] = s_cur;
                result[s_n] = candidates[s_cur];
                s_last = s_cur;
            }
        }
        __syncthreads();
        if (s_cur == -1) break;
    }
    const int last = s_last;
    const int bonus = sample_row(logits + (long long)last * row_stride, vocab, temperature,
                                 uniform01(seed, ctr, 1u << 20), rejected, n_rejected);
    if (threadIdx.x == 0) {
        result[s_n + 1] = bonus;
        result[0] = s_n + 1;
        for (int i = s_n + 1; i <= max_depth; ++i) accepted[i] = 0;
    }
}
