#pragma once
// ldmatrix wrappers (sm_75+): load 8x8 tiles of 16-bit elements from shared memory into mma fragments.
//
// For .xN, lanes 8*i .. 8*i+7 give the addresses of rows 0..7 of matrix i (each row 16 contiguous,
// 16-byte aligned bytes); register i of every lane receives matrix i, lane l holding row l/4,
// elements 2*(l%4) and 2*(l%4)+1 (lower column in the low half). For .x1 / .x2 only lanes 0..7 /
// 0..15 supply addresses (the others' are ignored but must still be valid to compute).
// The .trans variants deliver the transposed matrices (lane l holds column l/4, rows 2*(l%4), +1).

namespace evo {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x1(unsigned& r0, const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 { %0 }, [%1];\n"
                 : "=r"(r0)
                 : "r"(smem_u32(smem)));
}

__device__ __forceinline__ void ldmatrix_x2(unsigned& r0, unsigned& r1, const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 { %0, %1 }, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(smem_u32(smem)));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                            const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %0, %1, %2, %3 }, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(smem_u32(smem)));
}

__device__ __forceinline__ void ldmatrix_x1_trans(unsigned& r0, const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 { %0 }, [%1];\n"
                 : "=r"(r0)
                 : "r"(smem_u32(smem)));
}

__device__ __forceinline__ void ldmatrix_x2_trans(unsigned& r0, unsigned& r1, const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 { %0, %1 }, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(smem_u32(smem)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2,
                                                  unsigned& r3, const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 { %0, %1, %2, %3 }, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(smem_u32(smem)));
}

}  // namespace evo
