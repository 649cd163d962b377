#!/usr/bin/env python3
"""Desk check of sdpa_fwd_fp8_ws (templates/sdpa_fwd_fp8/sdpa_fwd_fp8_ws.cu.tera), without a GPU.

Two parts, each a plain-Python transcription of the template's index math compared with a direct
computation (exit 1 on any mismatch):

1. The V transpose and P's register order, byte-exact, for HEAD_DIM 64/128 and every BLOCK_N of
   the family: V as TMA leaves it (BLOCK_N key rows of HEAD_DIM bytes, swizzle span HEAD_DIM),
   the producer warps' transpose_v (per lane: ldmatrix.x4.trans row addresses, the transposed
   fragments, the prmt byte selects, stmatrix.x4 row addresses; common/fp8_transpose.cuh), the
   V^T tile read back as wgmma's K-major B operand (VT_SW-byte column blocks, k32 step kk at 32
   bytes into block kk / (VT_SW / 32), issue_pv), and P's A registers built from the S
   accumulator by pack_p. Checks: every V^T byte written once, B[d][c] = V[32 (c / 32) +
   perm_key(c % 32)][d], A[row][c] = S[row][32 (c / 32) + perm_key(c % 32)], so A B^T = P V.
2. The attention arithmetic on ragged shapes: the grid, per consumer warpgroup its rows, the KV
   tiles (causal top-left limit), the unmasked prefix n_full and the per-row limit lim of the
   masked tiles (per thread column base), the LogitScale (descales, softmax_scale and log2 e in
   c; min for a negative scale; hide), p = ex2(s c - (m - log2 448)) in float32 (common/
   softmax_p8.cuh), P rounded to e4m3 (satfinite), V as e4m3 codes, the row sums (PSUM f32:
   unrounded p; e4m3: the rounded weights; mma: the rounded weights per tile, taken into the
   running sums after the next tile's rescale as sdpa_fwd_fp8_ws's overlapped loop does), RESCALE
   lazy (threshold 2, p = 448 2^(x - m - 2)), EXP2_POLY (exp2_poly on every 4th / 2nd 8-column
   block), O = acc v_descale / l rounded to f16. Compared with
   (a) attention on the dequantized inputs under the problem's tolerance (sdpa_fp8.rs: rtol
   0.02, atol 0.08 max |ref|, relative L2 0.06) and (b) attention on the original inputs under
   the end-to-end bound (atol 0.5 max |ref|, relative L2 0.25); the worst errors of each variant
   are printed.

Usage: bench/kernel/desk_check_fp8.py [--quick] [--seed N]
"""

from __future__ import annotations

import argparse
import math
import random
import struct
import sys

FLT_MIN = 1.17549435e-38
LOG2E = 1.4426950408889634
INF = math.inf
BLOCK_NS = [64, 96, 128, 160, 192, 224, 256]


def f32(x: float) -> float:
    if math.isinf(x) or math.isnan(x):
        return x
    return struct.unpack("f", struct.pack("f", x))[0]


def f16(x: float) -> float:
    try:
        return struct.unpack("e", struct.pack("e", x))[0]
    except OverflowError:
        return math.copysign(INF, x)


LOG2_448 = f32(8.807354922057604)


def round_e4m3(x: float) -> float:
    """cvt.rn.satfinite.e4m3: nearest, ties to even, |x| > 448 clipped to 448."""
    a = abs(x)
    if a == 0.0:
        return 0.0 * x
    if a >= 448.0:
        return math.copysign(448.0, x)
    e = max(math.floor(math.log2(a)), -6)
    step = 2.0 ** (e - 3)
    q = a / step
    r = math.floor(q)
    frac = q - r
    if frac > 0.5 or (frac == 0.5 and r % 2 == 1):
        r += 1
    return math.copysign(min(r * step, 448.0), x)


def ex2(x: float) -> float:
    """ex2.approx.ftz.f32 (modelled exact, then float32, flushed below FLT_MIN)."""
    if x == -INF:
        return 0.0
    y = f32(2.0 ** x) if x < 128 else INF
    return 0.0 if y < FLT_MIN else y


def swz_offset(sw: int, rows: int, r: int, b: int) -> int:
    """common/wgmma.cuh swz_offset<SW>(rows, r, b)."""
    block, in_row = b // sw, b % sw
    phase = (r // (128 // sw)) % (sw // 16)
    return block * rows * sw + r * sw + (((in_row >> 4) ^ phase) << 4) + (in_row & 15)


def perm_key(c: int) -> int:
    half, t, i = c & 16, (c >> 2) & 3, c & 3
    return half + 2 * t + (i & 1) + ((i >> 1) << 3)


def prmt(a: int, b: int, sel: int) -> int:
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    return sum(src[(sel >> (4 * i)) & 7] << (8 * i) for i in range(4))


def vt_sw(bn: int) -> int:
    return 128 if bn % 128 == 0 else 64 if bn % 64 == 0 else 32


# ---- part 1: transpose and register order ---------------------------------------------------------

def check_transpose(d: int, bn: int, rng: random.Random) -> list[str]:
    errors = []
    sw, vsw = d, vt_sw(bn)
    V = [[rng.randrange(256) for _ in range(d)] for _ in range(bn)]
    sv = [None] * (bn * d)
    for k in range(bn):
        for b in range(d):
            sv[swz_offset(sw, bn, k, b)] = V[k][b]
    assert None not in sv
    svt = [None] * (bn * d)
    units = (bn // 32) * (d // 16)
    for warp in range(4):
        for u in range(warp, units, 4):
            kg, dc = u // (d // 16), u % (d // 16)
            src = [0] * 32
            dst = [0] * 32
            for lane in range(32):
                m, rr = lane >> 3, lane & 7
                src[lane] = swz_offset(sw, bn, 32 * kg + 8 * m + rr, 16 * dc)
                dst[lane] = swz_offset(vsw, d, 16 * dc + 2 * rr + (m & 1), 32 * kg + 16 * (m >> 1))
                if src[lane] % 16 or dst[lane] % 16:
                    errors.append(f"d{d} n{bn}: unaligned ldmatrix/stmatrix row address")
            # ldmatrix.x4.trans: matrix m's rows at src[8m .. 8m+7], 16 bytes = 8 b16 elements;
            # lane l holds elements (row 2 (l % 4), column l / 4) low and (row 2 (l % 4) + 1, same) high.
            regs = []
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                r = []
                for m in range(4):
                    row0 = src[8 * m + 2 * t]
                    row1 = src[8 * m + 2 * t + 1]
                    r.append(sv[row0 + 2 * g] | (sv[row0 + 2 * g + 1] << 8) | (sv[row1 + 2 * g] << 16)
                             | (sv[row1 + 2 * g + 1] << 24))
                w = [prmt(r[0], r[1], 0x6420), prmt(r[0], r[1], 0x7531), prmt(r[2], r[3], 0x6420),
                     prmt(r[2], r[3], 0x7531)]
                regs.append(w)
            # stmatrix.x4: matrix m's row g at dst[8m + g]; lane l writes its word m to bytes
            # 4 (l % 4) .. of row l / 4.
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for m in range(4):
                    base = dst[8 * m + g] + 4 * t
                    for i in range(4):
                        if svt[base + i] is not None:
                            errors.append(f"d{d} n{bn}: V^T byte {base + i} written twice")
                        svt[base + i] = (regs[lane][m] >> (8 * i)) & 0xFF
    if None in svt:
        errors.append(f"d{d} n{bn}: {svt.count(None)} V^T bytes never written")
        return errors
    # wgmma B (K-major, VT_SW swizzle, SBO 8 VT_SW): row n = d, k byte kb of step kk at descriptor
    # offset block * D * VT_SW + within, the hardware swizzling address bits 4-6 by bits 7-9.
    for kk in range(bn // 32):
        block, within = kk // (vsw // 32), (kk % (vsw // 32)) * 32
        for n in range(d):
            for kb in range(32):
                lin = block * d * vsw + n * vsw + within + kb  # the unswizzled address
                addr = (lin & ~0x70) | ((((lin >> 4) & 7) ^ ((lin >> 7) & 7)) << 4) if vsw == 128 else \
                    (lin & ~0x30) | ((((lin >> 4) & 3) ^ ((lin >> 7) & 3)) << 4) if vsw == 64 else \
                    (lin & ~0x10) | ((((lin >> 4) & 1) ^ ((lin >> 7) & 1)) << 4)
                c = 32 * kk + kb
                want = V[32 * kk + perm_key(kb)][n]
                if svt[addr] != want:
                    errors.append(f"d{d} n{bn}: B[{n}][{c}] = {svt[addr]}, want V[{32 * kk + perm_key(kb)}][{n}] = {want}")
                    return errors
    # P's A registers from the S accumulator (pack_p): thread (w, lane), float f = 4 j + r of S is
    # S[16 w + g + 8 (r >> 1)][8 j + 2 t + (r & 1)]; register r of step kk takes floats
    # i + {0, 1, 4, 5}, i = 16 kk + 8 (r >> 1) + 2 (r & 1), as A[16 w + g + 8 (r & 1)][4 t + 16 (r >> 1) + 0..3].
    for w in range(4):
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for kk in range(bn // 32):
                for r in range(4):
                    i = 16 * kk + 8 * (r >> 1) + 2 * (r & 1)
                    for byte, f in enumerate([i, i + 1, i + 4, i + 5]):
                        j, rf = f // 4, f % 4
                        s_row, s_col = 16 * w + g + 8 * (rf >> 1), 8 * j + 2 * t + (rf & 1)
                        a_row, a_col = 16 * w + g + 8 * (r & 1), 4 * t + 16 * (r >> 1) + byte
                        if s_row != a_row or s_col != 32 * kk + perm_key(a_col):
                            errors.append(f"n{bn}: A[{a_row}][{32 * kk + a_col}] takes S[{s_row}][{s_col}]")
                            return errors
    return errors


# ---- part 2: attention on ragged shapes -------------------------------------------------------------

def quantize(x: list[list[float]]) -> tuple[list[list[float]], float]:
    """fp8.rs's rule for one (batch, head) slice: codes (decoded) and the descale."""
    amax = f32(max((abs(v) for row in x for v in row), default=0.0))
    if amax > 0 and amax < INF:
        inv, de = f32(448.0 / amax), f32(amax / 448.0)
    else:
        inv, de = 1.0, 1.0
    return [[round_e4m3(f32(v * inv)) for v in row] for row in x], de


def make_inputs(rng: random.Random, seq_q: int, seq_kv: int, d: int, kind: str):
    def normal(rows):
        return [[f16(rng.gauss(0, 1)) for _ in range(d)] for _ in range(rows)]
    q, k, v = normal(seq_q), normal(seq_kv), normal(seq_kv)
    if kind == "zero_head":
        q = [[0.0] * d for _ in range(seq_q)]
        k = [[0.0] * d for _ in range(seq_kv)]
        v = [[0.0] * d for _ in range(seq_kv)]
    elif kind == "zero_rows":  # every other query row all zero: uniform weights
        q = [row if i % 2 else [0.0] * d for i, row in enumerate(q)]
    elif kind == "peaked":  # q = 4 k of some key: one dominant key per row
        q = [[f16(4 * x) for x in k[rng.randrange(seq_kv)]] for _ in range(seq_q)]
    elif kind == "large_v":
        v = [[f16(x * 1024.0) for x in row] for row in v]
    return q, k, v


def attention(q, k, v, scale, causal):
    out = []
    for i, qi in enumerate(q):
        lim = min(len(k), i + 1) if causal else len(k)
        s = [scale * sum(a * b for a, b in zip(qi, k[j])) for j in range(lim)]
        m = max(s)
        w = [math.exp(x - m) for x in s]
        tot = sum(w)
        out.append([sum(w[j] * v[j][c] for j in range(lim)) / tot for c in range(len(v[0]))])
    return out


# common/softmax.cuh exp2_poly's coefficients of f, f^2, ... per degree (exact at f = 0 and 1).
EXP2_POLY_COEFFS = {2: (f32(1.0 - 0.3397660), f32(0.3397660)),
                    3: (f32(0.6955562), f32(0.2258003), f32(0.07864345))}


def exp2_poly(x: float, degree: int = 2) -> float:
    """common/softmax.cuh exp2_poly<degree> in float32: clamp, floor by the round-down add of
    1.5 2^23, the polynomial of the fraction by Horner (one FFMA per degree, rounded once each), n
    added to the exponent field."""
    x = max(x, -126.0)
    n = math.floor(x)  # (x + 1.5 2^23 rounded down) - 1.5 2^23: exact, ulp 1 there
    f = f32(x - n)
    c = EXP2_POLY_COEFFS[degree]
    p = c[-1]
    for a in reversed(c[:-1]):
        p = f32(p * f + a)
    p = f32(p * f + 1.0)
    return f32(p * 2.0 ** n)


def kernel(qc, kc, vc, qd, kd, vd, scale, causal, bn, cw, psum, lazy=0, poly_every=0):
    """sdpa_fwd_fp8_ws's arithmetic (consumer side) for one (batch, head). lazy: RESCALE lazy's
    threshold (log2; 0 = always); poly_every: EXP2_POLY's block period (0 = off)."""
    seq_q, seq_kv, d = len(qc), len(kc), len(qc[0])
    block_m = 64 * cw
    # LogitScale::of_log2(softmax_scale * log2 e * q_descale * k_descale)
    c = f32(f32(f32(scale * f32(LOG2E)) * qd) * kd)
    neg = c < 0
    mag = max(abs(c), FLT_MIN)
    c = -mag if neg else mag
    hide = INF if neg else -INF
    out = {}
    grid = (seq_q + block_m - 1) // block_m
    for bx in range(grid):
        m_block = grid - 1 - bx if causal else bx
        m0 = m_block * block_m
        kv_end = min(seq_kv, m0 + block_m) if causal else seq_kv
        n_tiles = (kv_end + bn - 1) // bn
        for wg in range(cw):
            n_full = seq_kv // bn
            if causal:
                n_full = min(n_full, (m0 + wg * 64 + 1) // bn)
            n_full = min(n_full, n_tiles)
            for row in range(m0 + wg * 64, m0 + wg * 64 + 64):
                qrow = qc[row] if row < seq_q else [0.0] * d  # TMA: rows past seq_q read zero
                row_max, row_sum = -INF, 0.0
                acc = [0.0] * d
                pending = 0.0  # PSUM mma: the previous tile's sum, taken after its P V
                for t in range(n_tiles):
                    n0 = t * bn
                    cols = []  # (key, raw score, 8-column block j) in the quad's threads' order
                    for tq in range(4):
                        col_base = 2 * tq
                        lim = (min(seq_kv, row + 1) if causal else seq_kv) - n0 - col_base
                        for j in range(bn // 8):
                            for e in range(2):
                                key = n0 + 8 * j + col_base + e
                                krow = kc[key] if key < seq_kv else [0.0] * d
                                s = f32(sum(a * b for a, b in zip(qrow, krow)))  # exact: small codes sums
                                if t >= n_full and not (8 * j + e < lim):
                                    s = hide
                                cols.append((key, s, j))
                    vals = [s for _, s, _ in cols]
                    tile_max = min(vals) if neg else max(vals)
                    m_tile = f32(tile_max * c) if not math.isinf(tile_max) else (-INF if (tile_max > 0) == neg else INF)
                    if lazy:
                        up = m_tile > f32(row_max + lazy)
                        m_new = m_tile if up else row_max
                    else:
                        m_new = max(row_max, m_tile)
                    base = 0.0 if m_new == -INF else m_new
                    if lazy and m_new == row_max:
                        alpha = 1.0
                    else:
                        alpha = ex2(f32(row_max - base)) if row_max != -INF else 0.0
                    ref = f32(base - f32(LOG2_448 - lazy))
                    row_max = m_new
                    tile_sum = 0.0
                    if psum == "mma":  # take_sums(alpha, alpha) once P_{j-1} V is waited for
                        row_sum = f32(row_sum * alpha + f32(pending * alpha))
                    acc = [f32(x * alpha) for x in acc]
                    for key, s, j in cols:
                        x = f32(s * c - ref) if not math.isinf(s) else -INF  # one FFMA
                        if poly_every and j % poly_every == poly_every - 1:
                            p = exp2_poly(x)
                        else:
                            p = ex2(x)
                        pk = round_e4m3(p)
                        tile_sum = f32(tile_sum + (p if psum == "f32" else pk))
                        if pk != 0.0:
                            vrow = vc[key] if key < seq_kv else [0.0] * d
                            acc = [f32(a + pk * b) for a, b in zip(acc, vrow)]
                    if psum == "mma":
                        pending = tile_sum
                    else:
                        row_sum = f32(f32(row_sum * alpha) + tile_sum)
                if psum == "mma":
                    row_sum = f32(row_sum + pending)  # the last P V's sums
                if row < seq_q:
                    inv = f32(vd / row_sum) if row_sum > 0 else 0.0
                    out[row] = [f16(f32(a * inv)) for a in acc]
    return [out[i] for i in range(seq_q)]


def errors_against(got, ref, atol_of_max, rtol):
    max_ref = max(abs(x) for row in ref for x in row)
    atol = 1e-5 + atol_of_max * max_ref
    bad, err2, ref2 = 0, 0.0, 0.0
    for g_row, r_row in zip(got, ref):
        for g, r in zip(g_row, r_row):
            e = abs(g - r)
            bad += (not math.isfinite(g)) or e > atol + rtol * abs(r)
            err2 += e * e
            ref2 += r * r
    rel = math.sqrt(err2 / ref2) if ref2 > 0 else math.sqrt(err2)
    return bad, rel


def check_attention(rng: random.Random, quick: bool) -> tuple[list[str], dict]:
    errors, worst = [], {}
    d = 16
    seqs = [(1, 1), (5, 300), (300, 5), (65, 129), (129, 65), (200, 200), (300, 300)]
    if quick:
        seqs = [(5, 130), (130, 5), (65, 65), (200, 200)]
    kinds = ["random", "zero_rows", "peaked", "zero_head", "large_v"]
    scales = [None, 0.0, -0.0, -0.7, 3.0, 1e-30]
    plan = []
    for seq_q, seq_kv in seqs:
        for causal in (False, True):
            # Every BLOCK_N and consumer count in turn (the causal diagonal needs small tiles).
            n = len(plan)
            plan.append((seq_q, seq_kv, causal, BLOCK_NS[n % len(BLOCK_NS)], 1 + n % 3, kinds[n % len(kinds)],
                         scales[n % len(scales)]))
    # Causal blocks of two or three warpgroups over several small tiles (kv_end, n_full per
    # warpgroup, the diagonal inside a tile).
    plan += [(300, 300, True, 64, 3, "random", None), (257, 250, True, 160, 2, "peaked", -0.7)]
    for seq_q, seq_kv, causal, bn, cw, kind, scale in plan:
        if True:
            if scale is None:
                scale = 1.0 / math.sqrt(d)
            q, k, v = make_inputs(rng, seq_q, seq_kv, d, kind)
            (qc, qd), (kc, kd), (vc, vd) = quantize(q), quantize(k), quantize(v)
            deq = lambda c, s: [[x * s for x in row] for row in c]
            ref = attention(deq(qc, qd), deq(kc, kd), deq(vc, vd), f32(scale), causal)
            e2e = attention(q, k, v, f32(scale), causal)
            # The input quantization's own end-to-end error: a large scale on short rows can
            # exceed the bound without any kernel (then the bound is not the kernel's to meet).
            floor_bad, floor_rel = errors_against(ref, e2e, 0.5, 0.0)
            for psum, lazy, poly in (("f32", 0, 0), ("e4m3", 0, 0), ("mma", 2, 0), ("f32", 2, 0), ("f32", 2, 4),
                                     ("f32", 0, 2)):
                got = kernel(qc, kc, vc, qd, kd, vd, f32(scale), causal, bn, cw, psum, lazy, poly)
                bad, rel = errors_against(got, ref, 0.08, 0.02)
                bad2, rel2 = errors_against(got, e2e, 0.5, 0.0)
                variant = f"PSUM={psum} RESCALE={'lazy' if lazy else 'always'} EXP2_POLY={ {0: 'off', 4: 'quarter', 2: 'half'}[poly]}"
                case = f"seq_q={seq_q} seq_kv={seq_kv} causal={causal} BLOCK_N={bn} CONSUMER_WG={cw} {kind} scale={scale} {variant}"
                w = worst.setdefault(variant, [0.0, 0.0, ""])
                if rel > w[0]:
                    w[0], w[2] = rel, case
                w[1] = max(w[1], rel2)
                if bad or rel > 0.06:
                    errors.append(f"{case}: {bad} elements out of tolerance, rel L2 {rel:.4f} (dequantized reference)")
                if (bad2 or rel2 > 0.25) and not (floor_bad or floor_rel > 0.25):
                    errors.append(f"{case}: {bad2} elements out of the end-to-end bound, rel L2 {rel2:.4f}")
    return errors, worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=19)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    errors = []
    for d in (64, 128):
        for bn in BLOCK_NS:
            errors += check_transpose(d, bn, rng)
    print(f"transpose and register order: {len(errors)} errors over HEAD_DIM 64/128 x BLOCK_N {BLOCK_NS}")
    att_errors, worst = check_attention(rng, args.quick)
    for variant, (rel, rel2, case) in sorted(worst.items()):
        print(f"{variant}: worst rel L2 {rel:.4f} vs dequantized reference ({case}); worst end-to-end {rel2:.4f}")
    # exp2_poly itself against 2^x over the range the kernel feeds it.
    xs = [-30 + i / 997 for i in range(40 * 997)]
    # Degree 2 feeds e4m3 P (half step 2^-4), degree 3 16-bit P (sdpa_fwd_wgmma; fp16's 2^-11).
    for degree, bound in ((2, 3e-3), (3, 1.2e-4)):
        poly_err = max(abs(exp2_poly(x, degree) / 2.0 ** x - 1) for x in xs)
        print(f"exp2_poly<{degree}>: largest relative error {poly_err:.2e} on [-30, 10]")
        if poly_err > bound or exp2_poly(-INF, degree) > 2.0 ** -125:
            errors.append(f"exp2_poly<{degree}>: relative error {poly_err} (bound {bound}) or -inf not tiny")
    errors += att_errors
    for e in errors[:20]:
        print("MISMATCH", e)
    print("ok" if not errors else f"{len(errors)} mismatches")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
