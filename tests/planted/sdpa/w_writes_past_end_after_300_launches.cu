// evo-expect: incorrect
// evo-launch: grid = ceil_div(SEQ_Q, 16), HEADS, BATCH; block = 128; shared_bytes = 0
// evo-why: from its 301st launch on (the correctness trials make 56) also writes one element just past the end of O; every output is right and every trial passes: the timing gate's guard check after the last replay
//
// Planted-fault suite: the base kernel of j_correct.cu with ONE fault, marked FAULT below.
// O = softmax(softmax_scale * Q K^T) V per (batch, head); HEAD_DIM = 64, non-causal (check.toml's
// spec), f16 in and out, f32 everywhere inside. Element (b, h, s, d) of X is
// X[b*X_batch_stride + h*X_head_stride + s*X_seq_stride + d].
//
// Block (x, h, b) computes query rows q0 = 16x .. q0 + 15 of head h of batch b. Thread t owns query
// row r = t / 8 of the tile and, within it, column c = t % 8: it computes the scores of keys
// c, c + 8, ..., c + 56 of each K/V tile and the outputs of dims c, c + 8, ..., c + 56. The 8 threads
// of a row are 8 consecutive lanes of one warp; they combine their row max and row sum with
// shuffles. K/V tiles of 64 keys go through shared memory; the last tile may be partial (keys past
// seq_kv are loaded as zeros and their scores set to -inf, so p = 0), and so may the last Q tile
// (rows past seq_q are loaded as zeros, computed, and never written).
#include <cuda_fp16.h>
typedef __half T;

#define HEAD_DIM 64
#define BLOCK_M 16                    // query rows per block
#define BLOCK_N 64                    // keys per K/V tile
#define TPR 8                         // threads per query row
#define THREADS (BLOCK_M * TPR)       // 128
#define KEYS_PER_THREAD (BLOCK_N / TPR)   // 8 scores per thread per tile
#define DIMS_PER_THREAD (HEAD_DIM / TPR)  // 8 outputs per thread

#define NEG_INF __int_as_float(0xff800000)

// FAULT (with the lines at the end of the kernel): launches of this module so far.
__device__ unsigned int planted_launches;
#define PLANTED_GOOD_LAUNCHES 300u

extern "C" __global__ void __launch_bounds__(THREADS)
sdpa_fwd(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
         int batch, int heads, int seq_q, int seq_kv,
         long long q_batch_stride, long long q_head_stride, long long q_seq_stride,
         long long k_batch_stride, long long k_head_stride, long long k_seq_stride,
         long long v_batch_stride, long long v_head_stride, long long v_seq_stride,
         long long o_batch_stride, long long o_head_stride, long long o_seq_stride,
         float softmax_scale)
{
    // f32 tiles; the +1 columns spread the rows r (and keys j) of one warp over different banks.
    __shared__ float Qs[BLOCK_M][HEAD_DIM + 1];  // Qs[r][d] = Q[q0 + r][d]
    __shared__ float Ks[BLOCK_N][HEAD_DIM + 1];  // Ks[j][d] = K[k0 + j][d]
    __shared__ float Vs[BLOCK_N][HEAD_DIM];      // Vs[j][d] = V[k0 + j][d]
    __shared__ float Ps[BLOCK_M][BLOCK_N + 1];   // Ps[r][j] = exp(S[r][j] - running max of row r)

    const int tid = threadIdx.x;
    const int r = tid / TPR;  // query row within the tile
    const int c = tid % TPR;  // keys c + TPR*jj, dims c + TPR*dd
    const int q0 = blockIdx.x * BLOCK_M;
    const int h = blockIdx.y, b = blockIdx.z;
    const int row = q0 + r;   // query row of this thread (valid iff row < seq_q)

    const T* q_bh = q + (b * q_batch_stride + h * q_head_stride);
    const T* k_bh = k + (b * k_batch_stride + h * k_head_stride);
    const T* v_bh = v + (b * v_batch_stride + h * v_head_stride);

    for (int i = tid; i < BLOCK_M * HEAD_DIM; i += THREADS) {
        const int rr = i / HEAD_DIM, d = i % HEAD_DIM;
        Qs[rr][d] = (q0 + rr < seq_q) ? __half2float(q_bh[(long long)(q0 + rr) * q_seq_stride + d]) : 0.0f;
    }

    float m_run = NEG_INF;  // running max of row r's scores (same in all 8 threads of the row)
    float l_run = 0.0f;     // running sum of exp(score - m_run)
    float acc[DIMS_PER_THREAD];
#pragma unroll
    for (int dd = 0; dd < DIMS_PER_THREAD; ++dd)
        acc[dd] = 0.0f;

    for (int k0 = 0; k0 < seq_kv; k0 += BLOCK_N) {
        __syncthreads();  // Qs is loaded (first tile); everyone is done with the previous Ks, Vs, Ps
        for (int i = tid; i < BLOCK_N * HEAD_DIM; i += THREADS) {
            const int j = i / HEAD_DIM, d = i % HEAD_DIM;
            const bool in = k0 + j < seq_kv;
            Ks[j][d] = in ? __half2float(k_bh[(long long)(k0 + j) * k_seq_stride + d]) : 0.0f;
            Vs[j][d] = in ? __half2float(v_bh[(long long)(k0 + j) * v_seq_stride + d]) : 0.0f;
        }
        __syncthreads();

        // Scores of this thread's keys; keys past seq_kv get -inf.
        float s[KEYS_PER_THREAD];
        float tile_max = NEG_INF;
#pragma unroll
        for (int jj = 0; jj < KEYS_PER_THREAD; ++jj) {
            const int j = c + TPR * jj;
            float dot = 0.0f;
#pragma unroll 16
            for (int d = 0; d < HEAD_DIM; ++d)
                dot += Qs[r][d] * Ks[j][d];
            s[jj] = (k0 + j < seq_kv) ? softmax_scale * dot : NEG_INF;
            tile_max = fmaxf(tile_max, s[jj]);
        }
        // Row max over the row's 8 lanes (xor offsets < 8 stay inside the aligned group of 8).
#pragma unroll
        for (int off = TPR / 2; off > 0; off /= 2)
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));

        // Key k0 is always valid, so tile_max and m_new are finite; alpha = 0 on the first tile.
        const float m_new = fmaxf(m_run, tile_max);
        const float alpha = expf(m_run - m_new);
        float p_sum = 0.0f;
#pragma unroll
        for (int jj = 0; jj < KEYS_PER_THREAD; ++jj) {
            const float p = expf(s[jj] - m_new);  // 0 for masked keys
            Ps[r][c + TPR * jj] = p;
            p_sum += p;
        }
#pragma unroll
        for (int off = TPR / 2; off > 0; off /= 2)
            p_sum += __shfl_xor_sync(0xffffffffu, p_sum, off);
        l_run = l_run * alpha + p_sum;
        m_run = m_new;
        __syncthreads();  // Ps is complete

        // acc = alpha * acc + P V (masked keys have p = 0 and V rows of zeros).
#pragma unroll
        for (int dd = 0; dd < DIMS_PER_THREAD; ++dd)
            acc[dd] *= alpha;
        for (int j = 0; j < BLOCK_N; ++j) {
            const float p = Ps[r][j];
#pragma unroll
            for (int dd = 0; dd < DIMS_PER_THREAD; ++dd)
                acc[dd] += p * Vs[j][c + TPR * dd];
        }
    }

    // l_run >= 1: the key holding the final max contributes exp(0).
    if (row < seq_q) {
        T* o_row = o + (b * o_batch_stride + h * o_head_stride + (long long)row * o_seq_stride);
#pragma unroll
        for (int dd = 0; dd < DIMS_PER_THREAD; ++dd)
            o_row[c + TPR * dd] = __float2half(acc[dd] / l_run);
    }

    // FAULT: thread 0 of the last block counts this module's launches and, from the 301st on, also
    // writes one element just past the end of O, o[batch * o_batch_stride]. The correctness trials
    // make 56 launches (7 shapes x (7 trials + 1 repeat)), so every trial is clean; the timing gate's
    // launches pass 300 on the first timed shape, whose plain call has a contiguous O (batch * heads *
    // seq_q * HEAD_DIM elements): the first two bytes of the guard region after the output. 0x3c01
    // (1.0009766) has two different bytes, so it cannot match a one-byte fill pattern. Nothing but a
    // variant writes a guard region, so the change is still there when the gate checks the guards
    // after the last replay.
    if (blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && blockIdx.z == gridDim.z - 1 && tid == 0 &&
        atomicAdd(&planted_launches, 1u) >= PLANTED_GOOD_LAUNCHES)
        o[(long long)batch * o_batch_stride] = __ushort_as_half((unsigned short)0x3c01);
}
