#pragma once
// The V transpose of the FP8 attention families (sdpa_fwd_fp8_ws): 8-bit wgmma takes its B
// operand K-major only, so O += P V needs V^T (head-dim rows of keys) while V arrives (by TMA) as
// key rows of head-dim bytes. A warp turns a 32-key x 16-byte block of V into the V^T words P's
// register order wants with one ldmatrix.x4.trans, four byte permutes and one stmatrix.x4 (the
// FlashAttention-3 approach; the code is evo's own).
//
// P's register order (common/qgmma.cuh, register A of a k32 step): a thread holds the S
// accumulator columns 8 j + 2 t + {0, 1} (t = lane % 4) and its A register needs four
// consecutive A columns 4 t .. 4 t + 3. A column c (0..31) of a 32-key step therefore stands for
// key perm_key(c) = 16 (c / 16) + 2 t + (i & 1) + 8 (i >> 1), c = 16 (c / 16) + 4 t + i, and V^T
// lists its keys in that order. Byte layout of one unit (keys k0 .. k0 + 31, bytes d0 .. d0 + 15
// of the rows; g = lane / 4):
//   ldmatrix.x4.trans, matrix m = keys k0 + 8 m .. + 7 (b16 elements = byte pairs of d):
//     r_m = { V[k0+8m+2t][d0+2g], V[k0+8m+2t][d0+2g+1], V[k0+8m+2t+1][d0+2g], V[k0+8m+2t+1][d0+2g+1] }
//   V^T row d0 + 2 g, A columns 4 t .. 4 t + 3 = keys 2t, 2t+1, 2t+8, 2t+9: bytes 0, 2 of r_0 and
//   of r_1 (prmt 0x6420); row d0 + 2 g + 1: bytes 1, 3 (prmt 0x7531); columns 16 + 4 t ..: r_2, r_3.
//   stmatrix.x4 (b16, not transposed): matrix 0 = V^T rows d0 + 2 r (r = 0..7), A columns 0..15 of
//     the step; 1 = rows d0 + 2 r + 1, columns 0..15; 2 and 3 the same with columns 16..31. Lane l
//     supplies row l / 4's bytes 4 t .. 4 t + 3 of each: the four words above.
// bench/kernel/desk_check_fp8.py transcribes this and checks it against a direct transpose.

namespace evo {

// Key of A column c (0..31) of a 32-key step of P (and of V^T's column c).
__device__ __forceinline__ int perm_key(int c) {
    const int half = c & 16, t = (c >> 2) & 3, i = c & 3;
    return half + 2 * t + (i & 1) + ((i >> 1) << 3);
}

__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned sel) {
    unsigned r;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// ldmatrix.x4.trans from a shared address (lanes 8 m .. 8 m + 7: rows 0..7 of matrix m).
__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 { %0, %1, %2, %3 }, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// stmatrix.x4 (sm_90) to a shared address (lanes 8 m .. 8 m + 7: rows 0..7 of matrix m).
__device__ __forceinline__ void stsm_x4(unsigned addr, const unsigned (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], { %1, %2, %3, %4 };\n" ::"r"(addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

// One unit (above): the four ldmatrix results r_0..r_3 as the four stmatrix words.
__device__ __forceinline__ void vt_words(unsigned (&w)[4], const unsigned (&r)[4]) {
    w[0] = prmt(r[0], r[1], 0x6420);
    w[1] = prmt(r[0], r[1], 0x7531);
    w[2] = prmt(r[2], r[3], 0x6420);
    w[3] = prmt(r[2], r[3], 0x7531);
}

// Four floats rounded to e4m3 (saturating at +-448) in one register, `a` in the lowest byte:
// two cvt.rn.satfinite.e4m3x2.f32 (F2FP) and a byte merge.
__device__ __forceinline__ unsigned pack4_e4m3_rn(float a, float b, float c, float d) {
    unsigned short lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(b), "f"(a));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(d), "f"(c));
    return unsigned(lo) | (unsigned(hi) << 16);
}

}  // namespace evo
