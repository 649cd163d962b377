// Issue 19: the FP8 quantizer's bandwidth (evidence, not product). The one-pass cluster quantizer
// of templates/common/fp8_cluster.cuh (evo::quantize_qkv_cluster: q, k and v in one launch) at the
// four schedules of family sdpa_fwd_fp8_e2e_ws_cluster (QUANT_CLUSTER 8/16 x QUANT_CTAS_PER_SM
// 1/3), against the schedule it replaced (8 CTAs per slice, one per SM, 4 loads in flight, no L2
// hints, one launch per tensor: `previous`, reproduced here as var::quant), variants of the
// schedule, and a streaming roofline (read 2 bytes, write 1, no maximum). Every variant's codes and
// descales must equal the previous kernel's bit for bit (the gate checked that one against the
// host rule; the GPU test cluster_quantizer_is_the_one_pass_rule_bit_for_bit checks the new one).
// Build and run on the GPU (bench/gpu/quant_bench.sh):
//   nvcc -O3 -std=c++17 -arch=sm_90a -Itemplates/common bench/kernel/quant_bench.cu -o qb && ./qb
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fp8.cuh"
#include "mbarrier.cuh"
#include "cluster.cuh"
#include "fp8_cluster.cuh"
#include "ck.cuh"

using T = __half;

// The product kernel as templates/sdpa_fwd_fp8/sdpa_fwd_fp8_ws.cu.tera renders it for
// QUANT_CLUSTER = C, QUANT_CTAS_PER_SM = M (QUANT_THREADS = THREADS).
template <int C, int THREADS, int M>
__global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS, M)
    q_product(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, unsigned char* __restrict__ q8,
              unsigned char* __restrict__ k8, unsigned char* __restrict__ v8, float* __restrict__ qd,
              float* __restrict__ kd, float* __restrict__ vd, long long n_q, long long n_kv, long long hold) {
    extern __shared__ uint4 held[];
    evo::quantize_qkv_cluster<T, C>(q, k, v, q8, k8, v8, qd, kd, vd, n_q, n_kv, hold, held);
}

namespace var {

// quantize_slice_cluster with knobs: CLUSTER CTAs per slice (launched with that cluster shape),
// DEPTH 16-byte loads in flight per thread, HINT: the held part of the slice loaded evict_first
// (it lives on in shared memory), the part read again evict_last (so the second read finds it in
// L2), read again most recent first.
template <int CLUSTER, int DEPTH, bool HINT>
__device__ __forceinline__ void quant(const T* __restrict__ x, unsigned char* __restrict__ codes,
                                     float* __restrict__ descale, long long n, long long hold, uint4* held,
                                     long long slice) {
    __shared__ float warp_max[32];
    __shared__ float cta_max, slice_max;
    const unsigned rank = evo::cluster_ctarank();
    const long long part = ((n + CLUSTER - 1) / CLUSTER + 7) / 8 * 8;
    const long long begin = min(n, static_cast<long long>(rank) * part);
    const long long vecs = (min(n, begin + part) - begin) / 8;
    const long long kept = min(vecs, hold / 8);
    const uint4* xv = reinterpret_cast<const uint4*>(x + slice * n + begin);
    uint2* cv = reinterpret_cast<uint2*>(codes + slice * n + begin);
    const long long tid = threadIdx.x, step = blockDim.x;
    const unsigned long long first = HINT ? evo::l2_policy_evict_first() : 0, last = HINT ? evo::l2_policy_evict_last() : 0;

    float m = 0.0f;
    for (long long i0 = tid; i0 < vecs; i0 += DEPTH * step) {
        uint4 u[DEPTH];
#pragma unroll
        for (int j = 0; j < DEPTH; ++j) {
            const long long i = i0 + j * step;
            if (i < vecs) u[j] = HINT ? evo::ld_global_nc_l2_hint(xv + i, i < kept ? first : last) : __ldg(xv + i);
        }
#pragma unroll
        for (int j = 0; j < DEPTH; ++j) {
            const long long i = i0 + j * step;
            if (i < vecs) {
                if (i < kept) held[i] = u[j];
                m = evo::quant_amax8<T>(u[j], m);
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
    evo::cluster_arrive();
    evo::cluster_wait();
    if (threadIdx.x < 32) {
        float s = threadIdx.x < CLUSTER ? evo::ld_cluster_shared(&cta_max, threadIdx.x) : 0.0f;
        for (int off = 16; off > 0; off /= 2) s = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, off));
        if (threadIdx.x == 0) slice_max = s;
    }
    evo::cluster_arrive();
    __syncthreads();
    float inv, d;
    evo::slice_scales(slice_max, inv, d);
    if (rank == 0 && threadIdx.x == 0) descale[slice] = d;
    if (HINT) {
        // The re-read part first, newest first (what pass 1 read last is likeliest still in L2).
        for (long long i = vecs - 1 - tid; i >= kept; i -= step) cv[i] = evo::quant_codes8<T>(evo::ld_global_nc_l2_hint(xv + i, first), inv);
        for (long long i = tid; i < kept; i += step) cv[i] = evo::quant_codes8<T>(held[i], inv);
    } else {
        for (long long i = tid; i < vecs; i += step)
            cv[i] = evo::quant_codes8<T>(i < kept ? held[i] : __ldg(xv + i), inv);
    }
    evo::cluster_wait();
}

}  // namespace var

template <int CLUSTER, int THREADS, int MINB, int DEPTH, bool HINT>
__global__ void __launch_bounds__(THREADS, MINB)
    q_var(const T* __restrict__ x, unsigned char* __restrict__ codes, float* __restrict__ descale, long long n,
          long long hold) {
    extern __shared__ uint4 held[];
    var::quant<CLUSTER, DEPTH, HINT>(x, codes, descale, n, hold, held, blockIdx.y);
}

// q, k and v in one launch: grid (CLUSTER, 3 * slices), tensor blockIdx.y / slices.
struct Three {
    const T* x[3];
    unsigned char* c[3];
    float* d[3];
};
template <int CLUSTER, int THREADS, int MINB, int DEPTH, bool HINT>
__global__ void __launch_bounds__(THREADS, MINB)
    q_fused(const Three t, long long n, long long hold) {
    extern __shared__ uint4 held[];
    const int which = blockIdx.y / (gridDim.y / 3);
    var::quant<CLUSTER, DEPTH, HINT>(t.x[which], t.c[which], t.d[which], n, hold, held, blockIdx.y % (gridDim.y / 3));
}

// The roofline: read every element (16-byte vectors), write one byte each, no maximum.
__global__ void __launch_bounds__(512) stream_copy(const uint4* __restrict__ x, uint2* __restrict__ y, long long vecs) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < vecs; i += (long long)gridDim.x * blockDim.x) {
        const uint4 u = __ldg(x + i);
        y[i] = make_uint2(__byte_perm(u.x, u.y, 0x7531), __byte_perm(u.z, u.w, 0x7531));
    }
}

__global__ void fill(T* x, long long n, unsigned seed) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
        float f = ((h & 0xffff) / 65536.0f - 0.5f) * 4.0f;
        if ((h >> 16) % 4099 == 0) f *= 37.0f;  // a few outliers: the maximum matters
        x[i] = __float2half(f);
    }
}

struct Variant {
    const char* name;
    void* fn;
    int cluster, threads, minb;
    long long hold;  // elements kept in shared memory per CTA (at most)
    int kind;        // 0: one launch per tensor (q_var), 1: q_fused, 2: the product (q_product)
};

struct Shape {
    int b, h, s, d;
};

static void launch(const Variant& v, const void* x, void* c, float* ds, long long n, long long slices, cudaStream_t st) {
    const long long part = ((n + v.cluster - 1) / v.cluster + 7) / 8 * 8;
    long long hold = std::min(part, v.hold);
    const size_t smem = 2 * hold;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(v.cluster, (unsigned)(v.kind > 0 ? 3 * slices : slices), 1);
    cfg.blockDim = dim3(v.threads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = v.cluster;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = v.kind == 2 ? 0 : 1;  // the product's cluster is compiled in
    void* args[] = {(void*)&x, (void*)&c, (void*)&ds, (void*)&n, (void*)&hold};
    void* fused_args[] = {(void*)x, (void*)&n, (void*)&hold};  // x: the Three
    const Three* t = static_cast<const Three*>(x);
    void* product_args[] = {(void*)&t->x[0], (void*)&t->x[1], (void*)&t->x[2], (void*)&t->c[0], (void*)&t->c[1],
                            (void*)&t->c[2], (void*)&t->d[0], (void*)&t->d[1], (void*)&t->d[2], (void*)&n, (void*)&n,
                            (void*)&hold};
    CK(cudaLaunchKernelExC(&cfg, v.fn, v.kind == 2 ? product_args : v.kind == 1 ? fused_args : args));
}

int main(int argc, char** argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs, L2 %d MB, smem/SM %zu KB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
           prop.sharedMemPerMultiprocessor >> 10);
    std::vector<Variant> vs = {
        {"previous: c8 t512 1/SM d4, 3 launches", (void*)q_var<8, 512, 1, 4, false>, 8, 512, 1, 106496, 0},
        {"product QUANT 8x1", (void*)q_product<8, 512, 1>, 8, 512, 1, 106496, 2},
        {"product QUANT 8x3", (void*)q_product<8, 256, 3>, 8, 256, 3, 34816, 2},
        {"product QUANT 16x1", (void*)q_product<16, 512, 1>, 16, 512, 1, 106496, 2},
        {"product QUANT 16x3", (void*)q_product<16, 256, 3>, 16, 256, 3, 34816, 2},
        {"c16 t256 3/SM d8 hint, 3 launches", (void*)q_var<16, 256, 3, 8, true>, 16, 256, 3, 34816, 0},
        {"fused c16 t256 4/SM d8 hint hold26K", (void*)q_fused<16, 256, 4, 8, true>, 16, 256, 4, 26624, 1},
        {"fused c16 t512 2/SM d8 hint hold52K", (void*)q_fused<16, 512, 2, 8, true>, 16, 512, 2, 53248, 1},
        // Session 25 (H200): more threads or more loads in flight per SM than the product's four.
        {"product c16 t512 2/SM hold52K", (void*)q_product<16, 512, 2>, 16, 512, 2, 53248, 2},
        {"product c8 t512 2/SM hold52K", (void*)q_product<8, 512, 2>, 8, 512, 2, 53248, 2},
        {"fused c16 t256 3/SM d16 hint", (void*)q_fused<16, 256, 3, 16, true>, 16, 256, 3, 34816, 1},
        {"fused c16 t384 2/SM d8 hint hold52K", (void*)q_fused<16, 384, 2, 8, true>, 16, 384, 2, 53248, 1},
        {"fused c16 t128 6/SM d8 hint hold17K", (void*)q_fused<16, 128, 6, 8, true>, 16, 128, 6, 17408, 1},
    };
    for (auto& v : vs) {
        CK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * 106496));
        if (v.cluster > 8) CK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        if (v.threads * v.minb > 2048 || v.hold * 2 * v.minb > (long long)prop.sharedMemPerMultiprocessor)
            printf("  %s: does not fit %d per SM\n", v.name, v.minb);
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, v.fn));
        printf("  %-32s regs %d, local %zu B\n", v.name, fa.numRegs, fa.localSizeBytes);
    }
    std::vector<Shape> shapes = {{4, 16, 4096, 128}, {4, 16, 4096, 64}, {1, 16, 16384, 128}, {2, 8, 2048, 64}};
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (const Shape& s : shapes) {
        const long long slices = (long long)s.b * s.h, n = (long long)s.s * s.d, total = slices * n;
        T* x[3];
        unsigned char *c[3], *ref[3];
        float *ds[3], *dref[3];
        for (int t = 0; t < 3; ++t) {
            CK(cudaMalloc(&x[t], total * 2));
            CK(cudaMalloc(&c[t], total));
            CK(cudaMalloc(&ref[t], total));
            CK(cudaMalloc(&ds[t], slices * 4));
            CK(cudaMalloc(&dref[t], slices * 4));
            fill<<<1024, 256>>>(x[t], total, 1234567u * (t + 1) + s.s);
        }
        CK(cudaDeviceSynchronize());
        const double bytes = 3.0 * total * 3.0;  // three tensors, 2 bytes read + 1 written each
        printf("\nshape (%d,%d,%d,%d): %lld slices of %lld elements, %.1f MB moved per call\n", s.b, s.h, s.s, s.d,
               slices, n, bytes / 1e6);
        auto time_it = [&](auto&& call) {
            for (int w = 0; w < 3; ++w) call();
            std::vector<float> ms;
            for (int r = 0; r < 7; ++r) {
                CK(cudaEventRecord(e0, st));
                for (int i = 0; i < reps; ++i) call();
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                float t;
                CK(cudaEventElapsedTime(&t, e0, e1));
                ms.push_back(t / reps);
            }
            std::sort(ms.begin(), ms.end());
            return ms[ms.size() / 2] * 1e3;  // us per call
        };
        const double us_copy = time_it([&] {
            for (int t = 0; t < 3; ++t)
                stream_copy<<<prop.multiProcessorCount * 4, 512, 0, st>>>((const uint4*)x[t], (uint2*)c[t], total / 8);
        });
        printf("  %-32s %9.1f us  %7.0f GB/s\n", "roofline (stream 2->1 B)", us_copy, bytes / us_copy / 1e3);
        for (size_t vi = 0; vi < vs.size(); ++vi) {
            const Variant& v = vs[vi];
            Three three;
            for (int t = 0; t < 3; ++t) {
                CK(cudaMemset(c[t], 0xAB, total));
                CK(cudaMemset(ds[t], 0xAB, slices * 4));
                three.x[t] = x[t];
                three.c[t] = c[t];
                three.d[t] = ds[t];
                if (v.kind == 0) launch(v, x[t], vi == 0 ? ref[t] : c[t], vi == 0 ? dref[t] : ds[t], n, slices, st);
            }
            if (v.kind > 0) launch(v, &three, nullptr, nullptr, n, slices, st);
            CK(cudaStreamSynchronize(st));
            CK(cudaGetLastError());
            bool same = true;
            if (vi > 0) {
                std::vector<unsigned char> a(total), b(total);
                std::vector<float> da(slices), db(slices);
                for (int t = 0; t < 3 && same; ++t) {
                    CK(cudaMemcpy(a.data(), c[t], total, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(b.data(), ref[t], total, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(da.data(), ds[t], slices * 4, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(db.data(), dref[t], slices * 4, cudaMemcpyDeviceToHost));
                    same = memcmp(a.data(), b.data(), total) == 0 && memcmp(da.data(), db.data(), slices * 4) == 0;
                }
            }
            const double us = time_it([&] {
                if (v.kind > 0)
                    launch(v, &three, nullptr, nullptr, n, slices, st);
                else
                    for (int t = 0; t < 3; ++t) launch(v, x[t], c[t], ds[t], n, slices, st);
            });
            printf("  %-32s %9.1f us  %7.0f GB/s  %s\n", v.name, us, bytes / us / 1e3,
                   vi == 0 ? "(reference)" : same ? "codes equal" : "CODES DIFFER");
        }
        for (int t = 0; t < 3; ++t) {
            cudaFree(x[t]); cudaFree(c[t]); cudaFree(ref[t]); cudaFree(ds[t]); cudaFree(dref[t]);
        }
    }
    return 0;
}
