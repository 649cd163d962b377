// Reference attention forward for the sdpa_fwd correctness gate: deliberately simple and
// obviously correct, not fast. No tensor cores, float32 everywhere, expf (no exp2 tricks), two
// passes over the keys per query row (row max, then sum of exponentials and the weighted sum of
// V), exactly as the definition reads.
//
//   extern "C" __global__ void sdpa_reference_f16 (const __half* q, const __half* k, const __half* v, float* o, ...)
//   extern "C" __global__ void sdpa_reference_bf16(const __nv_bfloat16* q, ..., float* o, ...)
//
// Parameters: those of sdpa_fwd (see the problem's ABI), except that `o` is float32 (same
// strides, in elements), plus two trailing ints: head_dim (1..256, run time) and causal (0/1:
// key j visible to query i iff j <= i, top-left aligned, also when seq_q != seq_kv).
// Element (b, h, s, d) of X is X[b*X_batch_stride + h*X_head_stride + s*X_seq_stride + d].
//
// Work split (for speed only; every row is computed the same way): a block takes a tile of
// TILE_ROWS consecutive query rows of one (batch, head) and walks the keys in chunks of
// CHUNK_KEYS, staging the tile's q rows and each K (then V) chunk in shared memory as float32,
// so every K/V element read from global memory serves TILE_ROWS rows.
//
// Launch: any grid, blockDim = (THREADS, 1, 1) = (256, 1, 1), no dynamic shared memory. Blocks
// take tiles (tile, h, b) in a grid-stride loop over batch * heads * ceil(seq_q / TILE_ROWS)
// tiles, so grid = (that count, 1, 1) gives one block per tile. Every O element of every row
// (i < seq_q, d < head_dim) is written once; nothing else is. A head_dim outside 1..256 or another
// block size writes nothing (the poisoned output then fails the gate).
//
//   extern "C" __global__ void sdpa_fp8_reference(const unsigned char* q, k, v (e4m3 codes), float* o,
//                                                 const float* q_descale, k_descale, v_descale, ...)
// is the same on e4m3 codes (problem sdpa_fwd_fp8): element (b, h, s, d) of X is
// decode(X[...]) * X_descale[b * heads + h], i.e. attention on the dequantized inputs.

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace sdpa_ref {

// An e4m3 code (the sdpa_fwd_fp8 inputs).
struct e4m3 {
    unsigned char bits;
};

enum : int {
    MAX_HEAD_DIM = 256,
    THREADS = 256,
    TILE_ROWS = 16,
    CHUNK_KEYS = 16,
    // Outputs (row, dim) of a tile per thread: TILE_ROWS * MAX_HEAD_DIM / THREADS.
    OUTS_PER_THREAD = TILE_ROWS * MAX_HEAD_DIM / THREADS,
};
static_assert(TILE_ROWS * CHUNK_KEYS == THREADS, "one score per thread and chunk");

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(e4m3 x) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.bits, __NV_E4M3)));
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// The tile's shared state: q rows (scaled by q's descale), one K or V chunk, the chunk's scores
// (then probabilities), and per row the max and the sum of exponentials. Rows padded by one
// float: the CHUNK_KEYS threads of a row read column d of CHUNK_KEYS different kv rows.
struct Smem {
    float q[TILE_ROWS][MAX_HEAD_DIM + 1];
    float kv[CHUNK_KEYS][MAX_HEAD_DIM + 1];
    float s[TILE_ROWS][CHUNK_KEYS];
    float row_max[TILE_ROWS];
    float row_sum[TILE_ROWS];
};

// Rows [j0, j0 + n) of X (one (batch, head) slice) into sm.kv as floats, zeros past n.
template <typename T>
__device__ __forceinline__ void load_chunk(Smem& sm, const T* __restrict__ x_bh, long long seq_stride, int head_dim, int j0, int n) {
    for (int e = threadIdx.x; e < CHUNK_KEYS * head_dim; e += THREADS) {
        const int c = e / head_dim, d = e % head_dim;
        sm.kv[c][d] = c < n ? to_float(x_bh[static_cast<long long>(j0 + c) * seq_stride + d]) : 0.0f;
    }
}

// Thread t's score of the chunk in sm.kv: row r = t / CHUNK_KEYS, key j0 + c with
// c = t % CHUNK_KEYS, scaled; -inf where the key is past the chunk, past the row's visible keys
// or the row is past seq_q. Written to sm.s[r][c] and returned.
__device__ __forceinline__ float score(Smem& sm, int head_dim, float scale, int i0, int j0, int n, int seq_q, int causal) {
    const int r = threadIdx.x / CHUNK_KEYS, c = threadIdx.x % CHUNK_KEYS;
    const int i = i0 + r, j = j0 + c;
    float x = neg_inf();
    if (c < n && i < seq_q && (!causal || j <= i)) {
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) dot += sm.q[r][d] * sm.kv[c][d];
        x = scale * dot;
    }
    sm.s[r][c] = x;
    return x;
}

template <typename T>
__device__ void attention(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                          float* __restrict__ o, int batch, int heads, int seq_q, int seq_kv,
                          long long q_batch_stride, long long q_head_stride, long long q_seq_stride,
                          long long k_batch_stride, long long k_head_stride, long long k_seq_stride,
                          long long v_batch_stride, long long v_head_stride, long long v_seq_stride,
                          long long o_batch_stride, long long o_head_stride, long long o_seq_stride,
                          float softmax_scale, int head_dim, int causal, const float* q_descale = nullptr,
                          const float* k_descale = nullptr, const float* v_descale = nullptr) {
    __shared__ Smem sm;
    if (head_dim < 1 || head_dim > MAX_HEAD_DIM) return;
    if (blockDim.x != THREADS || blockDim.y != 1 || blockDim.z != 1) return;
    const int tid = threadIdx.x;
    const long long tiles_per_head = (seq_q + TILE_ROWS - 1) / TILE_ROWS;
    const long long tiles = static_cast<long long>(batch) * heads * tiles_per_head;
    const long long blocks = static_cast<long long>(gridDim.x) * gridDim.y * gridDim.z;
    const long long first = blockIdx.x + static_cast<long long>(gridDim.x) * (blockIdx.y + static_cast<long long>(gridDim.y) * blockIdx.z);

    for (long long tile = first; tile < tiles; tile += blocks) {  // block-uniform loop
        const int i0 = static_cast<int>(tile % tiles_per_head) * TILE_ROWS;
        const int h = static_cast<int>((tile / tiles_per_head) % heads);
        const int b = static_cast<int>(tile / (tiles_per_head * heads));
        const T* q_bh = q + (b * q_batch_stride + h * q_head_stride);
        const T* k_bh = k + (b * k_batch_stride + h * k_head_stride);
        const T* v_bh = v + (b * v_batch_stride + h * v_head_stride);

        // Per-(batch, head) descale factors (FP8 inputs; 1 otherwise): q's on q, k's on the
        // scores, v's on the output.
        const int bh = b * heads + h;
        const float qd = q_descale ? q_descale[bh] : 1.0f;
        const float kd = k_descale ? k_descale[bh] : 1.0f;
        const float vd = v_descale ? v_descale[bh] : 1.0f;
        const float scale = softmax_scale * kd;

        // Keys 0 .. n_keys - 1 can be visible to some row of the tile.
        const int last_row = min(i0 + TILE_ROWS, seq_q) - 1;
        const int n_keys = causal ? min(last_row + 1, seq_kv) : seq_kv;

        __syncthreads();  // the previous tile is done with the shared state
        for (int e = tid; e < TILE_ROWS * head_dim; e += THREADS) {
            const int r = e / head_dim, d = e % head_dim;
            sm.q[r][d] = i0 + r < seq_q ? to_float(q_bh[static_cast<long long>(i0 + r) * q_seq_stride + d]) * qd : 0.0f;
        }
        if (tid < TILE_ROWS) {
            sm.row_max[tid] = neg_inf();
            sm.row_sum[tid] = 0.0f;
        }

        // Pass 1: each row's max of its visible scaled scores (key 0 is visible to every row).
        for (int j0 = 0; j0 < n_keys; j0 += CHUNK_KEYS) {
            const int n = min(CHUNK_KEYS, n_keys - j0);
            __syncthreads();
            load_chunk(sm, k_bh, k_seq_stride, head_dim, j0, n);
            __syncthreads();
            score(sm, head_dim, scale, i0, j0, n, seq_q, causal);
            __syncthreads();
            if (tid < TILE_ROWS) {
                float m = sm.row_max[tid];
                for (int c = 0; c < CHUNK_KEYS; ++c) m = fmaxf(m, sm.s[tid][c]);
                sm.row_max[tid] = m;
            }
        }

        // Pass 2: p = exp(s - max) per visible key, the row sums, and O += p V for this thread's
        // outputs (row r = e / head_dim, dim d = e % head_dim for e = tid, tid + THREADS, ...).
        float acc[OUTS_PER_THREAD];  // (loops over u unrolled: acc stays in registers)
#pragma unroll
        for (int u = 0; u < OUTS_PER_THREAD; ++u) acc[u] = 0.0f;
        for (int j0 = 0; j0 < n_keys; j0 += CHUNK_KEYS) {
            const int n = min(CHUNK_KEYS, n_keys - j0);
            __syncthreads();
            load_chunk(sm, k_bh, k_seq_stride, head_dim, j0, n);
            __syncthreads();
            const int r = tid / CHUNK_KEYS, c = tid % CHUNK_KEYS;
            const float x = score(sm, head_dim, scale, i0, j0, n, seq_q, causal);
            // Masked scores are -inf and give p = 0 (rows past seq_q have max -inf: p = 0 too).
            sm.s[r][c] = x == neg_inf() ? 0.0f : expf(x - sm.row_max[r]);
            __syncthreads();
            if (tid < TILE_ROWS) {
                float sum = sm.row_sum[tid];
                for (int cc = 0; cc < CHUNK_KEYS; ++cc) sum += sm.s[tid][cc];
                sm.row_sum[tid] = sum;
            }
            load_chunk(sm, v_bh, v_seq_stride, head_dim, j0, n);  // (K is no longer read)
            __syncthreads();
#pragma unroll
            for (int u = 0; u < OUTS_PER_THREAD; ++u) {
                const int e = tid + u * THREADS;
                if (e < TILE_ROWS * head_dim) {
                    const int rr = e / head_dim, d = e % head_dim;
                    float a = acc[u];
                    for (int cc = 0; cc < CHUNK_KEYS; ++cc) a += sm.s[rr][cc] * sm.kv[cc][d];
                    acc[u] = a;
                }
            }
        }
        __syncthreads();

        // O = acc * v's descale / sum (>= 1 for every valid row: its max contributes exp(0)).
#pragma unroll
        for (int u = 0; u < OUTS_PER_THREAD; ++u) {
            const int e = tid + u * THREADS;
            if (e < TILE_ROWS * head_dim) {
                const int r = e / head_dim, d = e % head_dim;
                if (i0 + r < seq_q) {
                    o[b * o_batch_stride + h * o_head_stride + static_cast<long long>(i0 + r) * o_seq_stride + d] =
                        acc[u] * vd / sm.row_sum[r];
                }
            }
        }
    }
}

}  // namespace sdpa_ref

#define SDPA_REFERENCE_ENTRY(NAME, T)                                                                        \
    extern "C" __global__ void __launch_bounds__(256)                                                         \
    NAME(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, float* __restrict__ o,   \
         int batch, int heads, int seq_q, int seq_kv,                                                        \
         long long q_batch_stride, long long q_head_stride, long long q_seq_stride,                          \
         long long k_batch_stride, long long k_head_stride, long long k_seq_stride,                          \
         long long v_batch_stride, long long v_head_stride, long long v_seq_stride,                          \
         long long o_batch_stride, long long o_head_stride, long long o_seq_stride,                          \
         float softmax_scale, int head_dim, int causal) {                                                    \
        sdpa_ref::attention<T>(q, k, v, o, batch, heads, seq_q, seq_kv, q_batch_stride, q_head_stride,      \
                               q_seq_stride, k_batch_stride, k_head_stride, k_seq_stride, v_batch_stride,    \
                               v_head_stride, v_seq_stride, o_batch_stride, o_head_stride, o_seq_stride,     \
                               softmax_scale, head_dim, causal);                                             \
    }

SDPA_REFERENCE_ENTRY(sdpa_reference_f16, __half)
SDPA_REFERENCE_ENTRY(sdpa_reference_bf16, __nv_bfloat16)

extern "C" __global__ void __launch_bounds__(256)
sdpa_fp8_reference(const sdpa_ref::e4m3* __restrict__ q, const sdpa_ref::e4m3* __restrict__ k,
                   const sdpa_ref::e4m3* __restrict__ v, float* __restrict__ o, const float* __restrict__ q_descale,
                   const float* __restrict__ k_descale, const float* __restrict__ v_descale, int batch, int heads,
                   int seq_q, int seq_kv, long long q_batch_stride, long long q_head_stride, long long q_seq_stride,
                   long long k_batch_stride, long long k_head_stride, long long k_seq_stride,
                   long long v_batch_stride, long long v_head_stride, long long v_seq_stride,
                   long long o_batch_stride, long long o_head_stride, long long o_seq_stride, float softmax_scale,
                   int head_dim, int causal) {
    sdpa_ref::attention<sdpa_ref::e4m3>(q, k, v, o, batch, heads, seq_q, seq_kv, q_batch_stride, q_head_stride,
                                        q_seq_stride, k_batch_stride, k_head_stride, k_seq_stride, v_batch_stride,
                                        v_head_stride, v_seq_stride, o_batch_stride, o_head_stride, o_seq_stride,
                                        softmax_scale, head_dim, causal, q_descale, k_descale, v_descale);
}
