// The kernels of kernels/*.cu run by the CPU emulation (shim.h) against references in
// double precision, and the properties speculative decoding relies on, bit for bit:
// - every skinny-matmul configuration gives the same bits for a row, whatever the number
//   of rows in the launch, ragged segments and a column tail included;
// - gate-up-SiLU;
// - attention (decode, long decode, prefill, chunk, tree mask; window from arguments or
//   from device memory), and a verify-tree query equals the same token decoded after its
//   ancestors were committed;
// - RoPE fused with the KV-cache write equals RoPE and two row copies.
//
// Build and run: scripts/kernel-emu.sh
#include "kernels.h"

#include <cstdio>
#include <random>

typedef __nv_bfloat16 bf;

static std::mt19937 rng(5);
static int failures = 0;

static float uniform(float s) { return std::uniform_real_distribution<float>(-s, s)(rng); }
static std::vector<bf> bf16s(size_t n, float s) {
    std::vector<bf> v(n);
    for (auto& x : v) x = __float2bfloat16_rn(uniform(s));
    return v;
}
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

typedef void (*PlainKernel)(const float*, int, int, const bf*, const bf*, float*, int, const bf*, const bf*, float*, int,
                            const bf*, const bf*, float*, int);
typedef void (*GateUpKernel)(const float*, int, int, const bf*, const bf*, float*, int);
struct Config {
    int max_rows;
    PlainKernel plain;
    GateUpKernel gate_up;
    const char* name;
};
static const Config CONFIGS[] = {
    {1, gemv_m1_r4_u4, gemv_gate_up_m1_r4_u4, "m1_r4_u4"}, {1, gemv_m1_r2_u8, gemv_gate_up_m1_r2_u8, "m1_r2_u8"},
    {2, gemv_m2_r4_u4, gemv_gate_up_m2_r4_u4, "m2_r4_u4"}, {2, gemv_m2_r2_u8, gemv_gate_up_m2_r2_u8, "m2_r2_u8"},
    {4, gemv_m4_r4_u2, gemv_gate_up_m4_r4_u2, "m4_r4_u2"}, {4, gemv_m4_r2_u4, gemv_gate_up_m4_r2_u4, "m4_r2_u4"},
    {8, gemv_m8_r4_u2, gemv_gate_up_m8_r4_u2, "m8_r4_u2"}, {8, gemv_m8_r2_u4, gemv_gate_up_m8_r2_u4, "m8_r2_u4"},
};

// x[m] . w[j] (+ b[j]) in double.
static double dot(const std::vector<float>& x, const std::vector<bf>& w, const bf* b, int k_in, int m, int j) {
    double s = 0;
    for (int k = 0; k < k_in; ++k) s += (double)x[m * k_in + k] * __bfloat162float(w[j * k_in + k]);
    return s + (b ? __bfloat162float(b[j]) : 0.0);
}

static void skinny_matmuls() {
    // 520 columns leave a partial 256-column step; 1024 fill every step. Two blocks of
    // eight warps take more tasks than there are warps, so the task loop turns.
    for (int k_in : {520, 1024}) {
        const int n[3] = {37, 13, 5};
        std::vector<bf> w[3] = {bf16s(n[0] * k_in, 0.1f), bf16s(n[1] * k_in, 0.1f), bf16s(n[2] * k_in, 0.1f)};
        const std::vector<bf> bias = bf16s(n[0], 0.1f), gate = bf16s(37 * k_in, 0.1f), up = bf16s(37 * k_in, 0.1f);
        const std::vector<float> x = floats(8 * k_in, 1.f);
        std::vector<float> row_bits;  // row 0 of the first matrix, from the first launch
        for (const Config& c : CONFIGS) {
            for (int rows = 1; rows <= c.max_rows; ++rows) {
                std::vector<float> y[3] = {std::vector<float>(rows * n[0], -1), std::vector<float>(rows * n[1], -1),
                                           std::vector<float>(rows * n[2], -1)};
                launch(c.plain, dim3{2, 1, 1}, dim3{256, 1, 1}, 0, (const float*)x.data(), rows, k_in,
                       (const bf*)w[0].data(), (const bf*)bias.data(), y[0].data(), n[0], (const bf*)w[1].data(),
                       (const bf*)nullptr, y[1].data(), n[1], (const bf*)w[2].data(), (const bf*)nullptr, y[2].data(), n[2]);
                double err = 0;
                for (int s = 0; s < 3; ++s)
                    for (int m = 0; m < rows; ++m)
                        for (int j = 0; j < n[s]; ++j)
                            err = max(err, fabs(y[s][m * n[s] + j] - dot(x, w[s], s == 0 ? bias.data() : nullptr, k_in, m, j)));
                char what[120];
                snprintf(what, sizeof what, "gemv %s k=%d rows=%d: max error %g", c.name, k_in, rows, err);
                expect(err < 1e-4, what);
                const std::vector<float> row0(y[0].begin(), y[0].begin() + n[0]);
                if (row_bits.empty()) row_bits = row0;
                snprintf(what, sizeof what, "gemv %s k=%d rows=%d: row 0 differs in its bits", c.name, k_in, rows);
                expect(row0 == row_bits, what);

                std::vector<float> act(rows * 37, -1);
                launch(c.gate_up, dim3{3, 1, 1}, dim3{256, 1, 1}, 0, (const float*)x.data(), rows, k_in,
                       (const bf*)gate.data(), (const bf*)up.data(), act.data(), 37);
                err = 0;
                for (int m = 0; m < rows; ++m)
                    for (int j = 0; j < 37; ++j) {
                        const double g = dot(x, gate, nullptr, k_in, m, j), u = dot(x, up, nullptr, k_in, m, j);
                        err = max(err, fabs(act[m * 37 + j] - g / (1 + exp(-g)) * u));
                    }
                snprintf(what, sizeof what, "gate_up %s k=%d rows=%d: max error %g", c.name, k_in, rows, err);
                expect(err < 1e-4, what);
            }
        }
    }
}

// A verify tree of 5 nodes: 0 root; 1, 2 children of 0; 3 child of 1; 4 child of 3.
static const int PARENTS[5] = {-1, 0, 0, 1, 3};
static std::vector<int> tree_mask() {
    std::vector<int> mask(25, 0);
    for (int i = 0; i < 5; ++i)
        for (int n = i; n >= 0; n = PARENTS[n]) mask[i * 5 + n] = 1;
    return mask;
}

static const int WARPS = 16;

static void run_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                          std::vector<float>& out, int heads, int kv_heads, int hd, int prefix, int region, int queries,
                          const int* window, const int* mask) {
    launch(attention_f32, dim3{(unsigned)queries, (unsigned)heads, 1}, dim3{WARPS * 32, 1, 1}, WARPS * (hd + 2) * 4,
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
    skinny_matmuls();
    attention();
    rope_with_kv_write();
    printf("kernel-emu: %s (%d failures)\n", failures ? "FAILED" : "all checks passed", failures);
    return failures != 0;
}
