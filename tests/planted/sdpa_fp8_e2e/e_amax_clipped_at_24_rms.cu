// evo-expect: incorrect
// evo-launch: grid = ceil_div(SEQ_Q, 16), HEADS, BATCH; block = 128; shared_bytes = 0
// evo-why: each slice's amax clipped at 24 times the slice's RMS (an outlier-robust scale): exact wherever no single value stands out, an outlier of +-40 among unit normals clipped to about 25
//
// Planted-fault suite for sdpa_fwd_fp8_e2e (tests/planted/sdpa_fp8_e2e/README.md): f16 q, k, v in,
// computed through e4m3 by the quantization rule (crates/evo-kernels/src/fp8.rs): per (batch, head)
// slice amax = max |x|, inv = 448 / amax, code = e4m3_satfinite(x * inv), descale = amax / 448 (an
// all-zero slice: inv = descale = 1). Each block computes its (batch, head)'s three amaxes itself
// (every block of a head reads the head's q, k and v once more: slow and simple), then runs the plain
// tiled kernel of tests/planted/sdpa_fp8/j_correct.cu on the codes it makes while loading the tiles.
// HEAD_DIM = 64, non-causal, f16 (check.toml's spec).
#include <cuda_fp16.h>
#include <cuda_fp8.h>
typedef __half T;
typedef unsigned char fp8;  // e4m3 code

#define HEAD_DIM 64
#define BLOCK_M 16                    // query rows per block
#define BLOCK_N 64                    // keys per K/V tile
#define TPR 8                         // threads per query row
#define THREADS (BLOCK_M * TPR)       // 128
#define KEYS_PER_THREAD (BLOCK_N / TPR)   // 8 scores per thread per tile
#define DIMS_PER_THREAD (HEAD_DIM / TPR)  // 8 outputs per thread

#define NEG_INF __int_as_float(0xff800000)

// The value of x as the rule encodes it (the code decoded; exact in f32), before the descale.
__device__ __forceinline__ float coded(float x, float inv) {
    const fp8 c = __nv_cvt_float_to_fp8(x * inv, __NV_SATFINITE, __NV_E4M3);
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3)));
}

// max |x| over one (batch, head) slice of `rows` rows (NaN ignored, as fmaxf does), by the whole block.
__device__ float slice_amax(const T* base, int rows, long long seq_stride, float* partial) {
    float m = 0.0f, ss = 0.0f;
    for (int i = threadIdx.x; i < rows * HEAD_DIM; i += THREADS) {
        const float x = __half2float(base[(long long)(i / HEAD_DIM) * seq_stride + i % HEAD_DIM]);
        m = fmaxf(m, fabsf(x));
        ss += x * x;
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
        ss += __shfl_xor_sync(0xffffffffu, ss, off);
    }
    if (threadIdx.x % 32 == 0) {
        partial[threadIdx.x / 32] = m;
        partial[THREADS / 32 + threadIdx.x / 32] = ss;
    }
    __syncthreads();
    m = fmaxf(fmaxf(partial[0], partial[1]), fmaxf(partial[2], partial[3]));
    ss = partial[4] + partial[5] + partial[6] + partial[7];
    __syncthreads();  // partial is reused by the next slice
    // FAULT: the scale ignores whatever stands more than 24 RMS above the slice (a robust amax).
    // Unit normals, scaled heads, one-hot and adversarial rows stay below 24 RMS, so the amax is
    // the rule's; the zeros trial's outlier of +-40 among unit normals (RMS about 1) is clipped.
    return fminf(m, 24.0f * sqrtf(ss / (float)(rows * HEAD_DIM)));
}

// The rule's encoding multiplier and descale of a slice with this amax.
__device__ __forceinline__ void rule_scales(float amax, float* inv, float* descale) {
    const bool scaled = amax > 0.0f && isfinite(amax);
    *inv = scaled ? 448.0f / amax : 1.0f;
    *descale = scaled ? amax / 448.0f : 1.0f;
}

extern "C" __global__ void __launch_bounds__(THREADS)
sdpa_fwd_fp8(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
         int batch, int heads, int seq_q, int seq_kv,
         long long q_batch_stride, long long q_head_stride, long long q_seq_stride,
         long long k_batch_stride, long long k_head_stride, long long k_seq_stride,
         long long v_batch_stride, long long v_head_stride, long long v_seq_stride,
         long long o_batch_stride, long long o_head_stride, long long o_seq_stride,
         float softmax_scale)
{
    // f32 tiles; the +1 columns spread the rows r (and keys j) of one warp over different banks.
    __shared__ float Qs[BLOCK_M][HEAD_DIM + 1];  // Qs[r][d] = code of Q[q0 + r][d]
    __shared__ float Ks[BLOCK_N][HEAD_DIM + 1];  // Ks[j][d] = code of K[k0 + j][d]
    __shared__ float Vs[BLOCK_N][HEAD_DIM];      // Vs[j][d] = code of V[k0 + j][d]
    __shared__ float Ps[BLOCK_M][BLOCK_N + 1];   // Ps[r][j] = exp(S[r][j] - running max of row r)
    __shared__ float partial[2 * (THREADS / 32)];  // per warp: max |x|, then sum of x^2

    const int tid = threadIdx.x;
    const int r = tid / TPR;  // query row within the tile
    const int c = tid % TPR;  // keys c + TPR*jj, dims c + TPR*dd
    const int q0 = blockIdx.x * BLOCK_M;
    const int h = blockIdx.y, b = blockIdx.z;
    const int row = q0 + r;   // query row of this thread (valid iff row < seq_q)

    const T* q_bh = q + (b * q_batch_stride + h * q_head_stride);
    const T* k_bh = k + (b * k_batch_stride + h * k_head_stride);
    const T* v_bh = v + (b * v_batch_stride + h * v_head_stride);
    // The rule's scales of this (batch, head): q and k descales fold into the score scale, v's
    // into the output.
    float q_inv, q_descale, k_inv, k_descale, v_inv, v_descale;
    rule_scales(slice_amax(q_bh, seq_q, q_seq_stride, partial), &q_inv, &q_descale);
    rule_scales(slice_amax(k_bh, seq_kv, k_seq_stride, partial), &k_inv, &k_descale);
    rule_scales(slice_amax(v_bh, seq_kv, v_seq_stride, partial), &v_inv, &v_descale);
    const float qk_scale = softmax_scale * q_descale * k_descale;
    const float vd = v_descale;

    for (int i = tid; i < BLOCK_M * HEAD_DIM; i += THREADS) {
        const int rr = i / HEAD_DIM, d = i % HEAD_DIM;
        Qs[rr][d] = (q0 + rr < seq_q) ? coded(__half2float(q_bh[(long long)(q0 + rr) * q_seq_stride + d]), q_inv) : 0.0f;
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
            Ks[j][d] = in ? coded(__half2float(k_bh[(long long)(k0 + j) * k_seq_stride + d]), k_inv) : 0.0f;
            Vs[j][d] = in ? coded(__half2float(v_bh[(long long)(k0 + j) * v_seq_stride + d]), v_inv) : 0.0f;
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
            s[jj] = (k0 + j < seq_kv) ? qk_scale * dot : NEG_INF;
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
            o_row[c + TPR * dd] = __float2half(acc[dd] * vd / l_run);
    }
}
