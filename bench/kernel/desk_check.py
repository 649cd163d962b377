#!/usr/bin/env python3
"""Desk check of sdpa_fwd_wgmma's tile, mask and online-softmax logic, without a GPU.

A transcription (float64, plain Python) of what the kernel's index math and the shared softmax
primitive (templates/common/softmax.cuh) do: the grid of query blocks, the KV tiles a block
walks (causal limit, split-KV ranges, KEY_CTAS: each cluster rank's share and the merge of the
ranks' partials in rank order), per consumer warpgroup its rows or (WG_SPLIT keys) its share of the tiles
and the merge of the warpgroups' results, the unmasked prefix of tiles
(`n_full`) and the per-row key limit of the masked ones (`lim`), per thread its columns
(8 j + col_base + e, col_base = 2 (lane % 4)) with the quad reduction, the LogitScale (FFMA into
exp2, the maximum on raw scores with min for a negative scale, `hide`, the FLT_MIN clamp), the
rescale policy (RESCALE: always / lazy; SPECULATIVE_EXP: the lazy rule taken after the exponentials) and the split-KV combine; the query blocks come from a
transcription of the template's Schedule (SCHEDULER grid: one per CTA; persistent: each CTA's
units, causal as pairs of blocks), checked on its own over many (blocks, heads, batch, CTAs):
every block once, the CTA's walk by `next` (empty units skipped, the last one known), and the
work per CTA of the causal pairs. Each case is compared
with a direct softmax attention over the visible keys. Scores are drawn directly (the matrix
Q K^T), with adversarial rows (all zero, all very negative, one dominant key), maxima rising
along the keys, or maxima jumping from tile to tile.

Usage: bench/kernel/desk_check.py [--quick] [--seed N]   (exit 1 on any mismatch)
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import sys

FLT_MIN = 1.17549435e-38
LOG2E = 1.4426950408889634
INF = math.inf
LAZY_THRESHOLD = 8.0  # the template's RESCALE_LAZY_LOG2


def ex2(x: float) -> float:
    """ex2.approx.ftz: 2^x, 0 for -inf and for results below the smallest normal float."""
    if x == -INF:
        return 0.0
    y = 2.0 ** x if x < 1024 else INF
    return 0.0 if y < FLT_MIN else y


class LogitScale:
    def __init__(self, softmax_scale: float):
        c = softmax_scale * LOG2E
        self.neg = c < 0  # (-0.0 counts as positive, as in the template)
        self.c = -max(abs(c), FLT_MIN) if self.neg else max(abs(c), FLT_MIN)
        self.hide = INF if self.neg else -INF


class Softmax:
    """OnlineSoftmax's state for one thread: rows h = 0, 1."""

    def __init__(self):
        self.row_max = [-INF, -INF]
        self.row_sum = [0.0, 0.0]


def quad_step(threads, scores, sc: LogitScale, visible_of, rescale: str):
    """One tile for the 4 threads of a quad (same rows, columns col_base = 0, 2, 4, 6). Returns
    alpha per thread per row (equal across the quad) and overwrites scores with p."""
    nb = len(scores[0][0]) // 2
    # MASK: masked scores become hide.
    for t in range(4):
        if visible_of[t] is not None:
            for h in range(2):
                for i in range(2 * nb):
                    if not visible_of[t](h, i // 2, i % 2):
                        scores[t][h][i] = sc.hide
    op = min if sc.neg else max
    tile = [op(op(scores[t][h]) for t in range(4)) for h in range(2)]
    alphas = []
    for t in range(4):
        sm = threads[t]
        alpha = [1.0, 1.0]
        ref = [0.0, 0.0]
        for h in range(2):
            m_tile = tile[h] * sc.c
            if rescale == "always":
                m_new = max(sm.row_max[h], m_tile)
                ref[h] = 0.0 if m_new == -INF else m_new
                alpha[h] = ex2(sm.row_max[h] - ref[h])
            else:  # lazy: the maximum in use moves only past the threshold; alpha is then 1
                up = m_tile > sm.row_max[h] + LAZY_THRESHOLD
                m_new = m_tile if up else sm.row_max[h]
                ref[h] = 0.0 if m_new == -INF else m_new
                alpha[h] = ex2(sm.row_max[h] - ref[h]) if up else 1.0
            sm.row_max[h] = m_new
        tile_sum = [0.0, 0.0]
        for h in range(2):
            for i in range(2 * nb):
                p = ex2(scores[t][h][i] * sc.c - ref[h])  # fmaf(s, c, -ref); hide * c = -inf
                scores[t][h][i] = p
                tile_sum[h] += p
        for h in range(2):
            sm.row_sum[h] = sm.row_sum[h] * alpha[h] + tile_sum[h]
        alphas.append(alpha)
    return alphas


def quad_step_speculative(threads, scores, sc: LogitScale):
    """SPECULATIVE_EXP on an unmasked tile (common/softmax.cuh exp_speculative, then settle): the
    exponentials against the maximum in use, then the lazy rule on the largest p; a quad with an
    unusable p (a row's maximum -inf, or an argument past 64) takes the ordinary lazy step on the
    scores computed again. (The kernel decides usability per warpgroup: a quad whose own p are
    usable may still take the ordinary step, which is quad_step.)"""
    saved = [[list(row) for row in th] for th in scores]
    p_max = [[0.0, 0.0] for _ in range(4)]
    sums = [[0.0, 0.0] for _ in range(4)]
    usable = True
    for t in range(4):
        sm = threads[t]
        for h in range(2):
            if sm.row_max[h] == -INF:
                usable = False
                continue
            for i, s in enumerate(scores[t][h]):
                x = s * sc.c - sm.row_max[h]
                p = ex2(x)
                usable = usable and x <= 64
                scores[t][h][i] = p
                p_max[t][h] = max(p_max[t][h], p)
                sums[t][h] += p
    if not usable:
        for t in range(4):
            scores[t] = saved[t]
        return quad_step(threads, scores, sc, [None] * 4, "lazy")
    alphas = []
    for t in range(4):
        sm = threads[t]
        alpha = [1.0, 1.0]
        for h in range(2):
            pm = max(p_max[tq][h] for tq in range(4))  # (the quad's shuffles)
            arg = math.log2(pm) if pm > 0 else -INF
            if arg > LAZY_THRESHOLD:
                sm.row_max[h] += arg
                alpha[h] = ex2(-arg)
            scores[t][h] = [p * alpha[h] for p in scores[t][h]]
            sm.row_sum[h] = sm.row_sum[h] * alpha[h] + sums[t][h] * alpha[h]
        alphas.append(alpha)
    return alphas


def walk(case, sc, rows, t0, n_tiles, n_full, tiles):
    """One warpgroup's quad (rows r_lo, r_lo + 8) over its tiles: the 4 threads' softmax states
    and unnormalized O rows (summed over the quad's columns)."""
    seq_q, seq_kv, causal, bn, rescale, S, V = (
        case[k] for k in ("seq_q", "seq_kv", "causal", "bn", "rescale", "S", "V"))
    d = len(V[0])
    threads = [Softmax() for _ in range(4)]
    acc = [[[0.0] * d for _ in range(2)] for _ in range(4)]
    for t in tiles:
        n0 = (t0 + t) * bn
        scores, visible_of = [], []
        for tq in range(4):
            col_base = 2 * tq
            th = []
            for h in range(2):
                row = rows[h]
                cols = [n0 + 8 * j + col_base + e for j in range(bn // 8) for e in range(2)]
                # Rows past seq_q and keys past seq_kv read zero-filled Q / K tiles.
                th.append([S[row][k] if row < seq_q and k < seq_kv else 0.0 for k in cols])
            scores.append(th)
            if t < n_full:
                visible_of.append(None)
            else:
                lim = [(min(seq_kv, rows[h] + 1) if causal else seq_kv) - n0 - col_base for h in range(2)]
                visible_of.append(lambda h, j, e, lim=lim: 8 * j + e < lim[h])
        if rescale == "speculative" and t < n_full and t != tiles[0]:
            alphas = quad_step_speculative(threads, scores, sc)
        else:
            alphas = quad_step(threads, scores, sc, visible_of, "lazy" if rescale == "speculative" else rescale)
        for tq in range(4):
            for h in range(2):
                # (lazy: a warp whose rows kept their maximum skips this; their alphas are exactly 1)
                acc[tq][h] = [x * alphas[tq][h] for x in acc[tq][h]]
                cols = [n0 + 8 * j + 2 * tq + e for j in range(bn // 8) for e in range(2)]
                for i, k in enumerate(cols):
                    p = scores[tq][h][i]
                    if p != 0.0:
                        vk = V[k] if k < seq_kv else [0.0] * d
                        acc[tq][h] = [x + p * y for x, y in zip(acc[tq][h], vk)]
    # finish: complete sums over the quad; O over the quad's columns.
    m = [threads[0].row_max[h] for h in range(2)]
    l = [sum(threads[tq].row_sum[h] for tq in range(4)) for h in range(2)]
    o = [[sum(acc[tq][h][c] for tq in range(4)) for c in range(d)] for h in range(2)]
    return m, l, o


def merge(parts):
    """WG_SPLIT keys: warpgroup 0 merges (m_w, l_w, O_w) of every warpgroup, per row h."""
    out_m, out_l, out_o = [], [], []
    for h in range(2):
        m = max(p[0][h] for p in parts)
        ref = 0.0 if m == -INF else m
        f = [ex2(p[0][h] - ref) for p in parts]
        out_m.append(m)
        out_l.append(sum(fw * p[1][h] for fw, p in zip(f, parts)))
        out_o.append([sum(fw * p[2][h][c] for fw, p in zip(f, parts)) for c in range(len(parts[0][2][h]))])
    return out_m, out_l, out_o


SCHEDULE_SMS = 132  # the families' PERSISTENT_CTAS, schedule.cuh's SMS


def causal_group_slices(blocks, slices, sms=SCHEDULE_SMS):
    """schedule.cuh's causal_group_slices: the fewest slices a longest-first group spans."""
    work = sms * 5 // 2
    return max(1, min(slices, (work + blocks) // (blocks + 1)))


def schedule_unit(w, cta, ctas, n_mb, heads, batch, persistent, causal, key_ctas=1):
    """Schedule::unit: unit w of CTA `cta` of `ctas` as (m_block, head, bat), None past the
    CTA's last; m_block -1: an empty unit (the missing partner of an odd causal pair). KEY_CTAS:
    grid x is n_mb x key_ctas, a cluster (x // key_ctas) takes the CTA's place (its rank:
    x % key_ctas)."""
    if not persistent:
        # grid (x, y, z) = (n_mb key_ctas, heads, batch): CTA number = x + n_mb key_ctas (y + heads
        # z), the order the hardware starts them in.
        if w > 0:
            return None
        x, yz = cta % (n_mb * key_ctas), cta // (n_mb * key_ctas)
        x //= key_ctas
        slices = heads * batch
        if not causal or n_mb * slices * key_ctas <= SCHEDULE_SMS:
            return ((n_mb - 1 - x) if causal else x, yz % heads, yz // heads)
        cta = x + n_mb * yz  # (the cluster's number)
        # Causal, more than one wave: longest first over groups of slices (causal_longest_first).
        groups = max(1, slices // causal_group_slices(n_mb, slices, SCHEDULE_SMS // key_ctas))
        q = slices // groups
        wide = slices - q * groups
        wide_ctas = wide * (q + 1) * n_mb
        size = q + 1 if cta < wide_ctas else q
        if cta < wide_ctas:
            first = cta // (size * n_mb) * size
        else:
            first = wide * (q + 1) + (cta - wide_ctas) // (size * n_mb) * size
        r = cta - first * n_mb
        level = r // size
        slice_ = first + (r - level * size)
        return (n_mb - 1 - level, slice_ % heads, slice_ // heads)
    item_blocks = 2 if causal else 1
    n_per_head = (n_mb + item_blocks - 1) // item_blocks
    n_items = n_per_head * heads * batch
    item = cta + (w // item_blocks) * ctas
    if item >= n_items:
        return None
    p, bh = item % n_per_head, item // n_per_head
    if item_blocks == 1:
        m = p
    else:
        heavy = n_mb - 1 - p
        m = heavy if w % 2 == 0 else (-1 if p == heavy else p)
    return (m, bh % heads, bh // heads)


def schedule_next(w, *args):
    """Schedule::next: (w_next, unit) of the next non-empty unit after w, or None."""
    for wn in (w + 1, w + 2):
        u = schedule_unit(wn, *args)
        if u is None:
            return None
        if u[0] >= 0:
            return wn, u
    return None


def cta_walk(cta, ctas, n_mb, heads, batch, persistent, causal):
    """The units a CTA runs, as the kernel's loops reach them (unit 0, then next_unit), each
    with the consumers' last_unit flag."""
    args = (cta, ctas, n_mb, heads, batch, persistent, causal)
    u = schedule_unit(0, *args)
    if u is None:  # (the kernel returns at once; the launch makes none: grid x <= work items)
        return []
    assert u[0] >= 0, "unit 0 is never empty"
    out, w = [], 0
    while True:
        nxt = schedule_next(w, *args) if persistent else None
        out.append((u, nxt is None))
        if nxt is None:
            return out
        w, u = nxt


def launch_ctas(n_mb, heads, batch, persistent, causal, sms=132):
    """The family's grid rule (sdpa_fwd_wgmma.toml [launch]): CTAs launched."""
    if not persistent:
        return n_mb * heads * batch
    item_blocks = 2 if causal else 1
    return min(sms, -(-n_mb // item_blocks) * heads * batch)


def check_schedules(rng: random.Random) -> int:
    """Every (m_block, head, bat) exactly once over the CTAs' walks, whatever the CTA count;
    last_unit only on a CTA's final unit; causal pairs: the KV tiles per CTA within one item of
    each other when every item costs the same. Returns the number of failures."""
    bad = 0
    shapes = [(n_mb, h, b) for n_mb in (1, 2, 3, 5, 8, 32, 33) for h in (1, 3, 16) for b in (1, 2, 4)]
    # Causal grids of several longest-first groups, equal and unequal (schedule.cuh).
    shapes += [(22, 16, 4), (86, 16, 1), (6, 15, 7), (8, 19, 5), (22, 13, 5), (64, 13, 5), (11, 37, 3)]
    for n_mb, heads, batch in shapes:
        for persistent, causal in itertools.product((False, True), repeat=2):
            grids = [launch_ctas(n_mb, heads, batch, persistent, causal)]
            if persistent:
                grids += [1, 2, 7, rng.randrange(1, 300)]  # any grid must cover every block
            for ctas in grids:
                seen = []
                for cta in range(ctas):
                    walk_ = cta_walk(cta, ctas, n_mb, heads, batch, persistent, causal)
                    seen += [u for u, _ in walk_]
                    if any(last for _, last in walk_[:-1]) or (walk_ and not walk_[-1][1]):
                        bad += 1
                        print("SCHEDULE last_unit", (n_mb, heads, batch, persistent, causal, ctas, cta))
                want = sorted((m, h, b) for m in range(n_mb) for h in range(heads) for b in range(batch))
                if sorted(seen) != want:
                    bad += 1
                    print("SCHEDULE coverage", (n_mb, heads, batch, persistent, causal, ctas))
                if not persistent:
                    # KEY_CTAS 2 and 4: every (block, rank) once, a cluster's CTAs on one block.
                    for kc in (2, 4):
                        n_x = kc * n_mb
                        got = sorted(schedule_unit(0, c, 0, n_mb, heads, batch, False, causal, kc) + (c % n_x % kc,)
                                     for c in range(n_x * heads * batch))
                        if got != sorted(u + (r,) for u in want for r in range(kc)):
                            bad += 1
                            print("SCHEDULE clusters", (n_mb, heads, batch, causal, kc))
                if persistent and causal and n_mb % 2 == 0:
                    # Causal, seq_q = seq_kv, BLOCK_N = BLOCK_M: block m walks m + 1 tiles, a pair
                    # n_mb + 1; CTAs differ by at most one item.
                    cost = [sum(u[0] + 1 for u, _ in cta_walk(c, ctas, n_mb, heads, batch, True, True))
                            for c in range(ctas)]
                    if max(cost) - min(cost) > n_mb + 1:
                        bad += 1
                        print("SCHEDULE balance", (n_mb, heads, batch, ctas), min(cost), max(cost))
    return bad


def kernel(case) -> dict[int, list[float]]:
    """The kernel's output rows (row -> O[row]) for one case, following the template."""
    seq_q, seq_kv, causal, bn, cw, splits, scale, keys, V = (
        case[k] for k in ("seq_q", "seq_kv", "causal", "bn", "cw", "splits", "scale", "keys", "V"))
    key_ctas = case.get("key_ctas", 1)
    assert key_ctas == 1 or splits == 1, "KEY_CTAS: no split-KV"
    parts = splits if splits > 1 else key_ctas  # the template's KV_PARTS
    d = len(V[0])
    block_m = 64 if keys else 64 * cw
    sc = LogitScale(scale)
    out: dict[int, list[float]] = {}
    partial: dict[int, list[tuple[float, list[float]]]] = {}

    def emit(row, m, l, o):
        if row >= seq_q:
            return
        inv = 1.0 / l if l > 0 else 0.0
        o = [x * inv for x in o]
        if splits > 1:
            partial.setdefault(row, []).append((m + math.log2(l) if l > 0 else -INF, o))
        else:
            assert row not in out, f"row {row} written twice"
            out[row] = o

    n_mb = (seq_q + block_m - 1) // block_m
    persistent = case.get("persistent", False)
    ctas = case.get("ctas") or launch_ctas(n_mb, 1, 1, persistent, causal)
    units = [u for cta in range(ctas) for u, _ in cta_walk(cta, ctas, n_mb, 1, 1, persistent, causal)]
    for m_block, _, _ in units:
        m0 = m_block * block_m
        kv_end = min(seq_kv, m0 + block_m) if causal else seq_kv
        n_all = (kv_end + bn - 1) // bn
        # KEY_CTAS: per (warp, quad row) every rank's warpgroup results, merged after the ranks.
        ranks: dict[tuple[int, int], list[list]] = {}
        for split in range(parts):
            t0, n_tiles = 0, n_all
            if parts > 1:
                per = (n_all + parts - 1) // parts
                t0 = min(n_all, split * per)
                n_tiles = min(n_all - t0, per)
                if splits > 1 and n_tiles <= 0:
                    for r in range(m0, min(m0 + block_m, seq_q)):
                        partial.setdefault(r, []).append((-INF, [0.0] * d))
                    continue
            for warp in range(4):
                for g in range(8):
                    results = []
                    for wg in range(cw):
                        wg_row0 = 0 if keys else wg * 64
                        n_full = seq_kv // bn
                        if causal:
                            n_full = min(n_full, (m0 + wg_row0 + 1) // bn)
                        n_full = min(max(n_full - t0, 0), n_tiles)
                        first, step = (wg, cw) if keys else (0, 1)
                        mine = (n_tiles - first + step - 1) // step
                        tiles = [first + i * step for i in range(mine)]
                        r_lo = m0 + wg_row0 + warp * 16 + g
                        results.append(walk(case, sc, [r_lo, r_lo + 8], t0, n_tiles, n_full, tiles))
                    if key_ctas > 1:
                        ranks.setdefault((warp, g), []).append(results)
                        continue
                    if keys:
                        m, l, o = merge(results)
                        r_lo = m0 + warp * 16 + g
                        for h in range(2):
                            emit(r_lo + 8 * h, m[h], l[h], o[h])
                    else:
                        for wg, (m, l, o) in enumerate(results):
                            r_lo = m0 + wg * 64 + warp * 16 + g
                            for h in range(2):
                                emit(r_lo + 8 * h, m[h], l[h], o[h])
        # The ranks' partials merge in rank order (keys: each rank's warpgroups merged first; rows:
        # warpgroup wg's of each rank). Each rank merges its own columns that way, the same sums.
        for (warp, g), by_rank in ranks.items():
            if keys:
                m, l, o = merge([merge(r) for r in by_rank])
                r_lo = m0 + warp * 16 + g
                for h in range(2):
                    emit(r_lo + 8 * h, m[h], l[h], o[h])
            else:
                for wg in range(cw):
                    m, l, o = merge([by_rank[r][wg] for r in range(key_ctas)])
                    r_lo = m0 + wg * 64 + warp * 16 + g
                    for h in range(2):
                        emit(r_lo + 8 * h, m[h], l[h], o[h])
    if splits > 1:
        for row, parts in partial.items():
            mx = max(l for l, _ in parts)
            w = [0.0 if l == -INF else 2.0 ** (l - mx) for l, _ in parts]
            tot = sum(w)
            out[row] = [sum(wi * o[c] for wi, (_, o) in zip(w, parts)) / tot if tot > 0 else 0.0 for c in range(d)]
    return out


def reference(case) -> dict[int, list[float]]:
    seq_q, seq_kv, causal, scale, S, V = (case[k] for k in ("seq_q", "seq_kv", "causal", "scale", "S", "V"))
    d = len(V[0])
    out = {}
    for r in range(seq_q):
        keys = [k for k in range(seq_kv) if not causal or k <= r]
        x = [scale * S[r][k] for k in keys]
        m = max(x)
        w = [math.exp(v - m) for v in x]
        tot = sum(w)
        out[r] = [sum(wk * V[k][c] for wk, k in zip(w, keys)) / tot for c in range(d)]
    return out


def make_case(rng: random.Random, seq_q, seq_kv, causal, bn, cw, splits, scale, rescale, kind, keys=False) -> dict:
    S = [[rng.gauss(0.0, 3.0) for _ in range(seq_kv)] for _ in range(seq_q)]
    if kind == "adversarial":
        for r in range(seq_q):
            pick = r % 4
            if pick == 0:
                S[r] = [0.0] * seq_kv  # all-zero query row
            elif pick == 1:
                S[r] = [-1e4 + rng.gauss(0.0, 1.0) for _ in range(seq_kv)]  # all very negative
            elif pick == 2:
                S[r][rng.randrange(seq_kv)] = 60.0  # one dominant key
    elif kind == "ramp":
        # Maxima growing from tile to tile (the rescale paths): row r's scores rise along the keys.
        S = [[(0.5 + 0.01 * r) * k + rng.gauss(0.0, 1.0) for k in range(seq_kv)] for r in range(seq_q)]
    elif kind == "steps":
        # Maxima that jump from tile to tile past the lazy threshold (and, at large scales, past
        # the speculative step's overflow bound).
        S = [[12.0 * (k // 16) + rng.gauss(0.0, 1.0) for k in range(seq_kv)] for _ in range(seq_q)]
    V = [[rng.gauss(0.0, 1.0) for _ in range(2)] for _ in range(seq_kv)]
    return dict(seq_q=seq_q, seq_kv=seq_kv, causal=causal, bn=bn, cw=cw, splits=splits, scale=scale,
                rescale=rescale, S=S, V=V, kind=kind, keys=keys)


def compare(case) -> float:
    """Largest absolute difference, relative to the output's scale; NaN counts as infinite."""
    got, want = kernel(case), reference(case)
    assert set(got) == set(range(case["seq_q"])), "rows not written exactly once"
    worst = 0.0
    for r, w in want.items():
        for a, b in zip(got[r], w):
            if math.isnan(a):
                return INF
            worst = max(worst, abs(a - b) / (1.0 + abs(b)))
    return worst


def cases(quick: bool, rng: random.Random):
    seqs = [1, 5, 64, 65, 130, 200] if not quick else [1, 65, 130]
    for seq_q, seq_kv in itertools.product(seqs, seqs):
        for causal, rescale in itertools.product((False, True), ("always", "lazy", "speculative")):
            bn = rng.choice([64, 128, 176, 192])
            cw = rng.choice([1, 2, 3, 4])
            splits = rng.choice([1, 1, 2, 3])
            scale = rng.choice([0.125, -0.37, 0.0, -0.0, 1e-40, 20.0, 1 / math.sqrt(64)])
            kind = rng.choice(["random", "adversarial", "ramp", "steps"])
            keys = 2 <= cw <= 3 and rng.random() < 0.5  # WG_SPLIT keys: two or three warpgroups
            # SCHEDULER persistent (rows, no split), on its own grid or a smaller one; or KEY_CTAS 2
            # or 4 (grid, no split: a cluster of CTAs per block), at BLOCK_N 64 so that ranks past 0
            # get tiles at 65 and 130 keys too.
            persistent = not keys and splits == 1 and rng.random() < 0.5
            cluster = not persistent and splits == 1 and rng.random() < 0.5
            if cluster:
                bn = 64
            case = make_case(rng, seq_q, seq_kv, causal, bn, cw, splits, scale, rescale, kind, keys)
            if persistent:
                case["persistent"] = True
                case["ctas"] = rng.choice([None, 1, 2])
            elif cluster:
                case["key_ctas"] = rng.choice([2, 4])
            yield case
    # KEY_CTAS 4 with every rank holding tiles (4 or 8 of 64 keys) and ranks 2-3 with none (causal,
    # the first block), rows and keys.
    for seq_q, seq_kv in [(65, 256), (130, 500), (200, 450)] if not quick else [(130, 500)]:
        for causal in (False, True):
            keys = rng.random() < 0.5
            cw = rng.choice([2, 3]) if keys else rng.choice([1, 2])
            case = make_case(rng, seq_q, seq_kv, causal, 64, cw, 1, rng.choice([0.125, -0.37]),
                             rng.choice(["always", "lazy", "speculative"]), "random", keys)
            case["key_ctas"] = 4
            yield case


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    bad = n = 0
    for case in cases(a.quick, rng):
        n += 1
        err = compare(case)
        # float64 throughout: only the FLT_MIN clamp of a zero scale perturbs the exponents.
        if not err <= 1e-9:
            bad += 1
            keys = ("seq_q", "seq_kv", "causal", "bn", "cw", "splits", "scale", "rescale", "kind", "keys",
                    "persistent", "ctas", "key_ctas")
            print("MISMATCH", {k: case.get(k) for k in keys}, f"err {err:.3g}")
    print(f"{n} cases, {bad} mismatches")
    sched_bad = check_schedules(rng)
    print(f"schedules: {sched_bad} failures")
    return 1 if bad or sched_bad else 0


if __name__ == "__main__":
    sys.exit(main())
