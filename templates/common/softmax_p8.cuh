#pragma once
// The online softmax of common/softmax.cuh with P produced directly in e4m3's range: p = 448 *
// 2^(x - m) = 2^(x - (m - log2 448)), the factor folded into the exponent's reference so the
// exponent stays one FFMA (s * c - ref) and no multiply by 448 follows. The row maximum then
// maps to 448 (e4m3's largest finite value; cvt .satfinite clips the rounding of ex2 above it),
// the rest to [0, 448). Used by sdpa_fwd_fp8_ws (include common/softmax.cuh first).
// LAZY_LOG2 > 0 (FlashAttention-4's conditional rescaling, common/softmax.cuh): the maximum in
// use moves only when a tile's exceeds it by more than LAZY_LOG2, and p = 448 2^(x - m - LAZY_LOG2)
// so that p stays at most 448 either way; the row maximum then maps to 448 / 2^LAZY_LOG2 .. 448.
// The price is e4m3's subnormal floor (2^-10, values below round to 0) rising by 2^LAZY_LOG2
// relative to the row's largest weight: keep LAZY_LOG2 small (sdpa_fwd_fp8_ws uses 2).
// EXP2_POLY_EVERY > 0: every EXP2_POLY_EVERY-th 8-column block of the tile (j % EVERY == EVERY
// - 1) takes its exponentials from exp2_poly<2> (common/softmax.cuh; FMA pipes) instead of MUFU.EX2.
// The row sum: SUM true adds the unrounded p (in units of 1/448 of the weights; the epilogue's
// division takes the unit out), as FlashAttention-3 does; SUM false leaves it to the caller
// (e.g. the weights rounded to e4m3, add_weights).

namespace evo {

// log2(448): p = 2^(x - m + LOG2_448).
__device__ __forceinline__ float log2_448() { return 8.807354922057604f; }

template <int NB, int LAZY_LOG2 = 0, int EXP2_POLY_EVERY = 0>
struct OnlineSoftmaxP8 : OnlineSoftmax<NB, 0> {
    using Base = OnlineSoftmax<NB, 0>;
    using Base::row_max;
    using Base::row_sum;

    // As OnlineSoftmax::step, p = 448 * 2^(x - m - LAZY_LOG2); returns whether a row's maximum
    // moved (O needs rescaling; always true without LAZY_LOG2).
    template <bool MASK, bool SUM, class At, class Visible>
    __device__ __forceinline__ bool step448(At&& at, const LogitScale& sc, Visible&& visible, float (&alpha)[2]) {
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
        bool moved = false;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float m_tile = tile_max[h] * sc.c;
            float m_new;
            if constexpr (LAZY_LOG2 > 0) {
                const bool up = m_tile > row_max[h] + float(LAZY_LOG2);
                m_new = up ? m_tile : row_max[h];
                moved = moved || up;
            } else {
                m_new = fmaxf(row_max[h], m_tile);
                moved = true;
            }
            // A row with no visible key so far: exponents against 0 (p and alpha 0, no NaN).
            const float base = m_new == neg_inf() ? 0.f : m_new;
            // (lazy: a row that kept its maximum has alpha exactly 1, no MUFU)
            alpha[h] = LAZY_LOG2 > 0 && m_new == row_max[h] ? 1.f : fast_exp2(row_max[h] - base);
            ref[h] = base - (log2_448() - float(LAZY_LOG2));
            row_max[h] = m_new;
        }
        float tile_sum[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < NB; ++j) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const float x = fmaf(at(j, r), sc.c, -ref[r >> 1]);
                const float p = exp2_by_poly<EXP2_POLY_EVERY>(j) ? exp2_poly<2>(x) : fast_exp2(x);
                at(j, r) = p;
                if constexpr (SUM) tile_sum[r >> 1] += p;
            }
        }
        if constexpr (SUM) {
#pragma unroll
            for (int h = 0; h < 2; ++h) row_sum[h] = row_sum[h] * alpha[h] + tile_sum[h];
        }
        return moved;
    }
};

}  // namespace evo
