// GPU reference for the gemm problem: one thread per output element, float32
// accumulation in order l = 0..k-1, float32 output. Deliberately simple; checked
// against a float64 CPU reference in evo's tests and self-test.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float ref_to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float ref_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ void gemm_reference(const T* a, const T* b, float* c, int m, int n, int k, int lda, int ldb, int ldc) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) return;
    float acc = 0.f;
    for (int l = 0; l < k; ++l) {
        acc += ref_to_float(a[(long long)row * lda + l]) * ref_to_float(b[(long long)col * ldb + l]);
    }
    c[(long long)row * ldc + col] = acc;
}

extern "C" __global__ void gemm_reference_f16(const __half* a, const __half* b, float* c, int m, int n, int k, int lda, int ldb, int ldc) {
    gemm_reference(a, b, c, m, n, k, lda, ldb, ldc);
}

extern "C" __global__ void gemm_reference_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, int m, int n, int k, int lda, int ldb, int ldc) {
    gemm_reference(a, b, c, m, n, k, lda, ldb, ldc);
}
