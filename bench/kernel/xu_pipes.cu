// Which pipe the FP8 softmax's conversions share with MUFU.EX2 (issue 19): times loops of
// independent ex2.approx.f32 (MUFU.EX2), cvt.rn.satfinite.e4m3x2.f32 (P's pack to e4m3),
// cvt.rn.f16x2.f32 (fp16's pack) and pairs of them, one CUDA-event time each over a grid that
// fills the GPU. If two kinds of instruction share a pipe, the pair takes about the sum of their
// times; if not, about the larger. Prints per-SM instruction rates (per ns; x clock = per cycle).
// Build and run on the device: nvcc -arch=sm_90a -O3 -o /tmp/xu bench/kernel/xu_pipes.cu && /tmp/xu
#include <cstdio>
#include <cuda_fp16.h>

enum : int { EX2 = 1, E4M3 = 2, F16 = 4 };

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <int MODE>
__global__ void loop(unsigned* out, int iters, float seed) {
    float a[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = seed - 1e-3f * (threadIdx.x + k);
    unsigned acc = 0;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            if (MODE & EX2) a[k] = ex2(a[k]) - 1.f;  // stays in (-1, 0]
            if (MODE & E4M3) {
                unsigned short h;
                asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(a[k]), "f"(a[k ^ 1]));
                acc += h;
            }
            if (MODE & F16) {
                unsigned h;
                asm volatile("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(a[k]), "f"(a[k ^ 1]));
                acc += h;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) acc += __float_as_uint(a[k]);
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

template <int MODE>
float time_ms(unsigned* out, int blocks, int threads, int iters) {
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    loop<MODE><<<blocks, threads>>>(out, iters, -0.5f);  // warm-up
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
        cudaEventRecord(t0);
        loop<MODE><<<blocks, threads>>>(out, iters, -0.5f);
        cudaEventRecord(t1);
        cudaEventSynchronize(t1);
        float ms;
        cudaEventElapsedTime(&ms, t0, t1);
        best = ms < best ? ms : best;
    }
    return best;
}

int main() {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    const int sms = prop.multiProcessorCount, threads = 256, blocks = sms * 8, iters = 1 << 14;
    unsigned* out;
    cudaMalloc(&out, sizeof(unsigned) * blocks * threads);
    const double warp_instr = double(blocks) * threads / 32 * iters * 8;  // per kind
    struct Row { const char* name; float ms; int kinds; };
    Row rows[] = {
        {"ex2 (MUFU.EX2)", time_ms<EX2>(out, blocks, threads, iters), 1},
        {"e4m3x2 pack (F2FP E4M3)", time_ms<E4M3>(out, blocks, threads, iters), 1},
        {"f16x2 pack (F2FP F16)", time_ms<F16>(out, blocks, threads, iters), 1},
        {"ex2 + e4m3x2 pack", time_ms<EX2 | E4M3>(out, blocks, threads, iters), 2},
        {"ex2 + f16x2 pack", time_ms<EX2 | F16>(out, blocks, threads, iters), 2},
    };
    printf("%s, %d SMs, %d blocks x %d threads, %d iterations x 8 per kind\n", prop.name, sms, blocks, threads, iters);
    for (const Row& r : rows) {
        printf("%-26s %9.3f ms  %7.3f warp instructions of each kind per ns per SM (x32 lanes: %.1f /ns/SM)\n", r.name,
               r.ms, warp_instr / (r.ms * 1e6) / sms, 32 * warp_instr / (r.ms * 1e6) / sms);
    }
    printf("shared pipe if the pair's time is near the sum: ex2 + e4m3 %.3f ms against sum %.3f / max %.3f\n",
           rows[3].ms, rows[0].ms + rows[1].ms, rows[0].ms > rows[1].ms ? rows[0].ms : rows[1].ms);
    printf("                                                 ex2 + f16  %.3f ms against sum %.3f / max %.3f\n",
           rows[4].ms, rows[0].ms + rows[2].ms, rows[0].ms > rows[2].ms ? rows[0].ms : rows[2].ms);
    cudaFree(out);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
