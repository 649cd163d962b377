#!/usr/bin/env python3
"""Summarises bench/gpu/fp8_timeline.sh's TRACE lines (clock64 cycles from the traced unit's start).

Consumer events per tile t (overlapped loop): 0 loop top, 2 K and V^T of the tiles acquired,
3 ping-pong turn held, 4 S waited for, 1 tile maximum reduced (FMNMX, quad shuffles), 6 the
exponents' references and alpha set, 5 softmax done (exponentials, row sums), 7 P packed
(iteration end). Producer
events per tile: 0 before waiting for V's load, 1 V loaded, 2 V^T slot free, 3 transposed.
Prints per warpgroup the median cycles of each phase over the steady tiles and the period, and
when the producer's V^T became ready relative to the consumers' acquire.
"""
import statistics
import sys
from collections import defaultdict

cons = defaultdict(dict)
prod = {}
for line in open(sys.argv[1]):
    if not line.startswith("TRACE"):
        continue
    parts = line.split()
    if parts[1] == "c":
        wg = int(parts[2].split("=")[1])
        t = int(parts[3].split("=")[1])
        cons[wg][t] = [int(x) for x in parts[4:]]
    else:
        t = int(parts[2].split("=")[1])
        prod[t] = [int(x) for x in parts[3:]]
if not cons:
    sys.exit("no TRACE lines (did the kernel run? see the log)")
phases = [("acquire K, V^T", 0, 2), ("turn wait", 2, 3), ("issue + S wait", 3, 4), ("tile maximum", 4, 1),
          ("references, alpha", 1, 6), ("exponentials, row sums", 6, 5), ("P V wait, rescale, pack", 5, 7)]
for wg in sorted(cons):
    ts = sorted(cons[wg])
    steady = ts[1:-1] if len(ts) > 4 else ts
    print(f"warpgroup {wg}: {len(ts)} tiles traced, medians over tiles {steady[0]}..{steady[-1]} (cycles)")
    for name, a, b in phases:
        vals = [cons[wg][t][b] - cons[wg][t][a] for t in steady]
        print(f"  {name:26} {statistics.median(vals):8.0f}   (min {min(vals)}, max {max(vals)})")
    period = [cons[wg][t + 1][0] - cons[wg][t][0] for t in steady if t + 1 in cons[wg]]
    print(f"  {'period (loop top to top)':26} {statistics.median(period):8.0f}")
    # How much of this warpgroup's exponential phase overlaps another's (they share the SM
    # sub-partition's MUFU), against the phase's length.
    others = [(w, u) for w in cons if w != wg for u in cons[w]]
    for t in steady:
        a, b = cons[wg][t][6], cons[wg][t][5]
        ov = sum(max(0, min(b, cons[w][u][5]) - max(a, cons[w][u][6])) for w, u in others)
        if t in steady[:6]:
            print(f"    tile {t}: exponentials {b - a} cycles, {ov} of them beside another warpgroup's")
if prod:
    print("producer: median cycles V load wait / V^T slot wait / transpose;"
          " V^T ready minus the consumers' acquire start (negative: ready first)")
    ts = sorted(prod)
    for name, a, b in [("V load wait", 0, 1), ("V^T slot wait", 1, 2), ("transpose", 2, 3)]:
        vals = [prod[t][b] - prod[t][a] for t in ts]
        print(f"  {name:26} {statistics.median(vals):8.0f}   (min {min(vals)}, max {max(vals)})")
    for wg in sorted(cons):
        lead = [prod[t - 1][3] - cons[wg][t][0] for t in sorted(cons[wg]) if t - 1 in prod]
        if lead:
            print(f"  V^T ready - wg {wg} loop top: median {statistics.median(lead):.0f} (max {max(lead)})")
