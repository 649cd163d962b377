#pragma once
// The online softmax of common/softmax.cuh with P produced directly in e4m3's range: p = 448 *
// 2^(x - m) = 2^(x - (m - log2 448)), the factor folded into the exponent's reference so the
// exponent stays one FFMA (s * c - ref) and no multiply by 448 follows. The row maximum then
// maps to 448 (e4m3's largest finite value; cvt .satfinite clips the rounding of ex2 above it),
// the rest to [0, 448). Used by sdpa_fwd_fp8_ws (include common/softmax.cuh first).
// The row sum: SUM true adds the unrounded p (in units of 1/448 of the weights; the epilogue's
// division takes the unit out), as FlashAttention-3 does; SUM false leaves it to the caller
// (e.g. the weights rounded to e4m3, add_weights).

namespace evo {

// log2(448): p = 2^(x - m + LOG2_448).
__device__ __forceinline__ float log2_448() { return 8.807354922057604f; }

template <int NB>
struct OnlineSoftmaxP8 : OnlineSoftmax<NB, 0> {
    using Base = OnlineSoftmax<NB, 0>;
    using Base::row_max;
    using Base::row_sum;

    // As OnlineSoftmax::step (no lazy rescale: p must stay at most 448), p = 448 * 2^(x - m).
    template <bool MASK, bool SUM, class At, class Visible>
    __device__ __forceinline__ void step448(At&& at, const LogitScale& sc, Visible&& visible, float (&alpha)[2]) {
        if constexpr (MASK) {
#pragma unroll
            for (int j = 0; j < NB; ++j) {
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    if (!visible(r >> 1, j, r & 1)) at(j, r) = sc.hide;
                }
            }
        }
        float tile_max[2];
        if (sc.neg) {
            Base::reduce_quad([](float a, float b) { return fminf(a, b); }, at, tile_max);
        } else {
            Base::reduce_quad([](float a, float b) { return fmaxf(a, b); }, at, tile_max);
        }
        float ref[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float m_new = fmaxf(row_max[h], tile_max[h] * sc.c);
            // A row with no visible key so far: exponents against 0 (p and alpha 0, no NaN).
            const float base = m_new == neg_inf() ? 0.f : m_new;
            alpha[h] = fast_exp2(row_max[h] - base);
            ref[h] = base - log2_448();
            row_max[h] = m_new;
        }
        float tile_sum[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < NB; ++j) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const float p = fast_exp2(fmaf(at(j, r), sc.c, -ref[r >> 1]));
                at(j, r) = p;
                if constexpr (SUM) tile_sum[r >> 1] += p;
            }
        }
        if constexpr (SUM) {
#pragma unroll
            for (int h = 0; h < 2; ++h) row_sum[h] = row_sum[h] * alpha[h] + tile_sum[h];
        }
    }
};

}  // namespace evo
