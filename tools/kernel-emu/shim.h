// A CPU emulation of the CUDA features kernels/*.cu use, to check their index arithmetic
// and results on a machine without a GPU (tools/kernel-emu/kernels_test.cpp). It is not a
// GPU model: blocks run one after another, each thread of a block is an OS thread,
// `__syncthreads` is a block barrier and a warp shuffle is a write, a warp barrier, a read
// and a barrier. It therefore needs warp-uniform control flow around shuffles, as the
// hardware does for a full mask. Static `__shared__` variables are plain statics (one
// block runs at a time); dynamic shared memory is `g_smem`.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

using std::max;
using std::min;

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static

struct uint4 {
    unsigned x, y, z, w;
};
struct float4 {
    float x, y, z, w;
};
struct float2 {
    float x, y;
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

struct __nv_bfloat16 {
    uint16_t bits;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
inline float __bfloat162float(__nv_bfloat16 b) {
    const uint32_t u = (uint32_t)b.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// Round to nearest even (finite inputs).
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return {(uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
inline float __expf(float x) { return expf(x); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
template <class T>
T __ldg(const T* p) {
    return *p;
}
inline int atomicExch(int* p, int v) {
    const int old = *p;
    *p = v;
    return old;
}

// The barriers and shuffle slots of the block being run.
struct BlockSync {
    std::unique_ptr<std::barrier<>> block;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    std::vector<std::vector<uint64_t>> slots;
};
inline BlockSync* g_sync;
inline float* g_smem;

inline void __syncthreads() { g_sync->block->arrive_and_wait(); }

// Every lane of the warp posts v; each reads the value of lane `source(its lane)`.
template <class T, class Source>
inline T exchange(T v, Source source) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    g_sync->slots[w][lane] = bits;
    g_sync->warps[w]->arrive_and_wait();
    const uint64_t other = g_sync->slots[w][source(lane) & 31];
    g_sync->warps[w]->arrive_and_wait();
    T r;
    memcpy(&r, &other, sizeof(T));
    return r;
}

template <class T>
inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    return exchange(v, [=](int lane) { return lane ^ lane_mask; });
}

template <class T>
inline T __shfl_sync(unsigned, T v, int src_lane) {
    return exchange(v, [=](int) { return src_lane; });
}

// Run kernel `k` over `grid` blocks of `block.x` threads with `smem` bytes of dynamic
// shared memory (block.x a multiple of 32).
template <class... A>
void launch(void (*k)(A...), dim3 grid, dim3 block, size_t smem, A... args) {
    gridDim = grid;
    blockDim = block;
    std::vector<float> dynamic(smem / 4 + 1);
    g_smem = dynamic.data();
    for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
            BlockSync sync;
            sync.block = std::make_unique<std::barrier<>>(block.x);
            const int warps = (block.x + 31) / 32;
            for (int w = 0; w < warps; ++w) sync.warps.push_back(std::make_unique<std::barrier<>>(32));
            sync.slots.assign(warps, std::vector<uint64_t>(32));
            g_sync = &sync;
            std::vector<std::thread> threads;
            for (unsigned t = 0; t < block.x; ++t)
                threads.emplace_back([=] {
                    threadIdx = {t, 0, 0};
                    blockIdx = {bx, by, 0};
                    k(args...);
                });
            for (auto& t : threads) t.join();
        }
}
