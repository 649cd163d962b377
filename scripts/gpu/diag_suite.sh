#!/usr/bin/env bash
# Diagnosis of the planted attention suite as one `evo check` (each file alone finishes):
# the suite under a deadline, with process snapshots and thread backtraces while it runs.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache
EVO=.gpu/evo
snapshot() {
  echo "--- snapshot at ${SECONDS}s"
  ps -eo pid,ppid,pgid,stat,etime,pcpu,args --forest | grep -v grep | grep -E "evo|cuobjdump|ptxas"
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
  for p in $(pgrep -f "\.gpu/evo"); do
    echo "== pid $p: $(tr '\0' ' ' < /proc/$p/cmdline)"
    if command -v gdb >/dev/null; then
      timeout 20 gdb -p "$p" -batch -ex "thread apply all bt 12" 2>/dev/null | grep -E "^Thread|^#" | head -120
    else
      for t in /proc/$p/task/*; do echo "task $(basename $t) $(cat $t/wchan 2>/dev/null) $(cat $t/comm)"; done
    fi
  done
}
( sleep 70; snapshot; sleep 40; snapshot ) > "$OUT/snapshots.txt" 2>&1 &
RUST_LOG=debug timeout 150 $EVO check tests/planted/sdpa/*.cu --problem sdpa_fwd -c tests/planted/sdpa/check.toml > "$OUT/suite.txt" 2> "$OUT/suite.err"
echo "suite exit $?"
wait
