// Skinny matmuls for decode and verify steps: y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n])
// for up to 8 rows of f32 x and bf16 W in the [out, in] layout. At these sizes the work is
// streaming W from memory once; the arithmetic goes to the tensor cores so that it costs
// nothing next to that:
//
// - One mma.m16n8k8 (tf32 in, f32 accumulate) multiplies 16 weight rows by the 8 rows of
//   x at once. bf16 widens to tf32 exactly; x rounds to tf32 (2^-11). With `x_parts` 2 it is
//   split into a tf32 part and the tf32 rounding of what is left, two mmas, so that a
//   product is x's to about 2^-22 (tf32's flipped near-tied MoE routes against the CPU's
//   f32). The second mma is not free: on an H200 the launches took 7-15 % longer with it
//   (run 29 against run 11), so only the MoE family asks for it.
// - Lanes load W in 16-byte pieces, 8 weights of one row: lane (g, t) = (lane / 4,
//   lane % 4) reads columns c + 8t .. c + 8t + 7 of rows g and g + 8 of a 16-row tile, for
//   32 columns per warp and step. The dot product does not care in which order k is
//   visited, so mma k-slot t / t + 4 of step j takes column c + 8t + 2j / c + 8t + 2j + 1,
//   and x is read in the same order. Each warp has U such steps of loads in flight.
// - K is cut into S slices of W columns (S a power of two, W a multiple of 8); warp w of a
//   block of P warps takes slices w, w + P, ... of the block's row tile, one after the
//   other, and the block then adds the S partial sums in a fixed pairwise tree
//   ((s0 + s1) + (s2 + s3)) + ... in shared memory.
//
// What that buys besides speed: an output (m, n) is the same bits whatever the row count M,
// the row tile, or the loads in flight (an mma column depends on its own x row only, and the
// k order is fixed by W), so a verify step's rows equal the decode steps they stand for.
// And a row-parallel shard of K over 2 ranks computes exactly the two halves of that tree,
// so the all-reduced sum equals the single-GPU result bit for bit when the host derives W
// from the unsharded K (backend/cuda/gemm.rs).
// More than 8 rows (`--enable-deterministic-inference`) run as groups of 8, the grid's x
// index, each computed as an 8-row launch computes it; the blocks of one weight tile come
// next to each other in the grid, so they run together and share the tile's loads in L2.
//
// The q/k/v launch of a decode or verify step can also finish the attention input (the
// rope entry points): RoPE on q and k, and k and v written into the KV cache, in place of a
// launch of their own. Its q and k tiles then hold RoPE pairs: tile-local rows r and r + 8
// are the dims (j, j + half) (NeoX) or (2j, 2j + 1) (interleaved) of one head, which puts
// both halves of a pair in the thread that finishes row r. Each sum is the same bits as in
// a plain launch; the rotation is `rotate_pair`, as in the rope kernels.
//
// Launched with programmatic dependent launch: the first weight loads are issued before
// waiting for the kernel that writes x, so the weight stream starts while that one drains.
// K % 8 == 0, W % 8 == 0 and 16-byte aligned W and x rows are required (the host checks).

#include <cuda_fp16.h>

// Warps per block; a launch of more K slices gives each warp several.
#define GEMV_MAX_WARPS 16
#define GEMV_MAX_SLICES 32

// What a launch does with its sums.
enum class Epilogue { Plain, GateUp, QkvRope };

// The rope epilogue's inputs: the tables and positions of the rope kernels, and where the
// step's k and v rows go (cache row slot + row; the slot read from `slot_dev` when that is
// not NULL, so that a replayed graph writes at the new position).
struct RopeArgs {
    const float* cos;
    const float* sin;
    const int* positions;
    int head_dim;
    int interleaved;
    bf16* k_cache;
    bf16* v_cache;
    int slot_arg;
    const int* slot_dev;
};

// What one launch computes, whatever its kind. Row tiles of RT = 16 * MT weight rows are
// numbered across up to three matrices side by side (plain: q, k and v share x), or cover
// RT / 2 gate rows and the same RT / 2 up rows (gate-up). With `accumulate[s]`, segment s
// adds its product into y (the residual add after o_proj and down_proj).
struct GemvArgs {
    const float* x;
    int m_rows;
    int k_in;
    int slice_cols;
    int slices;
    int x_parts;
    const bf16* w[3];
    const bf16* bias[3];
    float* y[3];
    int n[3];
    int accumulate[3];
    RopeArgs rope;
};

// The feature (weight row) that tile-local row r of 16-row tile `tile` of a q or k segment
// holds: rows r and r + 8 are the two dims of RoPE pair j of one head.
__device__ __forceinline__ int rope_feature(const RopeArgs& r, int tile, int row) {
    const int half = r.head_dim / 2, tiles_per_head = half / 8;
    const int j = 8 * (tile % tiles_per_head) + (row & 7);
    const int dim = row < 8 ? (r.interleaved ? 2 * j : j) : (r.interleaved ? 2 * j + 1 : j + half);
    return (tile / tiles_per_head) * r.head_dim + dim;
}

// Weight row of tile-local row `row` of the 16-row tile starting at `start` of segment `seg`.
template <Epilogue E>
__device__ __forceinline__ int feature_of(const GemvArgs& a, int seg, int start, int row) {
    if (E == Epilogue::QkvRope && seg < 2) return rope_feature(a.rope, start / 16, row);
    return start + row;
}

// Pointers to the weight rows this lane reads for 16-row tile i of the block: rows g and
// g + 8 of the tile (plain), or gate row g and up row g of the tile's 8 features (gate-up).
// Rows past the end repeat the last row; their sums are never written.
template <Epilogue E>
__device__ __forceinline__ void tile_rows(const GemvArgs& a, int seg, int first, int i, int g, const bf16* (&rows)[2]) {
    if (E == Epilogue::GateUp) {
        const long long row = (long long)min(first + 8 * i + g, a.n[0] - 1) * a.k_in;
        rows[0] = a.w[0] + row;
        rows[1] = a.w[1] + row;
    } else {
        const bf16* w = seg == 0 ? a.w[0] : (seg == 1 ? a.w[1] : a.w[2]);
        const int n = seg == 0 ? a.n[0] : (seg == 1 ? a.n[1] : a.n[2]);
        // A rope tile past the end is a head past the end, so it reads the last row too.
        rows[0] = w + (long long)min(feature_of<E>(a, seg, first + 16 * i, g), n - 1) * a.k_in;
        rows[1] = w + (long long)min(feature_of<E>(a, seg, first + 16 * i, g + 8), n - 1) * a.k_in;
    }
}

// Mma step j's A registers from one 16-byte load: weight 8t + 2j sits in the low half of
// word j, weight 8t + 2j + 1 in its high half; tf32 is the bf16 bits shifted up.
__device__ __forceinline__ unsigned word(const uint4& v, int j) {
    return j == 0 ? v.x : (j == 1 ? v.y : (j == 2 ? v.z : v.w));
}

template <int MT, int U>
__device__ __forceinline__ void load_round(const bf16* (&rows)[MT][2], int c, int end, int t, uint4 (&w)[U][MT][2]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int col = c + 32 * u + 8 * t;
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) w[u][i][h] = col < end ? ld_stream(rows[i][h] + col) : make_uint4(0u, 0u, 0u, 0u);
    }
}

template <int MT, int U>
__device__ __forceinline__ void mma_round(const GemvArgs& a, int c, int end, int g, int t, const uint4 (&w)[U][MT][2],
                                          float (&acc)[MT][4]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int c0 = c + 32 * u;
        if (c0 >= end) break;  // warp-uniform: the whole warp leaves together
        const int col = c0 + 8 * t;
        float xf[8];
        if (g < a.m_rows && col < end) {
            load8(a.x + (long long)g * a.k_in + col, xf);
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) xf[j] = 0.f;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            // x = hi + lo, each exact in tf32: two products make x's to about 2^-22; the
            // first alone is x rounded to tf32.
            const unsigned h0 = tf32_of(xf[2 * j]), h1 = tf32_of(xf[2 * j + 1]);
            const unsigned l0 = tf32_of(xf[2 * j] - __uint_as_float(h0)), l1 = tf32_of(xf[2 * j + 1] - __uint_as_float(h1));
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const unsigned r0 = word(w[u][i][0], j), r8 = word(w[u][i][1], j);
                if (a.x_parts > 1) mma_tf32(acc[i], r0 << 16, r8 << 16, r0 & 0xffff0000u, r8 & 0xffff0000u, l0, l1);
                mma_tf32(acc[i], r0 << 16, r8 << 16, r0 & 0xffff0000u, r8 & 0xffff0000u, h0, h1);
            }
        }
    }
}

template <int MT>
__device__ __forceinline__ int part_index(int s, int i, int row, int tok) {
    return ((s * MT + i) * 16 + row) * 8 + tok;
}

// The fixed pairwise tree over r[0 .. count): stride 1, 2, 4, ..., r[s] += r[s + stride].
template <int N>
__device__ __forceinline__ void pairwise(float (&r)[N], int count) {
#pragma unroll
    for (int stride = 1; stride < N; stride <<= 1)
#pragma unroll
        for (int s = 0; s + stride < N; s += 2 * stride)
            if (s + stride < count) r[s] += r[s + stride];
}

// The fixed pairwise tree ((v0 + v1) + (v2 + v3)) + ... over one value of each of the S
// slices (v[0], v[gap], ...), read into registers and added there (added in place in
// shared memory, the end of every block was a chain of S dependent round trips). Runs of 8
// are the tree's subtrees, so it is added 8 at a time, which keeps the registers in bounds.
__device__ __forceinline__ float tree_sum(const float* v, int gap, int slices) {
    float runs[GEMV_MAX_SLICES / 8];
#pragma unroll
    for (int b = 0; b < GEMV_MAX_SLICES / 8; ++b) {
        float r[8];
#pragma unroll
        for (int s = 0; s < 8; ++s) r[s] = 8 * b + s < slices ? v[(8 * b + s) * gap] : 0.f;
        pairwise(r, slices - 8 * b);
        runs[b] = r[0];
    }
    pairwise(runs, (slices + 7) / 8);
    return runs[0];
}

// The sum of one output over the slices.
template <int MT>
__device__ __forceinline__ float output_sum(const float* part, int slices, int i, int row, int tok) {
    return tree_sum(part + part_index<MT>(0, i, row, tok), part_index<MT>(1, 0, 0, 0), slices);
}

// One K slice with the weights loaded straight into registers, round after round.
template <int MT, int U>
__device__ __forceinline__ void slice_in_registers(const GemvArgs& a, const bf16* (&rows)[MT][2], int k0, int k1, int g,
                                                   int t, bool& waited, float (&acc)[MT][4]) {
    for (int c = k0; c < k1; c += 32 * U) {
        uint4 w[U][MT][2];
        load_round<MT, U>(rows, c, k1, t, w);
        if (!waited) {
            // x is the previous kernel's output: only now wait for it.
            pdl_wait();
            waited = true;
        }
        mma_round<MT, U>(a, c, k1, g, t, w, acc);
    }
}

// The rope launch's outputs: q rotated into y (segment 0); k rotated (segment 1) and v
// (segment 2) into the bf16 cache rows slot + row. Thread o < 8 of a tile's 16 rows
// finishes the RoPE pair (o, o + 8).
template <int MT>
__device__ __forceinline__ void rope_epilogue(const GemvArgs& a, const float* part, int seg, int first, const bf16* bias,
                                              float* y, int n_seg) {
    const RopeArgs& r = a.rope;
    const int slot = r.slot_dev ? r.slot_dev[0] : r.slot_arg;
    bf16* cache = seg == 1 ? r.k_cache : r.v_cache;
    const int half = r.head_dim / 2;
    for (int o = threadIdx.x; o < MT * 8 * 8; o += blockDim.x) {
        const int i = o / 64, row = (o / 8) % 8, tok = o % 8;
        const int start = first + 16 * i;
        if (tok >= a.m_rows || start >= n_seg) continue;
        float* q_out = y + (long long)tok * n_seg;
        bf16* kv_out = cache + (long long)(slot + tok) * n_seg;
        const int f0 = feature_of<Epilogue::QkvRope>(a, seg, start, row);
        const int f1 = feature_of<Epilogue::QkvRope>(a, seg, start, row + 8);
        const float x0 = output_sum<MT>(part, a.slices, i, row, tok) + (bias ? __bfloat162float(bias[f0]) : 0.f);
        const float x1 = output_sum<MT>(part, a.slices, i, row + 8, tok) + (bias ? __bfloat162float(bias[f1]) : 0.f);
        if (seg == 2) {
            put(kv_out + f0, x0);
            put(kv_out + f1, x1);
            continue;
        }
        const long long at = (long long)r.positions[tok] * half + 8 * ((start / 16) % (half / 8)) + row;
        float r0, r1;
        rotate_pair(x0, x1, r.cos[at], r.sin[at], r0, r1);
        if (seg == 0) {
            q_out[f0] = r0;
            q_out[f1] = r1;
        } else {
            put(kv_out + f0, r0);
            put(kv_out + f1, r1);
        }
    }
}

// The launch as group blockIdx.x of 8 rows sees it: x and the outputs from the group's first
// row. A rope launch is one group (the host's rule): its cache rows are not moved here.
__device__ __forceinline__ void to_row_group(GemvArgs& a) {
    const int row0 = 8 * blockIdx.x;
    a.x += (long long)row0 * a.k_in;
    a.m_rows = min(8, a.m_rows - row0);
#pragma unroll
    for (int s = 0; s < 3; ++s)
        if (a.y[s]) a.y[s] += (long long)row0 * a.n[s];
}

template <int MT, int U, Epilogue E>
__device__ void gemv_tile(GemvArgs a) {
    constexpr bool GATE_UP = E == Epilogue::GateUp;
    constexpr int RT = 16 * MT;
    // The partial sums, in dynamic shared memory sized by the launch's slices (a fixed size
    // for 32 would cost every launch the shared memory, and the L1, of the widest).
    extern __shared__ float part[];
    pdl_launch_dependents();

    to_row_group(a);

    // Which matrix and rows this block's tile covers.
    int seg = 0, first = blockIdx.y * (GATE_UP ? RT / 2 : RT);
    if (!GATE_UP) {
        const int tiles0 = (a.n[0] + RT - 1) / RT, tiles1 = (a.n[1] + RT - 1) / RT;
        int tile = blockIdx.y;
        if (tile >= tiles0) { tile -= tiles0; seg = 1; if (tile >= tiles1) { tile -= tiles1; seg = 2; } }
        first = tile * RT;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const bf16* rows[MT][2];
#pragma unroll
    for (int i = 0; i < MT; ++i) tile_rows<E>(a, seg, first, i, g, rows[i]);

    // Warp w takes slices w, w + warps, ...; each slice's sums go to shared memory.
    bool waited = false;
    for (int s = warp; s < a.slices; s += blockDim.x >> 5) {
        float acc[MT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
        const int k0 = s * a.slice_cols, k1 = min(k0 + a.slice_cols, a.k_in);
        slice_in_registers<MT, U>(a, rows, k0, k1, g, t, waited, acc);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            part[part_index<MT>(s, i, g, 2 * t)] = acc[i][0];
            part[part_index<MT>(s, i, g, 2 * t + 1)] = acc[i][1];
            part[part_index<MT>(s, i, g + 8, 2 * t)] = acc[i][2];
            part[part_index<MT>(s, i, g + 8, 2 * t + 1)] = acc[i][3];
        }
    }
    if (!waited) pdl_wait();
    __syncthreads();

    // Each thread owns whole outputs.
    if (GATE_UP) {
        for (int o = threadIdx.x; o < MT * 8 * 8; o += blockDim.x) {
            const int i = o / 64, row = (o / 8) % 8, tok = o % 8;
            const int n = first + 8 * i + row;
            if (tok >= a.m_rows || n >= a.n[0]) continue;
            const float gate = output_sum<MT>(part, a.slices, i, row, tok);
            const float up = output_sum<MT>(part, a.slices, i, row + 8, tok);
            a.y[0][(long long)tok * a.n[0] + n] = gate / (1.f + __expf(-gate)) * up;
        }
    } else {
        const bf16* bias = seg == 0 ? a.bias[0] : (seg == 1 ? a.bias[1] : a.bias[2]);
        float* y = seg == 0 ? a.y[0] : (seg == 1 ? a.y[1] : a.y[2]);
        const int n_seg = seg == 0 ? a.n[0] : (seg == 1 ? a.n[1] : a.n[2]);
        const bool accumulate = (seg == 0 ? a.accumulate[0] : (seg == 1 ? a.accumulate[1] : a.accumulate[2])) != 0;
        if (E == Epilogue::QkvRope) {
            rope_epilogue<MT>(a, part, seg, first, bias, y, n_seg);
            return;
        }
        for (int o = threadIdx.x; o < RT * 8; o += blockDim.x) {
            const int i = o / 128, row = (o / 8) % 16, tok = o % 8;
            const int n = first + 16 * i + row;
            if (tok >= a.m_rows || n >= n_seg) continue;
            const float sum = output_sum<MT>(part, a.slices, i, row, tok);
            float* out = y + (long long)tok * n_seg + n;
            const float value = sum + (bias ? __bfloat162float(bias[n]) : 0.f);
            *out = accumulate ? *out + value : value;
        }
    }
}

// The entry points, one per (16-row tiles per block, 32-column steps per round):
// gemv_t{MT}_u{U}, gemv_gate_up_t{MT}_u{U} and gemv_rope_t{MT}_u{U}. Every configuration
// computes the same bits; the host times them per shape and keeps the fastest
// (backend/cuda/gemm.rs lists the set).
// Each asks for registers that let two blocks share an SM: with one, an SM has half the
// loads in flight, and the next launch cannot start there until it is done.
#define GEMV_PLAIN(NAME, MT, U)                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMV_MAX_WARPS * 32, 2) NAME(                                 \
        const float* x, int m_rows, int k_in, int slice_cols, int slices, int x_parts, const bf16* w0,         \
        const bf16* b0, float* y0, int n0, int acc0, const bf16* w1, const bf16* b1, float* y1, int n1,        \
        int acc1, const bf16* w2, const bf16* b2, float* y2, int n2, int acc2) {                               \
        gemv_tile<MT, U, Epilogue::Plain>({x, m_rows, k_in, slice_cols, slices, x_parts, {w0, w1, w2},         \
                                           {b0, b1, b2}, {y0, y1, y2}, {n0, n1, n2}, {acc0, acc1, acc2}, {}}); \
    }
#define GEMV_GATE_UP(NAME, MT, U)                                                                              \
    extern "C" __global__ void __launch_bounds__(GEMV_MAX_WARPS * 32, 2) NAME(                                 \
        const float* x, int m_rows, int k_in, int slice_cols, int slices, int x_parts, const bf16* gate,       \
        const bf16* up, float* act, int n_out) {                                                               \
        gemv_tile<MT, U, Epilogue::GateUp>({x, m_rows, k_in, slice_cols, slices, x_parts, {gate, up, nullptr}, \
                                            {nullptr, nullptr, nullptr}, {act, nullptr, nullptr},              \
                                            {n_out, n_out, 0}, {0, 0, 0}, {}});                                \
    }
// q (rotated) into q_out; k (rotated) and v into cache rows slot + row.
#define GEMV_ROPE(NAME, MT, U)                                                                                 \
    extern "C" __global__ void __launch_bounds__(GEMV_MAX_WARPS * 32, 2) NAME(                                 \
        const float* x, int m_rows, int k_in, int slice_cols, int slices, int x_parts, const bf16* wq,         \
        const bf16* bq, float* q_out, int nq, const bf16* wk, const bf16* bk, int nk, const bf16* wv,          \
        const bf16* bv, const float* cos_table, const float* sin_table, const int* positions, int head_dim,    \
        int interleaved, bf16* k_cache, bf16* v_cache, int slot_arg, const int* slot_dev) {                    \
        gemv_tile<MT, U, Epilogue::QkvRope>({x, m_rows, k_in, slice_cols, slices, x_parts, {wq, wk, wv},       \
                                             {bq, bk, bv}, {q_out, nullptr, nullptr}, {nq, nk, nk}, {0, 0, 0}, \
                                             {cos_table, sin_table, positions, head_dim, interleaved, k_cache, \
                                              v_cache, slot_arg, slot_dev}});                                  \
    }
#define GEMV_ENTRY(MT, U)                           \
    GEMV_PLAIN(gemv_t##MT##_u##U, MT, U)            \
    GEMV_GATE_UP(gemv_gate_up_t##MT##_u##U, MT, U)  \
    GEMV_ROPE(gemv_rope_t##MT##_u##U, MT, U)

GEMV_ENTRY(1, 2)
GEMV_ENTRY(1, 3)
GEMV_ENTRY(1, 4)
GEMV_ENTRY(2, 2)

// FP8 weights as the checkpoint stores them (DeepSeek-V3's and Kimi-K2's dense linears,
// src/backend/cuda/stored.rs, and their routed experts, src/backend/cuda/latent_ops.rs):
// e4m3 bytes, one f32 scale per block of `block_rows` rows and `block_cols` columns (the
// device forward spreads a dense grid to one row a weight row, src/engine/deepseek/rows.rs),
// block_cols a multiple of 64. The same scheme as above, on f16 mmas (m16n8k16): e4m3 widens
// to f16 exactly, a pair a conversion, where the CUDA-core kernel of kernels/latent.cu reads
// each x value once per weight row (testdata/gpu/run-34: its x loads held the L1 at 95 %).
// Weight rows in pairs of 16-row tiles (FP8_TILES) and 64-column steps: lane (g, t) loads 16
// bytes, columns c + 16t .. c + 16t + 15, of rows g and g + 8 of each tile, and mma step j
// takes columns c + 16t + 4j, +1 (k-slots 2t, 2t + 1) and c + 16t + 4j + 2, +3 (k-slots
// 2t + 8, 2t + 9). x takes split_x's f16 parts, scaled by a power of two per row and step.
// A step's products are summed unscaled, then added into the row's sum times the row's scale
// for those columns and the step's 2^-s. K is cut into `slices` runs of whole steps added in
// the pairwise tree, so an output is the same bits whatever the row count. Up to G groups of
// 8 x rows share a block's weight loads and conversions.
#define FP8_TILES 2
#define FP8_STEP_COLS 64
// Outputs of one group and slice: FP8_TILES tiles of 16 weight rows by 8 x rows.
#define FP8_OUTS (FP8_TILES * 16 * 8)

// Two e4m3 weights (the low byte in the low half) as an f16 pair, exactly: f16 holds every
// e4m3 value, subnormals included.
__device__ __forceinline__ unsigned f16x2_of_e4m3x2(unsigned pair) {
    unsigned h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"((unsigned short)pair));
    return h;
}

// acc (16 x 8) += A (16 x 16: rows g, g + 8; k-slots 2t, 2t + 1, 2t + 8, 2t + 9) . B (16 x 8:
// those k-slots; column g) in f16 with f32 sums; acc as mma_tf32 holds it.
__device__ __forceinline__ void mma_f16(float (&acc)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                        unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A step's 16 x values of this lane (row g of the group from `x`, NULL past the end; columns
// col .. col + 15) as f16 pairs in one or two parts (hi, and lo = the rest), scaled by the
// power of two 2^s that puts the largest of the row's 64 step values (its four lanes') in
// [2^14, 2^15): f16's 11 bits a part, without its narrow range losing large or small rows.
// down[0] and down[1]: 2^-s of x rows 2t and 2t + 1, the columns of this lane's sums.
__device__ __forceinline__ void split_x(const float* x, int col, int parts, unsigned (&hi)[8], unsigned (&lo)[8],
                                        float (&down)[2]) {
    const int t = threadIdx.x & 3;
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; i += 4) {
        const float4 f = x ? *reinterpret_cast<const float4*>(x + col + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        v[i] = f.x, v[i + 1] = f.y, v[i + 2] = f.z, v[i + 3] = f.w;
    }
    float m = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) m = fmaxf(m, fabsf(v[i]));
    m = fmaxf(m, __shfl_xor_sync(FULL_WARP, m, 1));
    m = fmaxf(m, __shfl_xor_sync(FULL_WARP, m, 2));
    // m's biased exponent e: m * 2^(141 - e) is in [2^14, 2^15); a zero, subnormal or tiny m
    // takes 2^126, which leaves its row far below f16's largest.
    const int s = min(141 - ((__float_as_int(m) >> 23) & 0xff), 126);
    const float up = __int_as_float((s + 127) << 23), dn = __int_as_float((127 - s) << 23);
#pragma unroll
    for (int p = 0; p < 8; ++p) {
        const float a = v[2 * p] * up, b = v[2 * p + 1] * up;
        const __half2 h = __floats2half2_rn(a, b);
        hi[p] = *reinterpret_cast<const unsigned*>(&h);
        if (parts > 1) {
            const float2 back = __half22float2(h);
            const __half2 l = __floats2half2_rn(a - back.x, b - back.y);
            lo[p] = *reinterpret_cast<const unsigned*>(&l);
        }
    }
    down[0] = __shfl_sync(FULL_WARP, dn, 8 * t);
    down[1] = __shfl_sync(FULL_WARP, dn, 8 * t + 4);
}

// What a launch multiplies, as one lane sees it: the weights and their scales, the lane's
// weight rows (rows[i][h]: row g + 8h of tile i) and x rows (x_rows[q]: row g of group q, or
// NULL past the end), and how K is cut.
template <int G>
struct Fp8Lane {
    const unsigned char* w;
    const float* scales;
    int k_in, slice_cols, slices, x_parts, block_cols;
    int rows[FP8_TILES][2];
    int row_scales[FP8_TILES][2];
    const float* x_rows[G];

    __device__ __forceinline__ void set_row(int i, int h, int row, int block_rows) {
        rows[i][h] = row;
        row_scales[i][h] = row / block_rows * (k_in / block_cols);
    }

    // One step's loads: 16 bytes of each of the lane's weight rows from column c + 16t, and
    // those rows' scales for column c.
    __device__ __forceinline__ void step_loads(int c, int t, uint4 (&raw)[FP8_TILES][2], float (&scale)[FP8_TILES][2]) const {
#pragma unroll
        for (int i = 0; i < FP8_TILES; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                raw[i][h] = ld_stream(w + (long long)rows[i][h] * k_in + c + 16 * t);
                scale[i][h] = scales[row_scales[i][h] + c / block_cols];
            }
    }
};

// Every slice's sums into `part` (slice s, group q: FP8_OUTS values from (s * G + q) *
// FP8_OUTS, tile-major, then weight row, then x row), then a barrier. `waited`: whether the
// kernel has already waited for the one that writes x.
template <int G>
__device__ void fp8_partial_sums(const Fp8Lane<G>& a, bool waited, float* part) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int per_slice = a.slice_cols / FP8_STEP_COLS;
    float acc[G][FP8_TILES][4];
#pragma unroll
    for (int q = 0; q < G; ++q)
#pragma unroll
        for (int i = 0; i < FP8_TILES; ++i) acc[q][i][0] = acc[q][i][1] = acc[q][i][2] = acc[q][i][3] = 0.f;
    // The warp's slices (warp, warp + warps, ...) are one run of steps, each step's weight
    // loads a step ahead, across the slices' ends too: a warp has two steps' bytes on the way
    // while it multiplies, and its loads do not drain at each slice (a down projection's
    // slices are two steps long).
    int s = warp, k = 0;  // the step being multiplied: step k of slice s
    int load_s = s, load_k = 0;  // the step being loaded: step load_k of slice load_s
    uint4 next[FP8_TILES][2];
    float next_scale[FP8_TILES][2];
    if (s < a.slices) a.step_loads(s * a.slice_cols, t, next, next_scale);
    while (s < a.slices) {
        const int col = s * a.slice_cols + k * FP8_STEP_COLS + 16 * t;
        uint4 raw[FP8_TILES][2];
        float scale[FP8_TILES][2];
#pragma unroll
        for (int i = 0; i < FP8_TILES; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                raw[i][h] = next[i][h];
                scale[i][h] = next_scale[i][h];
            }
        if (++load_k == per_slice) {
            load_k = 0;
            load_s += warps;
        }
        if (load_s < a.slices) a.step_loads(load_s * a.slice_cols + load_k * FP8_STEP_COLS, t, next, next_scale);
        if (!waited) {
            // x is the previous kernel's output: only now wait for it.
            pdl_wait();
            waited = true;
        }
        float step[G][FP8_TILES][4];
#pragma unroll
        for (int q = 0; q < G; ++q)
#pragma unroll
            for (int i = 0; i < FP8_TILES; ++i) step[q][i][0] = step[q][i][1] = step[q][i][2] = step[q][i][3] = 0.f;
        unsigned x_hi[G][8], x_lo[G][8];
        float down[G][2];
#pragma unroll
        for (int q = 0; q < G; ++q) split_x(a.x_rows[q], col, a.x_parts, x_hi[q], x_lo[q], down[q]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            unsigned w_f16[FP8_TILES][4];
#pragma unroll
            for (int i = 0; i < FP8_TILES; ++i) {
                const unsigned r0 = word(raw[i][0], j), r8 = word(raw[i][1], j);
                w_f16[i][0] = f16x2_of_e4m3x2(r0 & 0xffffu);
                w_f16[i][1] = f16x2_of_e4m3x2(r8 & 0xffffu);
                w_f16[i][2] = f16x2_of_e4m3x2(r0 >> 16);
                w_f16[i][3] = f16x2_of_e4m3x2(r8 >> 16);
            }
#pragma unroll
            for (int q = 0; q < G; ++q)
#pragma unroll
                for (int i = 0; i < FP8_TILES; ++i) {
                    const unsigned(&wi)[4] = w_f16[i];
                    if (a.x_parts > 1) mma_f16(step[q][i], wi[0], wi[1], wi[2], wi[3], x_lo[q][2 * j], x_lo[q][2 * j + 1]);
                    mma_f16(step[q][i], wi[0], wi[1], wi[2], wi[3], x_hi[q][2 * j], x_hi[q][2 * j + 1]);
                }
        }
#pragma unroll
        for (int q = 0; q < G; ++q)
#pragma unroll
            for (int i = 0; i < FP8_TILES; ++i) {
                acc[q][i][0] += scale[i][0] * down[q][0] * step[q][i][0];
                acc[q][i][1] += scale[i][0] * down[q][1] * step[q][i][1];
                acc[q][i][2] += scale[i][1] * down[q][0] * step[q][i][2];
                acc[q][i][3] += scale[i][1] * down[q][1] * step[q][i][3];
            }
        if (++k < per_slice) continue;
#pragma unroll
        for (int q = 0; q < G; ++q)
#pragma unroll
            for (int i = 0; i < FP8_TILES; ++i) {
                float* p = part + (s * G + q) * FP8_OUTS + i * 128;
                p[g * 8 + 2 * t] = acc[q][i][0];
                p[g * 8 + 2 * t + 1] = acc[q][i][1];
                p[(g + 8) * 8 + 2 * t] = acc[q][i][2];
                p[(g + 8) * 8 + 2 * t + 1] = acc[q][i][3];
                acc[q][i][0] = acc[q][i][1] = acc[q][i][2] = acc[q][i][3] = 0.f;
            }
        k = 0;
        s += warps;
    }
    if (!waited) pdl_wait();
    __syncthreads();
}

// The sum over the slices of output (group q, tile i, weight row `row`, x row `tok`).
template <int G>
__device__ __forceinline__ float fp8_sum(const float* part, int slices, int q, int i, int row, int tok) {
    return tree_sum(part + q * FP8_OUTS + i * 128 + row * 8 + tok, G * FP8_OUTS, slices);
}

// A dense linear: y[m, n] = w_n · x[m] (+= with `accumulate`), grid (bundles of G groups of
// x rows, `heads` × tiles of 16 * FP8_TILES weight rows). With heads > 1, per head h: x rows
// hold `heads` runs of k_in, y rows `heads` runs of n_out, and head h's weight rows are rows
// h * n_out .. (h + 1) * n_out (head_matmul's per-head products, kv_b_proj absorbed).
template <int G>
__device__ void gemv_fp8_dense(const float* x, int m_rows, int k_in, int slice_cols, int slices, int x_parts,
                               const unsigned char* w, const float* scales, int block_rows, int block_cols, float* y, int n_out,
                               int heads, int accumulate) {
    extern __shared__ float part[];
    pdl_launch_dependents();
    const int lane = threadIdx.x & 31, g = lane >> 2;
    const int tiles = (n_out + 16 * FP8_TILES - 1) / (16 * FP8_TILES);
    const int head = blockIdx.y / tiles, first = blockIdx.y % tiles * 16 * FP8_TILES, row0 = 8 * G * blockIdx.x;
    Fp8Lane<G> a{w, scales, k_in, slice_cols, slices, x_parts, block_cols};
    // Rows past the end repeat the last; their sums are never written.
#pragma unroll
    for (int i = 0; i < FP8_TILES; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) a.set_row(i, h, head * n_out + min(first + 16 * i + 8 * h + g, n_out - 1), block_rows);
#pragma unroll
    for (int q = 0; q < G; ++q) {
        const int m = row0 + 8 * q + g;
        a.x_rows[q] = m < m_rows ? x + ((long long)m * heads + head) * k_in : nullptr;
    }
    fp8_partial_sums<G>(a, false, part);
    for (int o = threadIdx.x; o < G * FP8_OUTS; o += blockDim.x) {
        const int q = o / FP8_OUTS, i = (o / 128) % FP8_TILES, row = (o / 8) % 16, tok = o % 8;
        const int m = row0 + 8 * q + tok, n = first + 16 * i + row;
        if (m >= m_rows || n >= n_out) continue;
        const float sum = fp8_sum<G>(part, slices, q, i, row, tok);
        float* out = y + ((long long)m * heads + head) * n_out + n;
        *out = accumulate ? *out + sum : sum;
    }
}

// One active expert's rows (latent.cu's moe_plan_i32 lists them), its pairs 8 at a time.
// Gate-up: tile i holds gate rows (h = 0) and up rows (h = 1) of the same 8 features, so
// act[pair, f] = silu(gate_f · x) * (up_f · x) comes from one block; grid (expert slots,
// ceil(inner / (8 * FP8_TILES))). Down: y[pair, o] = down_o · act[pair]; grid (expert slots,
// ceil(hidden / (16 * FP8_TILES))).
template <bool GATE_UP>
__device__ void moe_fp8_rows(const float* x, const unsigned char* w, const float* scales, int block_rows, int block_cols,
                             int slice_cols, int slices, int x_parts, const int* plan, int per_token, int k_in, int n_out,
                             int list, float* y) {
    extern __shared__ float part[];
    pdl_enter();
    if (blockIdx.x >= plan[0]) return;
    const int lane = threadIdx.x & 31, g = lane >> 2;
    const int e = plan[1 + 3 * blockIdx.x], start = plan[2 + 3 * blockIdx.x], run = plan[3 + 3 * blockIdx.x];
    const int* pairs = plan + list + start;
    const int first = blockIdx.y * (GATE_UP ? 8 : 16) * FP8_TILES;
    Fp8Lane<1> a{w, scales, k_in, slice_cols, slices, x_parts, block_cols};
#pragma unroll
    for (int i = 0; i < FP8_TILES; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = GATE_UP ? e * 2 * n_out + h * n_out + min(first + 8 * i + g, n_out - 1)
                                    : e * n_out + min(first + 16 * i + 8 * h + g, n_out - 1);
            a.set_row(i, h, row, block_rows);
        }
    for (int p0 = 0; p0 < run; p0 += 8) {
        const int np = min(8, run - p0);
        a.x_rows[0] = g < np ? x + (long long)(GATE_UP ? pairs[p0 + g] / per_token : pairs[p0 + g]) * k_in : nullptr;
        fp8_partial_sums<1>(a, true, part);
        for (int o = threadIdx.x; o < FP8_OUTS; o += blockDim.x) {
            const int i = o / 128, row = (o / 8) % 16, tok = o % 8;
            if (tok >= np) continue;
            const int pair = pairs[p0 + tok];
            if (GATE_UP) {
                const int f = first + 8 * i + row;
                if (row >= 8 || f >= n_out) continue;
                const float gate = fp8_sum<1>(part, slices, 0, i, row, tok), up = fp8_sum<1>(part, slices, 0, i, row + 8, tok);
                y[(long long)pair * n_out + f] = gate / (1.f + __expf(-gate)) * up;
            } else {
                const int n = first + 16 * i + row;
                if (n < n_out) y[(long long)pair * n_out + n] = fp8_sum<1>(part, slices, 0, i, row, tok);
            }
        }
        // The next pairs' sums reuse `part`.
        __syncthreads();
    }
}

// gemv_fp8_g{G}: a dense linear, G groups of 8 x rows a block. moe_gate_up_fp8_mma and
// moe_down_fp8_mma: an expert's rows. Blocks of up to GEMV_FP8_WARPS warps, two to an SM.
#define GEMV_FP8_WARPS 8
#define GEMV_FP8(NAME, G)                                                                                      \
    extern "C" __global__ void __launch_bounds__(GEMV_FP8_WARPS * 32, 2) NAME(                                 \
        const float* x, int m_rows, int k_in, int slice_cols, int slices, int x_parts, const unsigned char* w, \
        const float* scales, int block_rows, int block_cols, float* y, int n_out, int heads, int accumulate) { \
        gemv_fp8_dense<G>(x, m_rows, k_in, slice_cols, slices, x_parts, w, scales, block_rows, block_cols, y,  \
                          n_out, heads, accumulate);                                                           \
    }
GEMV_FP8(gemv_fp8_g1, 1)
GEMV_FP8(gemv_fp8_g2, 2)

// Gate-up reads x rows of tokens (pair / per_token) and k_in = hidden, n_out = inner; down
// reads act rows of pairs and k_in = inner, n_out = hidden.
#define MOE_FP8(NAME, GATE_UP)                                                                                  \
    extern "C" __global__ void __launch_bounds__(GEMV_FP8_WARPS * 32, 2) NAME(                                  \
        const float* x, const unsigned char* w, const float* scales, int block_rows, int block_cols,            \
        int slice_cols, int slices, int x_parts, const int* plan, int per_token, int k_in, int n_out, int list, \
        float* y) {                                                                                             \
        moe_fp8_rows<GATE_UP>(x, w, scales, block_rows, block_cols, slice_cols, slices, x_parts, plan,          \
                              per_token, k_in, n_out, list, y);                                                 \
    }
MOE_FP8(moe_gate_up_fp8_mma, true)
MOE_FP8(moe_down_fp8_mma, false)
