#!/usr/bin/env python3
"""A model of the causal grid's makespan under the old CTA order (each slice's query blocks
heaviest first, slice after slice) and under templates/common/schedule.cuh's longest-first order
over groups of slices (desk_check.py's transcription, checked there to cover every block once).
The hardware starts CTAs in order, each on the SM that frees first (132 SMs, one CTA each); a
CTA costs its KV tiles plus one tile's worth per block. The model ignores L2 and the masked
tiles' extra cost; the GPU figures are in docs/RESULTS.md, session 26.

Usage: python3 bench/kernel/causal_order_sim.py
"""
import heapq
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from desk_check import SCHEDULE_SMS, schedule_unit  # noqa: E402


def makespan(batch, heads, seq, block_m, block_n, longest_first):
    n_mb = math.ceil(seq / block_m)
    ctas = n_mb * heads * batch
    costs = []
    for cta in range(ctas):
        if longest_first:
            m = schedule_unit(0, cta, ctas, n_mb, heads, batch, False, True)[0]
        else:
            m = n_mb - 1 - cta % n_mb
        costs.append(math.ceil(min(seq, (m + 1) * block_m) / block_n) + 1)
    sms = [0.0] * SCHEDULE_SMS
    for c in costs:
        heapq.heappush(sms, heapq.heappop(sms) + c)
    return max(sms), sum(costs) / SCHEDULE_SMS


def main():
    print(f"{'(B,H,S) BLOCK_M x BLOCK_N':30} {'old':>7} {'longest':>8} {'mean':>7}  old/longest (KV tiles)")
    for b, h, s, bm, bn in [(4, 16, 4096, 192, 96), (1, 16, 16384, 192, 96), (4, 16, 4096, 192, 128),
                            (2, 8, 2048, 192, 128), (4, 8, 2048, 192, 128), (4, 16, 4096, 128, 128),
                            (1, 8, 512, 192, 128)]:
        old, mean = makespan(b, h, s, bm, bn, False)
        new, _ = makespan(b, h, s, bm, bn, True)
        print(f"{str((b, h, s)) + f' {bm} x {bn}':30} {old:7.0f} {new:8.0f} {mean:7.0f}  {old / new:.3f}")


if __name__ == "__main__":
    main()
