#pragma once
// The online softmax of the attention families (sdpa_fwd_mma, sdpa_fwd_wgmma, sdpa_fwd_fp8_mma,
// sdpa_fwd_fp8_wgmma; FlashAttention-2's running maximum and sum, in the log2 domain) and its
// small helpers: -inf, a flush-to-zero exp2, a value the optimizer cannot see through.
//
// Fragments: the scores S of one KV tile and the output O live in MMA accumulator fragments. A
// thread holds two rows of its warp's 16-row slice (h = 0, 1: rows g and g + 8, g = lane / 4) and
// per 8-column block j two columns (e = 0, 1: columns 8 j + 2 t + e, t = lane % 4): float
// r = 2 h + e of block j. That is mma.sync m16n8's C fragment (one block per n8 tile) and, block
// after block, wgmma's accumulator (common/wgmma.cuh: d[4 j + r]). The four lanes of a quad hold
// the other columns of the same rows. A family passes a fragment as `at(j, r)`, a callable
// returning float&, so that one code serves its own array shapes (fully unrolled, no copies).

namespace evo {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// 2^x (MUFU.EX2, flush-to-zero): ex2(-inf) = +0, large negative arguments give 0.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// 2^x for x <= 2^7 on the FMA pipes instead of MUFU.EX2 (FlashAttention-4's software exp2, for
// the part of a tile's exponentials that EXP2_POLY_EVERY moves off the MUFU unit): x clamped at
// -126 (so -inf and the masked scores give 2^-126, which P's 16-bit and 8-bit types round to 0),
// n = floor(x) by a round-down add of 1.5 2^23 (its low mantissa bits are then n), f = x - n in
// [0, 1), 2^f by a polynomial exact at f = 0 and 1 (Horner, one FFMA per degree), and n added
// to the exponent field by an integer multiply-add. Largest relative error on [0, 1) (coefficients
// fitted for the smallest, bench/kernel/desk_check_fp8.py checks degree 2): degree 2 2.7e-3,
// under e4m3's 2^-4 half step; degree 3 1.1e-4, under fp16's 2^-11.
template <int DEGREE>
__device__ __forceinline__ float exp2_poly(float x) {
    static_assert(DEGREE == 2 || DEGREE == 3, "exp2_poly: degree 2 (e4m3 P) or 3 (16-bit P)");
    x = fmaxf(x, -126.f);
    const float shifted = __fadd_rd(x, 12582912.f);
    const float f = x - (shifted - 12582912.f);
    float p;
    if constexpr (DEGREE == 2) {
        p = fmaf(fmaf(0.3397660f, f, 1.f - 0.3397660f), f, 1.f);
    } else {
        p = fmaf(fmaf(fmaf(0.07864345f, f, 0.2258003f), f, 0.6955562f), f, 1.f);
    }
    return __int_as_float(__float_as_int(p) + (__float_as_int(shifted) << 23));
}

// Whether the exponentials of 8-column block j come from exp2_poly: every EVERY-th block
// (j % EVERY == EVERY - 1); none for EVERY = 0.
template <int EVERY>
__device__ __forceinline__ constexpr bool exp2_by_poly(int j) {
    return EVERY > 0 && j % (EVERY > 0 ? EVERY : 1) == EVERY - 1;
}

// The value of x, which the compiler cannot see through (no strength reduction across it).
__device__ __forceinline__ int opaque(int x) {
    int y;
    asm volatile("mov.b32 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

// Row h of a fragment of NB column blocks times f[h] (O rescaled by alpha).
template <int NB, class At>
__device__ __forceinline__ void scale_rows(At&& at, const float (&f)[2]) {
#pragma unroll
    for (int j = 0; j < NB; ++j) {
#pragma unroll
        for (int r = 0; r < 4; ++r) at(j, r) *= f[r >> 1];
    }
}

// The scale of the scores in the exponent: x = s * c, c = softmax_scale * log2(e) (log2 domain),
// any finite softmax_scale. The maximum of x is c * (c < 0 ? min s : max s), so a tile's maximum
// is taken on the raw scores (one FMNMX each) and the exponent is one FFMA, 2^(s * c - m). A
// masked score is set to `hide` (-inf, or +inf for c < 0), which neither maximum nor minimum
// picks and which c maps to -inf. |c| is kept at least FLT_MIN so that c * hide is -inf (not
// NaN) for softmax_scale = 0: the exponents then differ from 0 by at most |s| * 1.2e-38.
struct LogitScale {
    float c;
    float hide;
    bool neg;

    __device__ __forceinline__ static LogitScale of(float softmax_scale) {
        return of_log2(softmax_scale * 1.4426950408889634f);
    }
    // From c itself (e.g. with FP8 descales folded in).
    __device__ __forceinline__ static LogitScale of_log2(float c) {
        LogitScale sc;
        // The sign from the comparison, not from c's sign bit: -0 counts as positive, so that
        // hide (-inf) times c (+FLT_MIN) is -inf.
        sc.neg = c < 0.f;
        const float mag = fmaxf(fabsf(c), 1.17549435e-38f);
        sc.c = sc.neg ? -mag : mag;
        sc.hide = sc.neg ? -neg_inf() : neg_inf();
        return sc;
    }
};

// The online softmax state of a thread's two rows over a KV sequence walked tile by tile.
// Per tile of NB column blocks (`step`): the scores s (visible(h, j, e) false: masked, e.g. a key
// past seq_kv or, causal, after the row) give x = s * c (LogitScale), the running maximum m grows
// to max(m, max x), and s is overwritten in place with p = 2^(x - m). alpha[h] = 2^(m_old - m_new)
// rescales what was accumulated with the old maximum (O, and the running sum here). A row with no
// visible key so far keeps m = -inf; its exponents are then taken against 0, so no (-inf) - (-inf)
// = NaN appears and its p and alpha are 0.
// LAZY_LOG2 > 0 (FlashAttention-4's conditional rescaling): m is the maximum actually used, and
// it only moves when a tile's maximum exceeds it by more than LAZY_LOG2; otherwise alpha is
// exactly 1 and p = 2^(x - m) stays at most 2^LAZY_LOG2. The result is the same (O and the sum
// use the same m); a warp whose rows all kept m can skip rescaling O (step returns whether any
// of this thread's rows moved). Not for P rounded to FP8 as 448 p (needs p <= 1).
// EXP2_POLY_EVERY > 0: every EXP2_POLY_EVERY-th 8-column block's exponentials by exp2_poly<3>
// (FMA pipes; at head dim 64 the MUFU unit's exponentials take as long as the tile's MMAs).
template <int NB, int LAZY_LOG2 = 0, int EXP2_POLY_EVERY = 0>
struct OnlineSoftmax {
    float row_max[2];  // running maximum of x (LAZY_LOG2: the one used), -inf before any visible key
    float row_sum[2];  // this thread's share of the running sum (quad-reduced by finish)

    __device__ __forceinline__ void init() {
        row_max[0] = row_max[1] = neg_inf();
        row_sum[0] = row_sum[1] = 0.f;
    }

    // One tile (above); returns whether a row's maximum moved. MASK false: no key of the tile is
    // masked for these rows (visible is not called; the unmasked tiles of the main loop). SUM: the
    // tile's p are added to the running sum; otherwise the caller adds the weights P V really uses
    // (e.g. P rounded to FP8) with add_weights.
    template <bool MASK, bool SUM, class At, class Visible>
    __device__ __forceinline__ bool step(At&& at, const LogitScale& sc, Visible&& visible, float (&alpha)[2]) {
        if constexpr (MASK) {
#pragma unroll
            for (int j = 0; j < NB; ++j) {
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    if (!visible(r >> 1, j, r & 1)) at(j, r) = sc.hide;
                }
            }
        }
        // The tile's maximum of x over the quad: of the raw scores, then scaled once.
        float tile_max[2];
        if (sc.neg) {
            reduce_quad([](float a, float b) { return fminf(a, b); }, at, tile_max);
        } else {
            reduce_quad([](float a, float b) { return fmaxf(a, b); }, at, tile_max);
        }
        float ref[2];
        bool moved = false;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float m_tile = tile_max[h] * sc.c;
            if constexpr (LAZY_LOG2 > 0) {
                const bool up = m_tile > row_max[h] + float(LAZY_LOG2);
                const float m_new = up ? m_tile : row_max[h];
                ref[h] = m_new == neg_inf() ? 0.f : m_new;
                alpha[h] = up ? fast_exp2(row_max[h] - ref[h]) : 1.f;
                row_max[h] = m_new;
                moved = moved || up;
            } else {
                const float m_new = fmaxf(row_max[h], m_tile);
                ref[h] = m_new == neg_inf() ? 0.f : m_new;
                alpha[h] = fast_exp2(row_max[h] - ref[h]);
                row_max[h] = m_new;
                moved = true;
            }
        }
        float tile_sum[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < NB; ++j) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const float x = fmaf(at(j, r), sc.c, -ref[r >> 1]);
                const float p = exp2_by_poly<EXP2_POLY_EVERY>(j) ? exp2_poly<3>(x) : fast_exp2(x);
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

    // The speculative step (SPECULATIVE_EXP), for a tile whose rows all have a finite maximum m in
    // use (the lazy rescale's: LAZY_LOG2 > 0), in two halves. exp_speculative: the tile's
    // exponentials taken against m before the tile's own maximum is known, p = 2^(x - m) in place
    // of s and added to tile_sum, the largest p (and, for the polynomial's blocks, the largest
    // argument) tracked alongside (FMNMX between the MUFU.EX2, off the chain of FMNMX that
    // otherwise gates every exponential). Returns whether every p is usable: m finite and no
    // argument near overflow (p = inf, or a polynomial's exponent field wrapped). The caller
    // decides that for every thread that shares the tile's MMA (a warpgroup): if any p is not, s
    // is lost and nothing else has changed, so the caller computes S again and takes the ordinary
    // step. The vote reads every p and the sums, so that ptxas computes them before it instead of
    // sinking them behind it.
    template <class At>
    __device__ __forceinline__ bool exp_speculative(At&& at, const LogitScale& sc, float (&tile_sum)[2],
                                                    float (&p_max)[2], float (&arg_max)[2]) const {
        static_assert(LAZY_LOG2 > 0, "the speculative step needs the lazy rescale");
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            p_max[h] = 0.f;
            arg_max[h] = neg_inf();
            tile_sum[h] = 0.f;
        }
#pragma unroll
        for (int j = 0; j < NB; ++j) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int h = r >> 1;
                const float x = fmaf(at(j, r), sc.c, -row_max[h]);
                float p;
                if (exp2_by_poly<EXP2_POLY_EVERY>(j)) {
                    arg_max[h] = fmaxf(arg_max[h], x);
                    p = exp2_poly<3>(x);
                } else {
                    p = fast_exp2(x);
                    p_max[h] = fmaxf(p_max[h], p);
                }
                at(j, r) = p;
                tile_sum[h] += p;
            }
        }
        // (bitwise &: a short-circuit && becomes a branch, and the rest of the check behind it)
        return (row_max[0] != neg_inf()) & (row_max[1] != neg_inf()) & (fmaxf(p_max[0], p_max[1]) <= 0x1p64f) &
               (fmaxf(arg_max[0], arg_max[1]) <= 64.f) & (tile_sum[0] + tile_sum[1] <= 0x1p96f);
    }

    // settle, once every p of the warpgroup is usable: the lazy rule on the tile's maximum, whose
    // argument (relative to m) is that of the largest p. A row that keeps m keeps its p exactly as
    // the ordinary step computes them (the same reference, the same FFMA), alpha 1. A row whose
    // maximum exceeds m + LAZY_LOG2 moves m to it as the ordinary step does, and its p, taken
    // against the old m, are multiplied by the same alpha as O and the sum: the ordinary step's p
    // up to a rounding. Returns whether a row of this thread moved. Warp-uniform (every lane of a
    // row's quad takes the row's maximum).
    template <class At>
    __device__ __forceinline__ bool settle(At&& at, const float (&tile_sum)[2], const float (&p_max)[2],
                                           const float (&arg_max)[2], float (&alpha)[2]) {
        const float limit = float(LAZY_LOG2), p_limit = float(1 << LAZY_LOG2);
        const bool over = (p_max[0] > p_limit) | (p_max[1] > p_limit) | (arg_max[0] > limit) | (arg_max[1] > limit);
        alpha[0] = alpha[1] = 1.f;
        if (!__any_sync(0xffffffffu, over)) {
#pragma unroll
            for (int h = 0; h < 2; ++h) row_sum[h] += tile_sum[h];
            return false;
        }
        bool moved = false;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float pm = p_max[h], am = arg_max[h];
            pm = fmaxf(pm, __shfl_xor_sync(0xffffffffu, pm, 1));
            pm = fmaxf(pm, __shfl_xor_sync(0xffffffffu, pm, 2));
            am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 1));
            am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 2));
            float lg;
            asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(lg) : "f"(pm));  // (-inf for pm = 0)
            const float arg = fmaxf(am, lg);
            if (arg > limit) {
                row_max[h] += arg;
                alpha[h] = fast_exp2(-arg);
                moved = true;
            }
        }
        scale_rows<NB>(at, alpha);
#pragma unroll
        for (int h = 0; h < 2; ++h) row_sum[h] = row_sum[h] * alpha[h] + tile_sum[h] * alpha[h];
        return moved;
    }

    // op (fmaxf or fminf) over this thread's columns of each row, then over the quad.
    template <class Op, class At>
    __device__ __forceinline__ static void reduce_quad(Op op, At& at, float (&out)[2]) {
        out[0] = at(0, 0);
        out[1] = at(0, 2);
#pragma unroll
        for (int j = 0; j < NB; ++j) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                if (j > 0 || (r & 1)) out[r >> 1] = op(out[r >> 1], at(j, r));
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            out[h] = op(out[h], __shfl_xor_sync(0xffffffffu, out[h], 1));
            out[h] = op(out[h], __shfl_xor_sync(0xffffffffu, out[h], 2));
        }
    }

    // After a step without SUM: the running sums rescaled by the tile's alpha plus the weights
    // w[h] of this thread's columns of the tile.
    __device__ __forceinline__ void add_weights(const float (&alpha)[2], const float (&w)[2]) {
#pragma unroll
        for (int h = 0; h < 2; ++h) row_sum[h] = row_sum[h] * alpha[h] + w[h];
    }

    // After steps without SUM whose weights the tensor cores summed (PSUM mma: acc_l, P times
    // columns of ones, every column of a row holding its sum: floats 0 and 2): the running sums
    // times alpha plus the tile's sums times beta (alpha when the tile's weights predate alpha's
    // rescale, else 1). row_sum then holds whole sums (finish<true>: no quad reduction).
    __device__ __forceinline__ void add_tile_sums(const float (&alpha)[2], const float (&acc_l)[4],
                                                  const float (&beta)[2]) {
        const float w[2] = {acc_l[0] * beta[0], acc_l[2] * beta[1]};
        add_weights(alpha, w);
    }

    // After the last tile: row_sum becomes the row's complete sum (over the quad; WHOLE: each
    // thread's already is, as add_tile_sums leaves it), and inv[h] = numer / sum, 0 for a row
    // that saw no visible key.
    template <bool WHOLE = false>
    __device__ __forceinline__ void finish(float (&inv)[2], float numer = 1.f) {
        if constexpr (!WHOLE) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
                row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) inv[h] = row_sum[h] > 0.f ? numer / row_sum[h] : 0.f;
    }
};

}  // namespace evo
