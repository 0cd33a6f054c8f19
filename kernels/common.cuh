// Shared helpers for every kernel file. The host prepends this text to each kernels/*.cu
// before NVRTC sees it (NVRTC has no file system of ours on the GPU machine), so keep it
// small and free of kernels.
#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

// NVRTC has no <math.h>.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// Programmatic dependent launch (the host launches every kernel with it allowed): a kernel
// lets the next one be scheduled at once, and waits for the previous one's writes before
// touching anything it wrote. A kernel must call pdl_wait() before its first read of an
// activation and before its first write; reading weights earlier is what the scheme is for.
__device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// The start of every kernel that reads no weights ahead.
__device__ __forceinline__ void pdl_enter() {
    pdl_launch_dependents();
    pdl_wait();
}

// Every lane of a warp, for the *_sync intrinsics.
#define FULL_WARP 0xffffffffu

struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Reduce over the whole block; every thread gets the result. `scratch` holds 32 floats.
template <typename Op>
__device__ __forceinline__ float block_reduce(float v, float* scratch, Op op, float identity) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    v = warp_reduce(v, op);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_reduce(lane < warps ? scratch[lane] : identity, op);
}

__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, SumOp()); }
__device__ __forceinline__ float block_sum(float v, float* scratch) { return block_reduce(v, scratch, SumOp(), 0.f); }
__device__ __forceinline__ float block_max(float v, float* scratch) {
    return block_reduce(v, scratch, MaxOp(), -INFINITY);
}

// (value, index) pairs ordered by value descending, then index ascending: the first
// maximum wins, as in the CPU reference's argmax.
__device__ __forceinline__ bool ranks_before(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (ranks_before(ov, oi, v, i)) { v = ov; i = oi; }
    }
}

// Best (value, index) over the block; every thread gets it. Scratch: 32 floats + 32 ints.
__device__ __forceinline__ void block_best(float& v, int& i, float* sv, int* si) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    warp_best(v, i);
    __syncthreads();
    if (lane == 0) { sv[warp] = v; si[warp] = i; }
    __syncthreads();
    v = lane < warps ? sv[lane] : -INFINITY;
    i = lane < warps ? si[lane] : 0x7fffffff;
    warp_best(v, i);
}

// Streamed weight loads (16 and 8 bytes): the non-coherent path with no L1 allocation, so
// that x, which every warp of a matmul re-reads, keeps L1 while the weights pass through.
__device__ __forceinline__ uint4 ld_stream(const void* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}
__device__ __forceinline__ uint2 ld_stream8(const void* p) {
    uint2 r;
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}

// Eight consecutive elements as floats, through one 16-byte access when the address allows.
__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

__device__ __forceinline__ void unpack8(const uint4& u, float (&v)[8]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        float2 f = __bfloat1622float2(h[j]);
        v[2 * j] = f.x;
        v[2 * j + 1] = f.y;
    }
}

__device__ __forceinline__ void load8(const bf16* p, float (&v)[8]) {
    unpack8(*reinterpret_cast<const uint4*>(p), v);
}

__device__ __forceinline__ void store8(bf16* p, const float (&v)[8]) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    *reinterpret_cast<uint4*>(p) = u;
}

__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
    float4 a = reinterpret_cast<const float4*>(p)[0];
    float4 b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ void put(bf16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void put(float* p, float x) { *p = x; }

// One RoPE pair (x0, x1) rotated by (c, s). Each product is rounded before the add (no
// contraction into an fma, whose choice the compiler makes per call site), so the rope
// kernels and the matmul epilogue that fuses RoPE (gemv.cu) give the same bits, and so does
// the CPU reference.
__device__ __forceinline__ void rotate_pair(float x0, float x1, float c, float s, float& r0, float& r1) {
    r0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    r1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

// A paged KV cache maps a token position to a slot through the sequence's block table.
__device__ __forceinline__ long long slot_of(const int* block_table, int block_size, int pos) {
    return (long long)block_table[pos / block_size] * block_size + pos % block_size;
}

// f(slot, n) for the ranks r = first, first + stride, ... below end, in that order (a warp's
// share of a paged query's keys), N ranks at a time, all lanes together: slot[i] for the
// n <= N ranks left (the rest repeat the last). The slots are read 32 ranks at a time, one a
// lane, and handed on by shuffles: one round of table loads per 32 keys, where a load per key
// left each key waiting on its slot before its own loads could go out.
template <int N, typename F>
__device__ __forceinline__ void for_each_slot(const int* slots, int first, int stride, int end, F&& f) {
    const int lane = threadIdx.x & 31;
    for (int base = first; base < end; base += 32 * stride) {
        const int r = base + lane * stride;
        const int mine = r < end ? slots[r] : 0;
        const int count = min(32, (end - base + stride - 1) / stride);
        for (int i = 0; i < count; i += N) {
            int slot[N];
#pragma unroll
            for (int g = 0; g < N; ++g) slot[g] = __shfl_sync(FULL_WARP, mine, min(i + g, count - 1));
            f(slot, min(N, count - i));
        }
    }
}

// Counter-based uniform in [0, 1): the same (seed, counter, lane) always gives the same
// number, so sampling inside a replayed CUDA graph needs no host random state.
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ float uniform01(unsigned long long seed, unsigned long long counter, unsigned int lane) {
    unsigned long long z = mix64(seed ^ mix64(counter * 0x100000001b3ull + lane));
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

// f32 rounded to tf32 (to nearest), as the tensor cores take it.
__device__ __forceinline__ unsigned tf32_of(float v) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}

// acc (16 x 8) += A (16 x 8: rows g, g + 8; k-slots t, t + 4) . B (8 x 8: k-slots t, t + 4; column g),
// with g = lane / 4 and t = lane % 4; acc holds (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
__device__ __forceinline__ void mma_tf32(float (&acc)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Shared-memory address of a generic pointer, as cp.async and ldmatrix take it.
__device__ __forceinline__ unsigned shared_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared without passing through registers (through L2 only), or 16 zero
// bytes when !valid; asynchronous until cp_async_wait.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(dst)), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Until at most PENDING of this thread's committed groups are still in flight.
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

// Four 8 x 8 matrices of 16-bit values from shared memory: lane l gives the address of row
// l % 8 of matrix l / 8, and r[m] holds row g, columns 2t and 2t + 1 of matrix m (the lower
// column in the low half), with g = lane / 4 and t = lane % 4. TRANS: column g, rows 2t and 2t + 1.
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(shared_address(row)));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(shared_address(row)));
}

// The two bf16 values of a packed pair as tf32 operands (a bf16 is exact in tf32).
__device__ __forceinline__ unsigned tf32_low(unsigned pair) { return pair << 16; }
__device__ __forceinline__ unsigned tf32_high(unsigned pair) { return pair & 0xffff0000u; }
