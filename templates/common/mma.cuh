#pragma once
// Warp-level tensor-core MMA m16n8k16 (sm_80+) for f16 / bf16 inputs with f32 accumulators, plus conversions.
//
// Fragments (PTX ISA "Matrix Fragments for mma.m16n8k16"), g = lane/4, t = lane%4:
//   A (16x16, row-major), 4 regs of 2 elements: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B (16x8, "col": k-contiguous per n), 2 regs:   b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g)
//   C/D (16x8 f32), 4 floats:                     c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
// ldmatrix (non-trans) of a row-major [m][k] tile gives A, of an [n][k] tile gives B.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace evo {

// d = a * b + d, element type T in {__half, __nv_bfloat16}.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2]);

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const unsigned (&a)[4],
                                                     const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{ %0, %1, %2, %3 }, { %4, %5, %6, %7 }, { %8, %9 }, { %0, %1, %2, %3 };\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const unsigned (&a)[4],
                                                            const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{ %0, %1, %2, %3 }, { %4, %5, %6, %7 }, { %8, %9 }, { %0, %1, %2, %3 };\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Round-to-nearest conversions from float to the element type.
template <typename T>
__device__ __forceinline__ T from_float(float x);

template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
    return __float2half_rn(x);
}

template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// Two floats rounded to T and packed into 32 bits, `lo` at the lower address (a b16x2 register).
template <typename T>
__device__ __forceinline__ unsigned pack2(float lo, float hi);

template <>
__device__ __forceinline__ unsigned pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}

template <>
__device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}

}  // namespace evo
