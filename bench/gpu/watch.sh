#!/usr/bin/env bash
# Background watcher for a long GPU call: every PERIOD seconds (default 30) the evo
# processes (tree, CPU, kernel wait channel of each thread) and the GPU's utilization,
# appended to $1. Usage: bench/gpu/watch.sh $OUT/watch.txt & ... ; kill %1
f=$1; period=${2:-30}
while sleep "$period"; do
  {
    echo "--- ${SECONDS}s"
    ps -eo pid,ppid,pgid,stat,etime,pcpu,args --forest | grep -v grep | grep -E "evo|cuobjdump|python"
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
    for p in $(pgrep -f "\.gpu/evo"); do
      echo "pid $p threads: $(for t in /proc/$p/task/*; do printf '%s:%s ' "$(cat $t/comm 2>/dev/null)" "$(cat $t/wchan 2>/dev/null)"; done)"
    done
  } >> "$f" 2>&1
done
