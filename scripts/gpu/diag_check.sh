#!/usr/bin/env bash
# Diagnosis of a planted-suite run that did not finish: each planted attention kernel checked
# on its own with a deadline, debug logs, and a process snapshot when one runs long.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache
EVO=.gpu/evo
for f in tests/planted/sdpa/*.cu; do
  start=$SECONDS
  ( sleep 35; { echo "--- snapshot $f"; ps -eo pid,ppid,pgid,stat,etime,pcpu,args --forest | grep -v grep | grep -E "evo|cuobjdump|ptxas" ;
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader;
    for p in $(pgrep -f "evo"); do echo "pid $p wchan $(cat /proc/$p/wchan 2>/dev/null)"; done; } >> "$OUT/snapshots.txt" 2>&1 ) &
  snap=$!
  RUST_LOG=debug timeout 45 $EVO check "$f" --problem sdpa_fwd -c tests/planted/sdpa/check.toml > "$OUT/$(basename "$f" .cu).txt" 2>&1
  rc=$?
  kill $snap 2>/dev/null
  echo "$f exit $rc after $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
done
