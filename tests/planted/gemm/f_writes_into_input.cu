// evo-expect: incorrect
// evo-launch: grid = ceil_div(N, 16), ceil_div(M, 16); block = 16, 16; shared_bytes = 0
// evo-why: C is right, but the last block to finish flips the lowest bit of A[0][0] in place after all reads of A: input-unchanged check
//
// Planted-fault suite: the base kernel of j_correct.cu with ONE fault, marked FAULT below.
// C[i][j] = sum_l A[i][l] * B[j][l]; A is m x k, B is n x k, both K-contiguous; C is m x n (row stride ldc).
// One block computes a TILE x TILE tile of C: thread (tx, ty) owns C[row0 + ty][col0 + tx].
// The K loop steps by TILE; the last step may be partial (k is a multiple of 8, not of TILE), so
// loads past k (and past m or n) are replaced by zeros.
#include <cuda_fp16.h>
typedef __half T;

#define TILE 16

// Blocks of this launch that have finished; the last one resets it, so it is zero at every launch.
__device__ unsigned int planted_blocks_done;

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

    // FAULT: the last block to finish flips the lowest bit of A[0][0] in place (casting away const).
    // Every block has finished reading A by then (each block's thread (0,0) gets here only after the
    // final barrier of its K loop, when all of its global loads have landed in shared memory), so C is
    // right; only the input buffer changes. A bit flip changes the bytes whatever A[0][0] holds (zero too).
    if (tx == 0 && ty == 0) {
        __threadfence();
        const unsigned int total = gridDim.x * gridDim.y;
        if (atomicAdd(&planted_blocks_done, 1u) == total - 1) {
            unsigned short* a_bits = (unsigned short*)a;
            a_bits[0] ^= (unsigned short)1;
            planted_blocks_done = 0;
        }
    }
}
