#!/usr/bin/env python3
"""Prints the fastest genome of a recorded landscape (evo export-landscape JSON, or .json.gz): among the
evaluated genomes timed on at least MIN_SHAPES shapes (edge shapes carry no time), the one
with the smallest geometric mean of its median times.

    python3 bench/landscape_best.py tests/data/landscape_sdpa_fwd_mma_h200.json [MIN_SHAPES]
"""
import gzip
import json
import math
import sys


def main() -> None:
    path = sys.argv[1]
    min_shapes = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    points = json.load((gzip.open if path.endswith(".gz") else open)(path, "rt"))["points"]

    def timed(point):
        return [s["median_us"] for s in point["shapes"] if s.get("median_us")]

    candidates = [(g, timed(p)) for g, p in points.items()
                  if p["status"] == "evaluated" and len(timed(p)) >= min_shapes]
    if not candidates:
        sys.exit(f"{path}: no evaluated genome timed on {min_shapes} shapes")
    best = min(candidates, key=lambda c: sum(math.log(t) for t in c[1]))
    print(best[0])


if __name__ == "__main__":
    main()
