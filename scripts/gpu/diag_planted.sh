#!/usr/bin/env bash
# Diagnosis of a planted attention suite that does not finish: each kernel checked on its own
# under a 45 s deadline (summary.txt, one log per file), then the whole suite as one `evo check`
# under 150 s (suite.txt), with scripts/gpu/watch.sh sampling the processes and the GPU every
# 30 s (watch.txt). Run as `bash scripts/gpu/evidence.sh diag_planted`.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache
EVO=.gpu/evo
CHECK=(--problem sdpa_fwd -c tests/planted/sdpa/check.toml)
bash scripts/gpu/watch.sh "$OUT/watch.txt" 30 &
watcher=$!
for f in tests/planted/sdpa/*.cu; do
  start=$SECONDS
  RUST_LOG=debug timeout 45 $EVO check "$f" "${CHECK[@]}" > "$OUT/$(basename "$f" .cu).txt" 2>&1
  echo "$f exit $? after $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
done
start=$SECONDS
RUST_LOG=debug timeout 150 $EVO check tests/planted/sdpa/*.cu "${CHECK[@]}" > "$OUT/suite.txt" 2>&1
echo "suite exit $? after $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
kill $watcher
