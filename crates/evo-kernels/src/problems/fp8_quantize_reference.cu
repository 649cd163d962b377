// Reference of the fp8_quantize problem: the quantization rule of templates/common/fp8.cuh
// (a copy: the reference must not share code with the kernels it judges), writing each output
// byte as a float32 (the gate compares float outputs). evo's selftest checks it against the host
// rule (evo-kernels/src/fp8.rs) bit for bit.
//
//   extern "C" __global__ void fp8_quantize_reference_f16(const __half* x, float* out, int slices, long long len)
//   (and _bf16): out[i] = code byte i for i < slices * len, 0 up to codes_bytes = round_up(slices * len, 16),
//   then the 4 bytes of each slice's float32 descale, one float per byte.
// Launch: grid = (slices), block = (256).
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace fp8_ref {

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ void quantize(const T* __restrict__ x, float* __restrict__ out, int slices, long long len) {
    __shared__ float warp_max[32];
    const int s = blockIdx.x;
    if (s >= slices) return;
    const long long base = static_cast<long long>(s) * len;
    float m = 0.0f;
    for (long long i = threadIdx.x; i < len; i += blockDim.x) m = fmaxf(m, fabsf(to_float(x[base + i])));
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    float amax = 0.0f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) amax = fmaxf(amax, warp_max[w]);
    const bool scaled = amax > 0.0f && amax <= 3.402823466e38f;
    const float inv = scaled ? 448.0f / amax : 1.0f;
    const float descale = scaled ? amax / 448.0f : 1.0f;
    for (long long i = threadIdx.x; i < len; i += blockDim.x) {
        out[base + i] = float(__nv_cvt_float_to_fp8(__fmul_rn(to_float(x[base + i]), inv), __NV_SATFINITE, __NV_E4M3));
    }
    const long long n = static_cast<long long>(slices) * len;
    const long long codes_bytes = (n + 15) / 16 * 16;
    if (s == slices - 1) {
        for (long long i = n + threadIdx.x; i < codes_bytes; i += blockDim.x) out[i] = 0.0f;
    }
    if (threadIdx.x == 0) {
        const unsigned bits = __float_as_uint(descale);
        for (int b = 0; b < 4; ++b) out[codes_bytes + 4 * s + b] = float((bits >> (8 * b)) & 0xffu);
    }
}

}  // namespace fp8_ref

extern "C" __global__ void __launch_bounds__(256)
fp8_quantize_reference_f16(const __half* __restrict__ x, float* __restrict__ out, int slices, long long len) {
    fp8_ref::quantize<__half>(x, out, slices, len);
}

extern "C" __global__ void __launch_bounds__(256)
fp8_quantize_reference_bf16(const __nv_bfloat16* __restrict__ x, float* __restrict__ out, int slices, long long len) {
    fp8_ref::quantize<__nv_bfloat16>(x, out, slices, len);
}
