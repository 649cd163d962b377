#!/usr/bin/env bash
# A real search on a GPU machine, killed with SIGKILL and resumed (two calls while the
# machine stays warm; population.db stays in the repo root between them).
#   bench/gpu/search.sh start SECONDS   PyTorch baseline, then `evo search`, SIGKILLed after SECONDS
#   bench/gpu/search.sh resume BUDGET   `evo search --resume` for BUDGET (e.g. 3m), then a summary
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=.gpu/evo
RUN=sdpa-night
case "$1" in
  start)
    python3 scripts/torch_sdpa_baseline.py configs/sdpa_search.toml --out configs/torch_sdpa_baseline.json 2>&1 | tee "$OUT/torch.txt"
    rm -f population.db population.db-*
    timeout -s KILL "$2" $EVO search -c configs/sdpa_search.toml --run $RUN --no-progress 2>&1 | tail -n 40 > "$OUT/search1.txt"
    echo "search exit: ${PIPESTATUS[0]} (137 = killed by SIGKILL)" | tee -a "$OUT/search1.txt"
    python3 bench/run_summary.py population.db $RUN 2>&1 | tee "$OUT/summary1.txt"
    cp evo-logs/$RUN.log "$OUT/run1.log" 2>/dev/null ;;
  resume)
    $EVO search --resume $RUN --budget "$2" --no-progress 2>&1 | tail -n 40 | tee "$OUT/search2.txt"
    python3 bench/run_summary.py population.db $RUN 2>&1 | tee "$OUT/summary2.txt"
    $EVO export-landscape $RUN --out "$OUT/landscape_sdpa.json" 2>&1
    cp population.db "$OUT/population.db"
    cp evo-logs/$RUN.log "$OUT/run.log" 2>/dev/null ;;
esac
