// evo-expect: timed_out
// evo-launch: grid = ceil_div(N, 16), ceil_div(M, 16); block = 16, 16; shared_bytes = 0
// evo-why: block (0,0) spins forever on a volatile __device__ flag nothing sets, so the launch never completes: the watchdog kills the worker, timed_out
//
// Planted-fault suite: the base kernel of j_correct.cu with ONE fault, marked FAULT below.
// C[i][j] = sum_l A[i][l] * B[j][l]; A is m x k, B is n x k, both K-contiguous; C is m x n (row stride ldc).
// One block computes a TILE x TILE tile of C: thread (tx, ty) owns C[row0 + ty][col0 + tx].
// The K loop steps by TILE; the last step may be partial (k is a multiple of 8, not of TILE), so
// loads past k (and past m or n) are replaced by zeros.
#include <cuda_fp16.h>
typedef __half T;

#define TILE 16

// Nothing ever writes this flag (it is zero from module load); volatile makes every read a real load.
__device__ volatile int planted_stop_flag;

extern "C" __global__ void __launch_bounds__(TILE * TILE)
gemm(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c,
     int m, int n, int k, int lda, int ldb, int ldc)
{
    // f32 tiles, padded by one column so that Bs[tx][l] reads hit 16 different banks.
    __shared__ float As[TILE][TILE + 1];  // As[r][l] = A[row0 + r][k0 + l]
    __shared__ float Bs[TILE][TILE + 1];  // Bs[r][l] = B[col0 + r][k0 + l]

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    const int row = row0 + ty;  // row of C (and of A) this thread computes and loads
    const int col = col0 + tx;  // column of C this thread computes
    const int brow = col0 + ty; // row of B this thread loads

    float acc = 0.0f;
    for (int k0 = 0; k0 < k; k0 += TILE) {
        const int kk = k0 + tx;
        As[ty][tx] = (row < m && kk < k) ? __half2float(a[(size_t)row * lda + kk]) : 0.0f;
        Bs[ty][tx] = (brow < n && kk < k) ? __half2float(b[(size_t)brow * ldb + kk]) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int l = 0; l < TILE; ++l)
            acc += As[ty][l] * Bs[tx][l];
        __syncthreads();
    }

    if (row < m && col < n)
        c[(size_t)row * ldc + col] = __float2half(acc);

    // FAULT: after C is fully written, thread (0,0) of block (0,0) spins until a flag that nothing sets
    // becomes non-zero, so the kernel never completes (the output itself would be right).
    if (blockIdx.x == 0 && blockIdx.y == 0 && tx == 0 && ty == 0) {
        while (true) {
            if (planted_stop_flag != 0)
                break;
        }
    }
}
