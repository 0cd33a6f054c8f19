// The kernels of kernels/*.cu run by the CPU emulation (shim.h) against references in
// double precision, and the properties speculative decoding relies on, bit for bit. The
// skinny matmuls (kernels/gemv.cu) are not here: they are warp-wide tensor-core
// instructions, and `specdeck cuda-check` checks their bit-for-bit promises on the GPU
// itself (backend/cuda/skinnycheck.rs).
// - attention (decode, long decode, prefill, chunk, tree mask; window from arguments or
//   from device memory), and a verify-tree query equals the same token decoded after its
//   ancestors were committed;
// - RoPE fused with the KV-cache write equals RoPE and two row copies.
//
// Build and run: scripts/kernel-emu.sh
#include "kernels.h"

#include <cstdio>
#include <random>


static std::mt19937 rng(5);
static int failures = 0;

static float uniform(float s) { return std::uniform_real_distribution<float>(-s, s)(rng); }
static std::vector<float> floats(size_t n, float s) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(s);
    return v;
}
static void expect(bool ok, const char* what) {
    if (!ok) {
        printf("FAIL %s\n", what);
        failures++;
    }
}

static const int PARENTS[5] = {-1, 0, 0, 1, 3};
static std::vector<int> tree_mask() {
    std::vector<int> mask(25, 0);
    for (int i = 0; i < 5; ++i)
        for (int n = i; n >= 0; n = PARENTS[n]) mask[i * 5 + n] = 1;
    return mask;
}

static const int WARPS = 16;

// The entry point the backend picks for a head_dim: a lane's share ceil(head_dim / 32).
using AttentionKernel = void (*)(const float*, const float*, const float*, float*, int, int, int, float, int, int, int,
                                 const int*, const int*);
static AttentionKernel attention_kernel(int hd) {
    const AttentionKernel by_share[8] = {attention_f32_p1, attention_f32_p2, attention_f32_p3, attention_f32_p4,
                                         attention_f32_p5, attention_f32_p6, attention_f32_p7, attention_f32_p8};
    return by_share[(hd + 31) / 32 - 1];
}

static void run_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                          std::vector<float>& out, int heads, int kv_heads, int hd, int prefix, int region, int queries,
                          const int* window, const int* mask) {
    launch(attention_kernel(hd), dim3{(unsigned)queries, (unsigned)heads, 1}, dim3{WARPS * 32, 1, 1}, WARPS * (hd + 2) * 4,
           q.data(), k.data(), v.data(), out.data(), heads, kv_heads, hd, 1.f / sqrtf(hd), prefix, region, queries, window,
           mask);
}

static void attention() {
    const std::vector<int> mask = tree_mask();
    for (int hd : {64, 80, 128}) {
        const int heads = 4, kv_heads = 2, slots = 200, width = kv_heads * hd;
        const std::vector<float> k = floats(slots * width, 1.f), v = floats(slots * width, 1.f);
        struct Case {
            int prefix, region, queries;
            bool tree;
        };
        for (Case c : {Case{41, 1, 1, false}, Case{150, 1, 1, false}, Case{0, 33, 33, false}, Case{20, 9, 4, false},
                       Case{57, 5, 5, true}, Case{130, 5, 5, true}}) {
            const std::vector<float> q = floats(c.queries * heads * hd, 1.f);
            const int window[2] = {c.prefix, c.region};
            for (bool from_device : {false, true}) {
                std::vector<float> out(c.queries * heads * hd, -7.f);
                run_attention(q, k, v, out, heads, kv_heads, hd, from_device ? -1 : c.prefix, from_device ? -1 : c.region,
                              c.queries, from_device ? window : nullptr, c.tree ? mask.data() : nullptr);
                double err = 0;
                for (int qi = 0; qi < c.queries; ++qi)
                    for (int h = 0; h < heads; ++h) {
                        const int kvh = h / (heads / kv_heads);
                        std::vector<int> seen;
                        for (int s = 0; s < c.prefix; ++s) seen.push_back(s);
                        for (int j = 0; j < c.region; ++j)
                            if (c.tree ? mask[qi * 5 + j] : j <= c.region - c.queries + qi) seen.push_back(c.prefix + j);
                        std::vector<double> p;
                        double top = -1e300, total = 0;
                        for (int s : seen) {
                            double d = 0;
                            for (int e = 0; e < hd; ++e)
                                d += (double)q[(qi * heads + h) * hd + e] / sqrt((double)hd) * k[s * width + kvh * hd + e];
                            p.push_back(d);
                            top = max(top, d);
                        }
                        for (double& d : p) total += d = exp(d - top);
                        for (int e = 0; e < hd; ++e) {
                            double num = 0;
                            for (size_t i = 0; i < seen.size(); ++i) num += p[i] * v[seen[i] * width + kvh * hd + e];
                            err = max(err, fabs(out[(qi * heads + h) * hd + e] - num / total));
                        }
                    }
                char what[140];
                snprintf(what, sizeof what, "attention hd=%d prefix=%d region=%d queries=%d tree=%d window on device=%d: max error %g",
                         hd, c.prefix, c.region, c.queries, c.tree, from_device, err);
                expect(err < 2e-5, what);
            }
        }
        // Node 4 of the tree (path 0, 1, 3, 4) against the same token decoded alone once
        // the path is committed to slots prefix .. prefix + 3.
        for (int prefix : {3, 40, 123}) {
            const std::vector<float> q = floats(5 * heads * hd, 1.f);
            std::vector<float> verify(5 * heads * hd), decode(heads * hd);
            run_attention(q, k, v, verify, heads, kv_heads, hd, prefix, 5, 5, nullptr, mask.data());
            std::vector<float> k2 = k, v2 = v;
            const int path[4] = {0, 1, 3, 4};
            for (int i = 0; i < 4; ++i)
                for (int e = 0; e < width; ++e) {
                    k2[(prefix + i) * width + e] = k[(prefix + path[i]) * width + e];
                    v2[(prefix + i) * width + e] = v[(prefix + path[i]) * width + e];
                }
            const std::vector<float> q4(q.begin() + 4 * heads * hd, q.end());
            run_attention(q4, k2, v2, decode, heads, kv_heads, hd, prefix + 3, 1, 1, nullptr, nullptr);
            char what[100];
            snprintf(what, sizeof what, "attention hd=%d prefix=%d: verify node differs from its decode in its bits", hd, prefix);
            expect(memcmp(decode.data(), verify.data() + 4 * heads * hd, decode.size() * 4) == 0, what);
        }
    }
}

static void rope_with_kv_write() {
    for (int interleaved : {0, 1}) {
        const int heads = 4, kv_heads = 2, hd = 64, rows = 3, positions = 50, slots = 20, slot = 7, width = kv_heads * hd;
        const std::vector<float> cos_t = floats(positions * hd / 2, 1.f), sin_t = floats(positions * hd / 2, 1.f);
        const int pos[3] = {7, 8, 30};
        std::vector<float> q = floats(rows * heads * hd, 1.f), k = floats(rows * width, 1.f);
        const std::vector<float> v = floats(rows * width, 1.f);
        std::vector<float> q_ref = q, k_ref = k, k_cache(slots * width, 5.f), v_cache(slots * width, 5.f);
        launch(rope_store_kv_f32, dim3{(unsigned)rows, (unsigned)(heads + kv_heads), 1}, dim3{32, 1, 1}, 0, q.data(), k.data(),
               v.data(), heads, kv_heads, hd, cos_t.data(), sin_t.data(), (const int*)pos, interleaved, k_cache.data(),
               v_cache.data(), slot, (const int*)nullptr);
        launch(rope_f32, dim3{(unsigned)rows, (unsigned)heads, 1}, dim3{32, 1, 1}, 0, q_ref.data(), heads * hd, hd,
               cos_t.data(), sin_t.data(), (const int*)pos, interleaved);
        launch(rope_f32, dim3{(unsigned)rows, (unsigned)kv_heads, 1}, dim3{32, 1, 1}, 0, k_ref.data(), width, hd,
               cos_t.data(), sin_t.data(), (const int*)pos, interleaved);
        bool same = q == q_ref && k == k_ref;
        for (int s = 0; s < slots; ++s)
            for (int e = 0; e < width; ++e) {
                const bool written = s >= slot && s < slot + rows;
                same &= k_cache[s * width + e] == (written ? k_ref[(s - slot) * width + e] : 5.f);
                same &= v_cache[s * width + e] == (written ? v[(s - slot) * width + e] : 5.f);
            }
        char what[80];
        snprintf(what, sizeof what, "rope_store_kv interleaved=%d differs from rope + row copies", interleaved);
        expect(same, what);
    }
}

int main() {
    attention();
    rope_with_kv_write();
    printf("kernel-emu: %s (%d failures)\n", failures ? "FAILED" : "all checks passed", failures);
    return failures != 0;
}
