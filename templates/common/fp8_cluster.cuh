#pragma once
// The quantization rule of common/fp8.cuh (amax, slice_scales, quantize_one: the same functions)
// in one pass per (batch, head) slice, on a thread-block cluster (sm_90): the cluster's CTAs split
// the slice, each loads its part once (16-byte vectors) into shared memory while taking its max
// |x|, the CTAs' maxima meet through distributed shared memory (max is exact in any order: the
// scale is the one-pass rule's, bit for bit), and each CTA writes the codes of its part from
// shared memory. A part longer than `hold` elements keeps its first `hold` on chip and reads the
// rest again (correct for any slice; one pass over the input where the slice fits the cluster).
// A cluster of 16 CTAs is non-portable: the loader allows it (cuFuncSetAttribute
// NON_PORTABLE_CLUSTER_SIZE_ALLOWED) for a function whose compiled cluster is larger than 8.
// Needs fp8.cuh and cluster.cuh first, and a slice length that is a multiple of 8 (16-byte vectors; HEAD_DIM 64
// or 128 times seq) with 16-byte aligned tensors.

namespace evo {

// The float at `p` (a __shared__ variable) in the shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ float ld_cluster_shared(const float* p, unsigned rank) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(cluster_map(p, rank)) : "memory");
    return v;
}

__device__ __forceinline__ __half quant_from_bits(unsigned short b, const __half*) { return __ushort_as_half(b); }
__device__ __forceinline__ __nv_bfloat16 quant_from_bits(unsigned short b, const __nv_bfloat16*) {
    return __ushort_as_bfloat16(b);
}

// Element k (0..7) of eight 16-bit values in a 16-byte vector, lowest address first.
template <typename T>
__device__ __forceinline__ T quant_elem(const uint4& u, int k) {
    const unsigned w = k < 2 ? u.x : k < 4 ? u.y : k < 6 ? u.z : u.w;
    return quant_from_bits(static_cast<unsigned short>(k % 2 ? w >> 16 : w & 0xffffu), static_cast<const T*>(nullptr));
}

template <typename T>
__device__ __forceinline__ float quant_amax8(const uint4& u, float m) {
#pragma unroll
    for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(quant_to_float(quant_elem<T>(u, k))));
    return m;
}

template <typename T>
__device__ __forceinline__ uint2 quant_codes8(const uint4& u, float inv) {
    unsigned c[2] = {0u, 0u};
#pragma unroll
    for (int k = 0; k < 8; ++k) c[k / 4] |= unsigned(quantize_one(quant_elem<T>(u, k), inv)) << (8 * (k % 4));
    return make_uint2(c[0], c[1]);
}

// An L2 eviction policy for loads (createpolicy): evict_first for what is read once (a held
// element lives on in shared memory), evict_last for what the second pass reads again.
__device__ __forceinline__ unsigned long long l2_policy_evict_first() {
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
__device__ __forceinline__ unsigned long long l2_policy_evict_last() {
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
__device__ __forceinline__ uint4 ld_global_nc_l2_hint(const uint4* p, unsigned long long policy) {
    uint4 u;
    asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                 : "l"(p), "l"(policy));
    return u;
}

// Slice `slice` of `n` elements on the CLUSTER CTAs of a cluster (CLUSTER, 1, 1): CTA rank r
// takes elements [r * part, (r + 1) * part) (part: ceil(n / CLUSTER) rounded up to 8), keeping up
// to `hold` of them in `held` (dynamic shared memory of at least min(part, hold) * sizeof(T)
// bytes, 16-byte aligned). Writes codes[slice * n + i] and descale[slice]. Any blockDim.x that is
// a multiple of 32 (<= 1024). The part beyond `hold` is read last in pass 1 and again first in
// pass 2, newest first, with an evict_last hint: the second read finds it in L2 when the parts in
// flight fit there (bench/kernel/quant_bench.cu measured the schedule).
template <typename T, int CLUSTER>
__device__ __forceinline__ void quantize_slice_cluster(const T* __restrict__ x, unsigned char* __restrict__ codes,
                                                       float* __restrict__ descale, long long n, long long hold,
                                                       uint4* __restrict__ held, long long slice) {
    constexpr int DEPTH = 8;  // 16-byte loads in flight per thread
    __shared__ float warp_max[32];
    __shared__ float cta_max, slice_max;
    const unsigned rank = cluster_ctarank();
    const long long part = ((n + CLUSTER - 1) / CLUSTER + 7) / 8 * 8;
    const long long begin = min(n, static_cast<long long>(rank) * part);
    const long long vecs = (min(n, begin + part) - begin) / 8;
    const long long kept = min(vecs, hold / 8);
    const uint4* xv = reinterpret_cast<const uint4*>(x + slice * n + begin);
    uint2* cv = reinterpret_cast<uint2*>(codes + slice * n + begin);
    const long long tid = threadIdx.x, step = blockDim.x;
    const unsigned long long once = l2_policy_evict_first(), again = l2_policy_evict_last();

    // Pass 1: max |x| of the part; the first `kept` vectors to shared memory.
    float m = 0.0f;
    for (long long i0 = tid; i0 < vecs; i0 += DEPTH * step) {
        uint4 u[DEPTH];
#pragma unroll
        for (int j = 0; j < DEPTH; ++j) {
            const long long i = i0 + j * step;
            if (i < vecs) u[j] = ld_global_nc_l2_hint(xv + i, i < kept ? once : again);
        }
#pragma unroll
        for (int j = 0; j < DEPTH; ++j) {
            const long long i = i0 + j * step;
            if (i < vecs) {
                if (i < kept) held[i] = u[j];
                m = quant_amax8<T>(u[j], m);
            }
        }
    }
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float c = 0.0f;
        for (int w = 0; w < int(blockDim.x / 32); ++w) c = fmaxf(c, warp_max[w]);
        cta_max = c;
    }
    // Every CTA's maximum, read by warp 0 of each through distributed shared memory.
    cluster_arrive();
    cluster_wait();
    if (threadIdx.x < 32) {
        float s = threadIdx.x < CLUSTER ? ld_cluster_shared(&cta_max, threadIdx.x) : 0.0f;
        for (int off = 16; off > 0; off /= 2) s = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, off));
        if (threadIdx.x == 0) slice_max = s;
    }
    // Done reading the other CTAs' shared memory; the matching wait (before this CTA exits) keeps
    // every CTA's cta_max alive until all have read it. The __syncthreads also orders every
    // thread's `held` stores before pass 2 reads them (other threads' vectors).
    cluster_arrive();
    __syncthreads();
    float inv, d;
    slice_scales(slice_max, inv, d);
    if (rank == 0 && threadIdx.x == 0) descale[slice] = d;

    // Pass 2: the codes, 8 per thread and step: the part read again first, then the held part.
    for (long long i = vecs - 1 - tid; i >= kept; i -= step)
        cv[i] = quant_codes8<T>(ld_global_nc_l2_hint(xv + i, once), inv);
    for (long long i = tid; i < kept; i += step) cv[i] = quant_codes8<T>(held[i], inv);
    cluster_wait();
}

// q, k and v in one launch: grid (CLUSTER, 3 * slices), clusters (CLUSTER, 1, 1); blockIdx.y /
// slices picks the tensor (0 q, 1 k, 2 v), blockIdx.y % slices its slice. q's slices have n_q
// elements, k's and v's n_kv. One launch rather than three: the three tensors' CTAs fill the
// machine together (no tail and launch gap between them).
template <typename T, int CLUSTER>
__device__ __forceinline__ void quantize_qkv_cluster(const T* __restrict__ q, const T* __restrict__ k,
                                                     const T* __restrict__ v, unsigned char* __restrict__ q8,
                                                     unsigned char* __restrict__ k8, unsigned char* __restrict__ v8,
                                                     float* __restrict__ q_descale, float* __restrict__ k_descale,
                                                     float* __restrict__ v_descale, long long n_q, long long n_kv,
                                                     long long hold, uint4* __restrict__ held) {
    const unsigned slices = gridDim.y / 3;
    const unsigned which = blockIdx.y / slices;
    const long long slice = blockIdx.y % slices;
    const T* x = which == 0 ? q : which == 1 ? k : v;
    unsigned char* codes = which == 0 ? q8 : which == 1 ? k8 : v8;
    float* descale = which == 0 ? q_descale : which == 1 ? k_descale : v_descale;
    quantize_slice_cluster<T, CLUSTER>(x, codes, descale, which == 0 ? n_q : n_kv, hold, held, slice);
}

}  // namespace evo
