#pragma once
// Small device helpers shared by the attention families (sdpa_fwd_mma, sdpa_fwd_fp8_mma): -inf,
// a flush-to-zero exp2 for the online softmax, and a value the optimizer cannot see through.

namespace evo {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// 2^x (MUFU.EX2, flush-to-zero): ex2(-inf) = +0, large negative arguments give 0.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// The value of x, which the compiler cannot see through (no strength reduction across it).
__device__ __forceinline__ int opaque(int x) {
    int y;
    asm volatile("mov.b32 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

}  // namespace evo
