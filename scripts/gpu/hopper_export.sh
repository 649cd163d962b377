#!/usr/bin/env bash
# Issue 8, part 2 on an H200 (about 3 minutes), from the database of scripts/gpu/hopper_search.sh
# (default .evidence/hopper.db, carried back to the machine): evo export of the run's best genome
# and --per-shape, evo verify of both and the tamper check (scripts/gpu/export.sh), then
# scripts/gpu/hopper_compare.sh on each artifact (SDPA comparison on the shapes, causal and
# not, TFLOP/s and fraction of peak, ncu tensor-pipe utilisation), under $OUT/compare_artifact and
# $OUT/compare_artifact_per_shape.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
DB=${1:-.evidence/hopper.db}
cp "$DB" /tmp/hopper.db
SKIP_COMPARE=1 bash scripts/gpu/export.sh /tmp/hopper.db hopper
for a in artifact artifact_per_shape; do
  echo "== $a"
  OUT=$OUT/compare_$a bash scripts/gpu/hopper_compare.sh "$OUT/$a"
done
echo "total ${SECONDS}s"
