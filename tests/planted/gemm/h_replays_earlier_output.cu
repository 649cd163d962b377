// evo-expect: incorrect
// evo-launch: grid = ceil_div(N, 16), ceil_div(M, 16); block = 16, 16; shared_bytes = 0
// evo-why: first launch computes C and caches it in a __device__ array; every later launch (module is reused) copies that cache into C: passes determinism, fails tolerance on the next fresh inputs or shape
//
// Planted-fault suite: the base kernel of j_correct.cu with ONE fault, marked FAULT below.
// C[i][j] = sum_l A[i][l] * B[j][l]; A is m x k, B is n x k, both K-contiguous; C is m x n (row stride ldc).
// One block computes a TILE x TILE tile of C: thread (tx, ty) owns C[row0 + ty][col0 + tx].
// The K loop steps by TILE; the last step may be partial (k is a multiple of 8, not of TILE), so
// loads past k (and past m or n) are replaced by zeros.
#include <cuda_fp16.h>
typedef __half T;

#define TILE 16

// State that lives in the module, which evo loads once and reuses for every shape and trial.
#define CACHE_ELEMS (1 << 22)                            // 4 Mi elements (8 MiB): M*N of every shape in check.toml fits (2048 x 2048 exactly)
__device__ unsigned short planted_cache[CACHE_ELEMS];    // C of the first launch, fp16 bits, index row*ldc+col
__device__ int planted_primed;                           // set once the first launch has finished
__device__ unsigned int planted_blocks_done;             // blocks of the first launch that have finished

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

    // FAULT: once primed, every launch copies the cached output of the first launch into C instead of
    // computing: right for the first inputs only. The decision is made once per block, at entry.
    __shared__ int replay;
    if (tx == 0 && ty == 0)
        replay = *(volatile int*)&planted_primed;
    __syncthreads();
    if (replay) {  // block-uniform
        if (row < m && col < n) {
            const size_t idx = (size_t)row * ldc + col;
            c[idx] = __ushort_as_half(idx < CACHE_ELEMS ? planted_cache[idx] : (unsigned short)0);
        }
        return;
    }

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

    if (row < m && col < n) {
        const size_t idx = (size_t)row * ldc + col;
        const T h = __float2half(acc);
        c[idx] = h;
        if (idx < CACHE_ELEMS)
            planted_cache[idx] = __half_as_ushort(h);
    }

    // The last block of the first launch to finish sets planted_primed. Every block of that launch read
    // planted_primed at entry before counting itself here, so none of them replays; the next launch
    // (stream-ordered after this one) sees planted_primed == 1 and a complete cache.
    if (tx == 0 && ty == 0) {
        __threadfence();
        if (atomicAdd(&planted_blocks_done, 1u) == gridDim.x * gridDim.y - 1) {
            __threadfence();
            *(volatile int*)&planted_primed = 1;
        }
    }
}
