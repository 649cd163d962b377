#pragma once
// FP8 (e4m3) helpers: packing floats into e4m3 registers, and the per-(batch, head) quantizer.
//
// Quantization rule (evo-kernels/src/fp8.rs is the host copy; the two must agree bit for bit):
// per slice (one (batch, head) of a contiguous (batch, heads, seq, dim) tensor), in float32:
//   amax = max |x| (fmaxf: NaN ignored); inv = 448 / amax, descale = amax / 448; amax == 0 (or not
//   finite): inv = 1, descale = 1; code = __nv_cvt_float_to_fp8(x * inv, __NV_SATFINITE, __NV_E4M3).

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace evo {

// d = a * b + d on e4m3 inputs, m16n8k32 (sm_89+; on sm_90a ptxas lowers it to F2FP unpacks + HMMA).
// Fragments (PTX ISA "Matrix Fragments for mma.m16n8k32" with .e4m3), g = lane/4, t = lane%4, each
// register 4 elements (lowest k in the lowest byte):
//   A (16x32, row): a0 (g, 4t..4t+3), a1 (g+8, 4t..), a2 (g, 4t+16..), a3 (g+8, 4t+16..)
//   B (32x8, col):  b0 (k 4t..4t+3, n g), b1 (k 4t+16..4t+19, n g);  C/D as m16n8k16 (mma.cuh).
// Byte for byte these are the f16 m16n8k16 fragments of the same tiles viewed as 16-bit pairs, so
// ldmatrix (b16) of a [m][k] / [n][k] byte tile, k in 16-bit units, gives A / B as for f16.
__device__ __forceinline__ void mma_m16n8k32_e4m3(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{ %0, %1, %2, %3 }, { %4, %5, %6, %7 }, { %8, %9 }, { %0, %1, %2, %3 };\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four floats rounded to e4m3 (saturating) in one 32-bit register, `a` in the lowest byte.
__device__ __forceinline__ unsigned pack4_e4m3(float a, float b, float c, float d) {
    const unsigned lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
    const unsigned hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
    return (lo & 0xffffu) | (hi << 16);
}

// The same, also adding the four rounded values (decoded back, exactly) to `sum`: a softmax
// normalised by the sum of the weights it really used has no bias from rounding P.
__device__ __forceinline__ unsigned pack4_e4m3_sum(float a, float b, float c, float d, float& sum) {
    const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
    const float2 l = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(lo, __NV_E4M3)));
    const float2 h = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(hi, __NV_E4M3)));
    sum += (l.x + l.y) + (h.x + h.y);
    return (unsigned(lo) & 0xffffu) | (unsigned(hi) << 16);
}

__device__ __forceinline__ float quant_to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float quant_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// max |x| over the block's threads (fmaxf: NaN ignored; 0 for no element), in every thread.
// blockDim.x a multiple of 32 (<= 1024); every thread of the block must call it.
__device__ __forceinline__ float block_amax(float m) {
    __shared__ float warp_max[32];
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    float amax = 0.0f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) amax = fmaxf(amax, warp_max[w]);
    return amax;
}

// The scale of a slice with maximum `amax`: inv multiplies x before rounding, descale undoes it.
__device__ __forceinline__ void slice_scales(float amax, float& inv, float& descale) {
    const bool scaled = amax > 0.0f && amax <= 3.402823466e38f;
    inv = scaled ? 448.0f / amax : 1.0f;
    descale = scaled ? amax / 448.0f : 1.0f;
}

template <typename T>
__device__ __forceinline__ unsigned char quantize_one(T x, float inv) {
    return __nv_cvt_float_to_fp8(__fmul_rn(quant_to_float(x), inv), __NV_SATFINITE, __NV_E4M3);
}

// Quantizes one slice of `n` elements per block: blockIdx.x = slice (b * heads + h), any blockDim
// that is a multiple of 32 (<= 1024). Writes codes[slice * n + i] and descale[slice].
template <typename T>
__device__ __forceinline__ void quantize_slice(const T* __restrict__ x, unsigned char* __restrict__ codes,
                                               float* __restrict__ descale, long long n) {
    const long long base = static_cast<long long>(blockIdx.x) * n;
    float m = 0.0f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, fabsf(quant_to_float(x[base + i])));
    float inv, d;
    slice_scales(block_amax(m), inv, d);
    if (threadIdx.x == 0) descale[blockIdx.x] = d;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) codes[base + i] = quantize_one(x[base + i], inv);
}

// The same rule in two passes over many blocks (a slice per block leaves most SMs idle: batch x
// heads blocks). Grid (chunks, slices) in both passes, chunks = ceil(n / chunk) blocks per slice.
// Pass 1: block (c, s) writes the max |x| of elements [c * chunk, (c + 1) * chunk) of slice s to
// partial[s * chunks + c]. Every partial is written, so the buffer needs no initialisation.
template <typename T>
__device__ __forceinline__ void amax_chunk(const T* __restrict__ x, float* __restrict__ partial, long long n,
                                           long long chunk) {
    const long long slice = blockIdx.y, begin = static_cast<long long>(blockIdx.x) * chunk;
    const long long end = begin + chunk < n ? begin + chunk : n;
    const T* xs = x + slice * n;
    float m = 0.0f;
#pragma unroll 8
    for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) m = fmaxf(m, fabsf(quant_to_float(xs[i])));
    const float amax = block_amax(m);
    if (threadIdx.x == 0) partial[slice * gridDim.x + blockIdx.x] = amax;
}

// Pass 2: block (c, s) takes the maximum of slice s's partials (max is exact in any order, so the
// scale is the one-pass rule's, bit for bit), quantizes its chunk; block (0, s) writes descale[s].
template <typename T>
__device__ __forceinline__ void quantize_chunk(const T* __restrict__ x, unsigned char* __restrict__ codes,
                                               float* __restrict__ descale, const float* __restrict__ partial,
                                               long long n, long long chunk) {
    const long long slice = blockIdx.y, begin = static_cast<long long>(blockIdx.x) * chunk;
    const long long end = begin + chunk < n ? begin + chunk : n;
    float m = 0.0f;
    for (unsigned c = threadIdx.x; c < gridDim.x; c += blockDim.x) m = fmaxf(m, partial[slice * gridDim.x + c]);
    float inv, d;
    slice_scales(block_amax(m), inv, d);
    if (blockIdx.x == 0 && threadIdx.x == 0) descale[slice] = d;
    const T* xs = x + slice * n;
    unsigned char* cs = codes + slice * n;
#pragma unroll 8
    for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) cs[i] = quantize_one(xs[i], inv);
}

}  // namespace evo
