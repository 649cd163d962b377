// evo-expect: evaluated
// evo-launch: grid = SLICES; block = 256; shared_bytes = 0
// evo-why: correct quantizer (scale 1 for an all-zero slice)
//
// Planted quantizer suite (problem fp8_quantize; tests/planted/fp8_quantize/check.toml): one block per
// slice ((batch, head) pair) of len f16 elements; pass 1 finds amax, pass 2 encodes. out = codes
// (slices * len bytes), zero padding to a multiple of 16, then one float32 descale per slice.
#include <cuda_fp16.h>
#include <cuda_fp8.h>


extern "C" __global__ void __launch_bounds__(256)
fp8_quantize(const __half* __restrict__ x, unsigned char* __restrict__ out, int slices, long long len) {
    __shared__ float warp_max[8];
    const int s = blockIdx.x;
    const long long base = static_cast<long long>(s) * len;
    float m = 0.0f;
    for (long long i = threadIdx.x; i < len; i += blockDim.x) m = fmaxf(m, fabsf(__half2float(x[base + i])));
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    float amax = 0.0f;
    for (int w = 0; w < 8; ++w) amax = fmaxf(amax, warp_max[w]);
    const bool scaled = amax > 0.0f && amax <= 3.402823466e38f;
    const float inv = scaled ? 448.0f / amax : 1.0f;
    const float descale = scaled ? amax / 448.0f : 1.0f;
    for (long long i = threadIdx.x; i < len; i += blockDim.x)
        out[base + i] = __nv_cvt_float_to_fp8(__fmul_rn(__half2float(x[base + i]), inv), __NV_SATFINITE, __NV_E4M3);
    const long long n = static_cast<long long>(slices) * len;
    const long long codes_bytes = (n + 15) / 16 * 16;
    if (s == slices - 1)
        for (long long i = n + threadIdx.x; i < codes_bytes; i += blockDim.x) out[i] = 0;
    if (threadIdx.x == 0) reinterpret_cast<float*>(out + codes_bytes)[s] = descale;
}

