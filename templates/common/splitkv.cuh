#pragma once
// Split-KV helpers shared by the attention templates (sdpa_fwd_mma, sdpa_fwd_wgmma) for their
// split-KV families (sdpa_fwd_mma_splitkv, sdpa_fwd_wgmma_splitkv; KV_SPLITS = S > 1).
//
// Kernel 1 (sdpa_fwd with two more arguments): CTA (m block, head, batch * S + s) walks KV tiles
// [s * per, min((s + 1) * per, n)) of the n tiles its query rows need (n already clipped by the
// causal limit), per = ceil(n / S), and writes for each of its query rows r < seq_q a float32
// partial result at partial row p = ((s * batch + b) * heads + h) * seq_q + r:
//   o[p * D .. p * D + D): O_s = (sum_j 2^(x_j - m_s) v_j) / l_s, normalized by its own sum,
//   lse[p]: m_s + log2(l_s), in the log2 domain of the kernel's scores x_j = scale * log2(e) * q.k_j;
//   -inf (and O_s = 0) when the split saw no visible key for the row (no tile, or causal rows).
// Kernel 2 (sdpa_splitkv_combine): O = sum_s w_s O_s / sum_s w_s, w_s = 2^(lse_s - max_s lse_s),
// a split with lse_s = -inf weighing 0 (and never read); written as DTYPE through o's strides.
// Needs evo::neg_inf (common/softmax.cuh) and evo::pack2 (common/mma.cuh or common/wgmma.cuh).

namespace evo {

// Where kernel 1 writes its partial results (both null outside the split-KV families).
struct SplitKvOut {
    float* o;    // [S][batch][heads][seq_q][D]
    float* lse;  // [S][batch][heads][seq_q]
};

// Partial row of (split s, batch b, head h, query row r).
__device__ __forceinline__ long long splitkv_row(int s, int batch, int b, int heads, int h, int seq_q, int r) {
    return ((static_cast<long long>(s) * batch + b) * heads + h) * seq_q + r;
}

// lse of a row from its running max (log2 domain) and complete sum; -inf if no key was visible
// (the sum is then 0: a visible key adds 2^0 = 1 for the row's maximum).
__device__ __forceinline__ float splitkv_lse(float row_max, float row_sum) {
    return row_sum > 0.f ? row_max + log2f(row_sum) : neg_inf();
}

// A split without KV tiles: its `rows` partial rows from p0 on get O_s = 0 and lse = -inf
// (scratch starts NaN-poisoned; the combine must see every row written). Threads `tid` of
// `nthreads` share the work. D % 4 == 0; the rows are contiguous from p0.
template <int D>
__device__ __forceinline__ void splitkv_write_empty(const SplitKvOut& out, long long p0, int rows, int tid,
                                                    int nthreads) {
    static_assert(D % 4 == 0, "float4 rows");
    float4* const o4 = reinterpret_cast<float4*>(out.o + p0 * D);
    for (int i = tid; i < rows * (D / 4); i += nthreads) o4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = tid; i < rows; i += nthreads) out.lse[p0 + i] = neg_inf();
}

// The combine: one warp per output row (b, h, r), warp w = blockIdx.x * warps + warp of the
// block over rows w = (b * heads + h) * seq_q + r; lane l owns columns [l * VEC, l * VEC + VEC).
template <class T, int D, int S>
__device__ __forceinline__ void splitkv_combine(const float* __restrict__ o_part, const float* __restrict__ lse_part,
                                                T* __restrict__ o, int batch, int heads, int seq_q,
                                                long long o_batch_stride, long long o_head_stride,
                                                long long o_seq_stride) {
    static_assert(D % 64 == 0 && D <= 256, "VEC = D / 32 columns per lane, an even count up to 8");
    static_assert(S >= 1 && S <= 64, "splits");
    enum : int { VEC = D / 32 };
    const long long rows = static_cast<long long>(batch) * heads * seq_q;
    const long long w = static_cast<long long>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (w >= rows) return;  // (warp-uniform)
    const int lane = threadIdx.x & 31;
    const int r = static_cast<int>(w % seq_q);
    const long long bh = w / seq_q;
    const int h = static_cast<int>(bh % heads);
    const int b = static_cast<int>(bh / heads);

    float lse[S];
    float lse_max = neg_inf();
    bool unwritten = false;  // a NaN lse: kernel 1 never wrote the row (scratch is NaN-poisoned)
#pragma unroll
    for (int s = 0; s < S; ++s) {
        lse[s] = lse_part[s * rows + w];
        lse_max = fmaxf(lse_max, lse[s]);  // (fmaxf drops NaN: hence `unwritten`)
        unwritten |= lse[s] != lse[s];
    }
    float acc[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] = 0.f;
    float wsum = 0.f;
    // Every split -inf (no visible key anywhere: impossible for seq_kv >= 1, causal or not): O = 0,
    // and no (-inf) - (-inf). A NaN lse or O_s (a row kernel 1 never wrote) makes O NaN.
    if (lse_max != neg_inf()) {
#pragma unroll
        for (int s = 0; s < S; ++s) {
            if (lse[s] == neg_inf()) continue;  // weight 0; its O_s is not read
            const float wt = exp2f(lse[s] - lse_max);
            wsum += wt;
            const float* src = o_part + (s * rows + w) * D + lane * VEC;
#pragma unroll
            for (int i = 0; i < VEC; i += 2) {
                const float2 x = *reinterpret_cast<const float2*>(src + i);
                acc[i] += wt * x.x;
                acc[i + 1] += wt * x.y;
            }
        }
    }
    const float inv = unwritten ? __int_as_float(0x7fc00000) : (wsum > 0.f ? 1.f / wsum : 0.f);
    T* const dst = o + (b * o_batch_stride + h * o_head_stride + r * o_seq_stride) + lane * VEC;
    unsigned packed[VEC / 2];
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) packed[i] = pack2<T>(acc[2 * i] * inv, acc[2 * i + 1] * inv);
    if constexpr (VEC == 2) {
        *reinterpret_cast<unsigned*>(dst) = packed[0];
    } else if constexpr (VEC == 4) {
        *reinterpret_cast<uint2*>(dst) = make_uint2(packed[0], packed[1]);
    } else {
#pragma unroll
        for (int i = 0; i < VEC / 2; ++i) *reinterpret_cast<unsigned*>(dst + 2 * i) = packed[i];
    }
}

}  // namespace evo
