// One consumer warp's FP8 softmax step in isolation (issue 19): cycles per tile of the tile
// maximum, exponentials and row sums of common/softmax_p8.cuh (BLOCK_N 192: 96 scores per thread)
// with one or two warps per SM sub-partition, and variants of the step with the maximum and the
// row sums in several independent chains. bench/gpu/fp8_timeline.sh measured the step at
// 1850-2200 cycles inside the kernel (tile maximum 640-740), about twice what its MUFU.EX2 take
// at the unit's rate (98 x 8 cycles). Last, the header's step in one or two warpgroups beside a
// warpgroup that keeps the tensor cores busy with S = Q K^T tiles (QGMMA SS m64n192k32) or P V
// tiles (QGMMA RS m64n128k32, A from registers), as the kernel's: what the GEMMs running next to
// it cost the step. (Session 21 ran this file before the P V neighbour and the two-warpgroup rows
// were added, call 10 in docs/RESULTS.md; those rows have not run on a GPU yet.)
// Build and run on the device, from the repo root:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I templates/common -o /tmp/sb bench/kernel/softmax_bench.cu && /tmp/sb
#include <algorithm>
#include <cstdio>
#include <vector>

#include "softmax.cuh"
#include "softmax_p8.cuh"
#include "wgmma.cuh"
#include "qgmma.cuh"

using namespace evo;

enum : int { NB = 24, FLOATS = 4 * NB, LAZY = 2 };
using Sm = OnlineSoftmaxP8<NB, LAZY, 0>;

// step448<MASK false, SUM true> with the tile maximum in MAXC chains per row and the tile's sums in
// SUMC partial sums per row (element k of row h: block k / 2, float 2 h + k % 2).
template <int MAXC, int SUMC>
__device__ __forceinline__ bool step_chains(Sm& sm, float (&s)[FLOATS], const LogitScale& sc, float (&alpha)[2]) {
    auto at = [&](int h, int k) -> float& { return s[4 * (k >> 1) + 2 * h + (k & 1)]; };
    float m[2][MAXC];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int c = 0; c < MAXC; ++c) m[h][c] = at(h, c);
#pragma unroll
        for (int k = MAXC; k < 2 * NB; ++k) m[h][k % MAXC] = fmaxf(m[h][k % MAXC], at(h, k));
#pragma unroll
        for (int w = 1; w < MAXC; w *= 2) {
#pragma unroll
            for (int c = 0; c + w < MAXC; c += 2 * w) m[h][c] = fmaxf(m[h][c], m[h][c + w]);
        }
    }
    float tile_max[2] = {m[0][0], m[1][0]};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
        tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
    }
    float ref[2];
    bool moved = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float m_tile = tile_max[h] * sc.c;
        const bool up = m_tile > sm.row_max[h] + float(LAZY);
        const float m_new = up ? m_tile : sm.row_max[h];
        moved = moved || up;
        const float base = m_new == neg_inf() ? 0.f : m_new;
        alpha[h] = m_new == sm.row_max[h] ? 1.f : fast_exp2(sm.row_max[h] - base);
        ref[h] = base - (log2_448() - float(LAZY));
        sm.row_max[h] = m_new;
    }
    float part[2][SUMC];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int c = 0; c < SUMC; ++c) part[h][c] = 0.f;
    }
#pragma unroll
    for (int k = 0; k < 2 * NB; ++k) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float p = fast_exp2(fmaf(at(h, k), sc.c, -ref[h]));
            at(h, k) = p;
            part[h][k % SUMC] += p;
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float t = part[h][0];
#pragma unroll
        for (int c = 1; c < SUMC; ++c) t += part[h][c];
        sm.row_sum[h] = sm.row_sum[h] * alpha[h] + t;
    }
    return moved;
}

// iters steps on this thread's 96 scores (VARIANT 0: the header's step448; else
// step_chains<MAXC, SUMC>); writes a checksum to out, returns the clock64 cycles of the steps.
template <int VARIANT, int MAXC, int SUMC>
__device__ __forceinline__ long long step_loop(const float* in, float* out, int iters) {
    float s[FLOATS];
#pragma unroll
    for (int i = 0; i < FLOATS; ++i) s[i] = in[(threadIdx.x * FLOATS + i) % 4096];
    Sm sm;
    sm.init();
    const LogitScale sc = LogitScale::of_log2(0.02f);
    float alpha[2];
    int moves = 0;
    __syncwarp();
    const long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
        // The scores "change" every tile (no instruction: the compiler may not reuse a step).
#pragma unroll
        for (int i = 0; i < FLOATS; ++i) asm volatile("" : "+f"(s[i]));
        bool moved;
        if constexpr (VARIANT == 0) {
            auto at = [&](int j, int r) -> float& { return s[4 * j + r]; };
            moved = sm.step448<false, true>(at, sc, [](int, int, int) { return true; }, alpha);
        } else {
            moved = step_chains<MAXC, SUMC>(sm, s, sc, alpha);
        }
        moves += moved;
        // p in [0, 448] becomes the next tile's scores.
#pragma unroll
        for (int i = 0; i < FLOATS; ++i) asm volatile("" : "+f"(s[i]));
    }
    const long long t1 = clock64();
    float acc = sm.row_sum[0] + sm.row_sum[1] + alpha[0] + float(moves);
#pragma unroll
    for (int i = 0; i < FLOATS; ++i) acc += s[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
    return t1 - t0;
}

template <int VARIANT, int MAXC, int SUMC>
__global__ void bench(const float* in, float* out, long long* cycles, int iters) {
    const long long c = step_loop<VARIANT, MAXC, SUMC>(in, out, iters);
    if ((threadIdx.x & 31) == 0) cycles[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = c;
}

template <int VARIANT, int MAXC, int SUMC>
void run(const char* name, const float* in, float* out, long long* cycles, int sms) {
    const int iters = 2000;
    for (int warps_per_smsp = 1; warps_per_smsp <= 2; ++warps_per_smsp) {
        const int threads = 128 * warps_per_smsp, n = sms * threads / 32;
        bench<VARIANT, MAXC, SUMC><<<sms, threads>>>(in, out, cycles, iters);  // warm-up
        bench<VARIANT, MAXC, SUMC><<<sms, threads>>>(in, out, cycles, iters);
        std::vector<long long> c(n);
        cudaMemcpy(c.data(), cycles, n * sizeof(long long), cudaMemcpyDeviceToHost);
        std::sort(c.begin(), c.end());
        printf("%-34s %d warp(s)/sub-partition: %7.1f cycles per step (median warp; min %.1f, max %.1f)\n", name,
               warps_per_smsp, double(c[n / 2]) / iters, double(c[0]) / iters, double(c[n - 1]) / iters);
    }
}

// Warpgroups 0 .. SOFTMAX_WG - 1 time the header's step (as bench<0>); the last warpgroup keeps
// the tensor cores busy until they are done and reports its cycles per group: NEIGHBOR 1, S = Q
// K^T tiles (QGMMA SS, 4 k32 steps of m64n192k32, as the kernel's S); 2, P V tiles (QGMMA RS: A
// from registers, 6 k32 steps of m64n128k32, as the kernel's P V); 0, it idles. Zero operands.
template <int NEIGHBOR, int SOFTMAX_WG>
__global__ void beside(const float* in, float* out, long long* cycles, int iters) {
    __shared__ __align__(1024) unsigned char tiles[(64 + 192) * 128];
    __shared__ int done;
    for (int i = threadIdx.x; i < (64 + 192) * 128 / 4; i += blockDim.x) reinterpret_cast<unsigned*>(tiles)[i] = 0;
    if (threadIdx.x == 0) done = 0;
    __syncthreads();
    const int wg = threadIdx.x / 128;
    if (wg == SOFTMAX_WG) {
        if (NEIGHBOR == 0) return;
        const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(tiles));
        const unsigned long long qd = wgmma_desc_kmajor<128>(base), kd = wgmma_desc_kmajor<128>(base + 64 * 128);
        float acc[96];
        float acc_o[64];
        unsigned a_p[6][4];
#pragma unroll
        for (int i = 0; i < 64; ++i) acc_o[i] = 0.f;
#pragma unroll
        for (int k = 0; k < 6; ++k) {
#pragma unroll
            for (int r = 0; r < 4; ++r) a_p[k][r] = 0u;
        }
        long long groups = 0;
        const long long t0 = clock64();
        while (!*(volatile int*)&done) {
            wgmma_fence();
            if constexpr (NEIGHBOR == 1) {
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) {
                    Qgmma<192>::ss(acc, wgmma_desc_add(qd, 32 * kk), wgmma_desc_add(kd, 32 * kk), kk > 0);
                }
            } else {
#pragma unroll
                for (int kk = 0; kk < 6; ++kk) Qgmma<128>::rs(acc_o, a_p[kk], wgmma_desc_add(kd, 32 * kk), 1);
            }
            wgmma_commit();
            wgmma_wait<0>();
            if constexpr (NEIGHBOR == 1) {
                wgmma_fence_regs(acc);
            } else {
                wgmma_fence_regs(acc_o);
            }
            ++groups;
        }
        const long long t1 = clock64();
        float a = 0.f;
#pragma unroll
        for (int i = 0; i < 64; ++i) a += NEIGHBOR == 1 ? acc[i] : acc_o[i];
        out[blockIdx.x * blockDim.x + threadIdx.x] = a;
        if (threadIdx.x == 128 * SOFTMAX_WG) cycles[gridDim.x + blockIdx.x] = groups ? (t1 - t0) / groups : 0;
        return;
    }
    const long long c = step_loop<0, 1, 1>(in, out, iters);
    asm volatile("bar.sync 1, %0;" ::"n"(128 * SOFTMAX_WG));
    if (threadIdx.x == 0) *(volatile int*)&done = 1;
    if (threadIdx.x == 0) cycles[blockIdx.x] = c / iters;
}

template <int NEIGHBOR, int SOFTMAX_WG>
void run_beside(const char* name, const float* in, float* out, long long* cycles, int sms) {
    const int threads = 128 * (SOFTMAX_WG + 1);
    beside<NEIGHBOR, SOFTMAX_WG><<<sms, threads>>>(in, out, cycles, 2000);
    cudaMemset(cycles, 0, 2 * sms * sizeof(long long));
    beside<NEIGHBOR, SOFTMAX_WG><<<sms, threads>>>(in, out, cycles, 2000);
    std::vector<long long> c(2 * sms);
    cudaMemcpy(c.data(), cycles, 2 * sms * sizeof(long long), cudaMemcpyDeviceToHost);
    std::vector<long long> step(c.begin(), c.begin() + sms), gemm(c.begin() + sms, c.end());
    std::sort(step.begin(), step.end());
    std::sort(gemm.begin(), gemm.end());
    if (NEIGHBOR == 0) {
        printf("%-40s step %6lld cycles (median CTA)\n", name, step[sms / 2]);
    } else {
        printf("%-40s step %6lld cycles (median CTA); beside it one group every %lld cycles (ideal %d)\n", name,
               step[sms / 2], gemm[sms / 2], NEIGHBOR == 1 ? 384 : 384);
    }
}

int main() {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    const int sms = prop.multiProcessorCount;
    std::vector<float> h(4096);
    unsigned x = 12345;
    for (float& v : h) {  // scores like a tile's: spread over about +-100 before the scale
        x = x * 1664525u + 1013904223u;
        v = float(int(x >> 9) % 20000) / 100.f - 100.f;
    }
    float *in, *out;
    long long* cycles;
    cudaMalloc(&in, 4096 * sizeof(float));
    cudaMalloc(&out, sms * 256 * sizeof(float));
    cudaMalloc(&cycles, sms * 8 * sizeof(long long));
    cudaMemcpy(in, h.data(), 4096 * sizeof(float), cudaMemcpyHostToDevice);
    printf("%s, one step = 96 scores per thread (two rows of BLOCK_N 192), lazy rescale\n", prop.name);
    run<0, 1, 1>("step448 (header)", in, out, cycles, sms);
    run<1, 1, 1>("chains: max 1, sums 1", in, out, cycles, sms);
    run<1, 4, 1>("chains: max 4, sums 1", in, out, cycles, sms);
    run<1, 8, 1>("chains: max 8, sums 1", in, out, cycles, sms);
    run<1, 1, 4>("chains: max 1, sums 4", in, out, cycles, sms);
    run<1, 4, 4>("chains: max 4, sums 4", in, out, cycles, sms);
    run<1, 8, 4>("chains: max 8, sums 4", in, out, cycles, sms);
    run<1, 16, 8>("chains: max 16, sums 8", in, out, cycles, sms);
    run_beside<0, 1>("step448, second warpgroup idle", in, out, cycles, sms);
    run_beside<1, 1>("step448 beside QGMMA S tiles (SS)", in, out, cycles, sms);
    run_beside<2, 1>("step448 beside QGMMA P V tiles (RS)", in, out, cycles, sms);
    run_beside<0, 2>("2 step448 warpgroups", in, out, cycles, sms);
    run_beside<1, 2>("2 step448 warpgroups beside S tiles", in, out, cycles, sms);
    run_beside<2, 2>("2 step448 warpgroups beside P V tiles", in, out, cycles, sms);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
