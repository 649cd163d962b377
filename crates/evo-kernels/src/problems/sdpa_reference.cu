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
// Every sum runs in one order, the definition's: a score is q·k summed over d = 0, 1, ...; a
// row's sum of exponentials and each output's sum of p·v run over the keys j = 0, 1, ... So
// the work split below decides only speed, never a bit of the result.
//
// Work split (for speed only): a block takes a tile of TILE_ROWS consecutive query rows of one
// (batch, head) and walks the keys in chunks of CHUNK_KEYS. Scores of a chunk are a small
// tiled matrix product: q and k staged in shared memory as float32, D_STEP dimensions at a
// time, each thread holding a 4 x 4 block of scores (rows ty + 16a, keys tx + 16b). The chunk's
// probabilities then go through shared memory, and each thread accumulates its 4 rows x
// head_dim / 16 outputs (dims tx + 16e) over V_STEP keys of V at a time.
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
    TILE_ROWS = 64,
    CHUNK_KEYS = 64,
    // Dimensions of q and k staged at a time for the scores; keys of V for the outputs.
    D_STEP = 32,
    V_STEP = 8,
    // A thread's rows (ty + 16a), keys (tx + 16b) and output dims (tx + 16e).
    ROWS_PER_THREAD = TILE_ROWS / 16,
    KEYS_PER_THREAD = CHUNK_KEYS / 16,
    DIMS_PER_THREAD = MAX_HEAD_DIM / 16,
};
static_assert(THREADS == 16 * 16, "threads as a 16 x 16 grid");

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(e4m3 x) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.bits, __NV_E4M3)));
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// The tile's shared state. Rows padded by one float so the 16 threads of a row group read 16
// different banks.
struct Smem {
    float q[TILE_ROWS][D_STEP + 1];   // dims [d0, d0 + D_STEP) of the tile's q rows (descaled)
    float k[CHUNK_KEYS][D_STEP + 1];  // the same dims of the chunk's keys
    float v[V_STEP][MAX_HEAD_DIM + 1];
    float p[TILE_ROWS][CHUNK_KEYS + 1];  // the chunk's scores, then probabilities
    float row_max[TILE_ROWS];
    float row_sum[TILE_ROWS];
};

// Scaled scores of the tile's rows against keys [j0, j0 + CHUNK_KEYS) into sm.p: -inf where
// the key is past n_keys, past the row's visible keys, or the row is past seq_q. Each score is
// one float sum over d in order (the loop over d-steps continues the same accumulator).
template <typename T>
__device__ void scores(Smem& sm, const T* __restrict__ q_bh, long long q_seq_stride, float qd,
                       const T* __restrict__ k_bh, long long k_seq_stride, int head_dim, float scale,
                       int i0, int j0, int n_keys, int seq_q, int causal) {
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    float dot[ROWS_PER_THREAD][KEYS_PER_THREAD];
#pragma unroll
    for (int a = 0; a < ROWS_PER_THREAD; ++a)
#pragma unroll
        for (int b = 0; b < KEYS_PER_THREAD; ++b) dot[a][b] = 0.0f;
    for (int d0 = 0; d0 < head_dim; d0 += D_STEP) {
        const int dn = min(D_STEP, head_dim - d0);
        __syncthreads();  // the previous step (or chunk) is done with sm.q and sm.k
        for (int e = tid; e < TILE_ROWS * D_STEP; e += THREADS) {
            const int r = e / D_STEP, d = e % D_STEP;
            sm.q[r][d] = i0 + r < seq_q && d < dn
                             ? to_float(q_bh[static_cast<long long>(i0 + r) * q_seq_stride + d0 + d]) * qd
                             : 0.0f;
        }
        for (int e = tid; e < CHUNK_KEYS * D_STEP; e += THREADS) {
            const int c = e / D_STEP, d = e % D_STEP;
            sm.k[c][d] = j0 + c < n_keys && d < dn
                             ? to_float(k_bh[static_cast<long long>(j0 + c) * k_seq_stride + d0 + d])
                             : 0.0f;
        }
        __syncthreads();
        for (int d = 0; d < dn; ++d) {
            float qv[ROWS_PER_THREAD], kv[KEYS_PER_THREAD];
#pragma unroll
            for (int a = 0; a < ROWS_PER_THREAD; ++a) qv[a] = sm.q[ty + 16 * a][d];
#pragma unroll
            for (int b = 0; b < KEYS_PER_THREAD; ++b) kv[b] = sm.k[tx + 16 * b][d];
#pragma unroll
            for (int a = 0; a < ROWS_PER_THREAD; ++a)
#pragma unroll
                for (int b = 0; b < KEYS_PER_THREAD; ++b) dot[a][b] += qv[a] * kv[b];
        }
    }
#pragma unroll
    for (int a = 0; a < ROWS_PER_THREAD; ++a) {
#pragma unroll
        for (int b = 0; b < KEYS_PER_THREAD; ++b) {
            const int r = ty + 16 * a, c = tx + 16 * b, i = i0 + r, j = j0 + c;
            const bool visible = j < n_keys && i < seq_q && (!causal || j <= i);
            sm.p[r][c] = visible ? scale * dot[a][b] : neg_inf();
        }
    }
    __syncthreads();
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
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
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
        if (tid < TILE_ROWS) {
            sm.row_max[tid] = neg_inf();
            sm.row_sum[tid] = 0.0f;
        }

        // Pass 1: each row's max of its visible scaled scores (key 0 is visible to every row).
        for (int j0 = 0; j0 < n_keys; j0 += CHUNK_KEYS) {
            scores(sm, q_bh, q_seq_stride, qd, k_bh, k_seq_stride, head_dim, scale, i0, j0, n_keys, seq_q, causal);
            if (tid < TILE_ROWS) {
                float m = sm.row_max[tid];
                for (int c = 0; c < CHUNK_KEYS; ++c) m = fmaxf(m, sm.p[tid][c]);
                sm.row_max[tid] = m;
            }
        }

        // Pass 2: p = exp(s - max) per visible key, the row sums (one thread per row, keys in
        // order), and O += p V for this thread's outputs (keys in order).
        float acc[ROWS_PER_THREAD][DIMS_PER_THREAD];  // (loops unrolled: acc stays in registers)
#pragma unroll
        for (int a = 0; a < ROWS_PER_THREAD; ++a)
#pragma unroll
            for (int e = 0; e < DIMS_PER_THREAD; ++e) acc[a][e] = 0.0f;
        for (int j0 = 0; j0 < n_keys; j0 += CHUNK_KEYS) {
            scores(sm, q_bh, q_seq_stride, qd, k_bh, k_seq_stride, head_dim, scale, i0, j0, n_keys, seq_q, causal);
            // Masked scores are -inf and give p = 0 (rows past seq_q have max -inf: p = 0 too).
            for (int e = tid; e < TILE_ROWS * CHUNK_KEYS; e += THREADS) {
                const int r = e / CHUNK_KEYS, c = e % CHUNK_KEYS;
                const float x = sm.p[r][c];
                sm.p[r][c] = x == neg_inf() ? 0.0f : expf(x - sm.row_max[r]);
            }
            __syncthreads();
            if (tid < TILE_ROWS) {
                float sum = sm.row_sum[tid];
                for (int c = 0; c < CHUNK_KEYS; ++c) sum += sm.p[tid][c];
                sm.row_sum[tid] = sum;
            }
            for (int c0 = 0; c0 < CHUNK_KEYS; c0 += V_STEP) {
                __syncthreads();  // the previous step is done with sm.v
                for (int e = tid; e < V_STEP * head_dim; e += THREADS) {
                    const int c = e / head_dim, d = e % head_dim;
                    sm.v[c][d] = j0 + c0 + c < n_keys
                                     ? to_float(v_bh[static_cast<long long>(j0 + c0 + c) * v_seq_stride + d])
                                     : 0.0f;
                }
                __syncthreads();
                for (int c = 0; c < V_STEP; ++c) {
                    float pv[ROWS_PER_THREAD];
#pragma unroll
                    for (int a = 0; a < ROWS_PER_THREAD; ++a) pv[a] = sm.p[ty + 16 * a][c0 + c];
#pragma unroll
                    for (int e = 0; e < DIMS_PER_THREAD; ++e) {
                        const int d = tx + 16 * e;
                        if (d < head_dim) {
                            const float vv = sm.v[c][d];
#pragma unroll
                            for (int a = 0; a < ROWS_PER_THREAD; ++a) acc[a][e] += pv[a] * vv;
                        }
                    }
                }
            }
        }
        __syncthreads();

        // O = acc * v's descale / sum (>= 1 for every valid row: its max contributes exp(0)).
#pragma unroll
        for (int a = 0; a < ROWS_PER_THREAD; ++a) {
            const int r = ty + 16 * a;
            if (i0 + r >= seq_q) continue;
            float* o_row = o + b * o_batch_stride + h * o_head_stride + static_cast<long long>(i0 + r) * o_seq_stride;
#pragma unroll
            for (int e = 0; e < DIMS_PER_THREAD; ++e) {
                const int d = tx + 16 * e;
                if (d < head_dim) o_row[d] = acc[a][e] * vd / sm.row_sum[r];
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
