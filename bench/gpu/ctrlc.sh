#!/usr/bin/env bash
# Ctrl-C on a GPU search: SIGINT after SECONDS must finish the evaluations in flight,
# save, mark the run interrupted and exit 130; `--resume` then carries on.
#   bench/gpu/ctrlc.sh [SECONDS [RESUME_BUDGET]]   (default 120 60s, as bench/run.sh ctrlc runs it)
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
rm -f ctrlc.db ctrlc.db-*
timeout -s INT "${1:-120}" .gpu/evo search -c configs/sdpa.toml --run ctrlc --db ctrlc.db --no-progress > "$OUT/ctrlc1.txt" 2>&1
echo "exit after SIGINT: $?" | tee -a "$OUT/ctrlc1.txt"
tail -n 8 "$OUT/ctrlc1.txt"
python3 bench/run_summary.py ctrlc.db ctrlc 2>&1 | head -12 | tee "$OUT/ctrlc_summary1.txt"
.gpu/evo search --resume ctrlc --db ctrlc.db --budget "${2:-60s}" --no-progress 2>&1 | tail -n 6 | tee "$OUT/ctrlc2.txt"
python3 bench/run_summary.py ctrlc.db ctrlc 2>&1 | head -14 | tee "$OUT/ctrlc_summary2.txt"
