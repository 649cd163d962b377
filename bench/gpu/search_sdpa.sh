#!/usr/bin/env bash
# An evo search against PyTorch SDPA on a GPU machine (about 5-6 minutes with the defaults):
# PyTorch SDPA (every backend) timed on the shapes of SEARCH_CONFIG (default
# configs/sdpa_wgmma_search.toml) into the file its `[search] baseline = "import:FILE"` names,
# then `evo search` of it for SEARCH_BUDGET (default 4m) as run SEARCH_RUN (default `search`),
# its summary, and where each evaluation's time went. SEARCH_RESUME_DB=FILE resumes run
# SEARCH_RUN of that database instead (its baseline is stored in it).
# Writes $OUT/torch_baseline.txt, search.txt, search_summary.txt, eval_times.txt and search.db
# (export from it: EXPORT_DB=.../search.db EXPORT_RUN=search bench/run.sh export).
#   SEARCH_CONFIG=configs/sdpa_fp8_wgmma_search.toml bench/run.sh search_sdpa   (FP8 wgmma)
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=$PWD/.gpu/evo
CONFIG=${SEARCH_CONFIG:-configs/sdpa_wgmma_search.toml}
RUN=${SEARCH_RUN:-search}
BUDGET=${SEARCH_BUDGET:-4m}
DB=$OUT/search.db
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
rm -f "$DB" "$DB"-*
if [ -n "${SEARCH_RESUME_DB:-}" ]; then
  echo "== evo search --resume $RUN ($BUDGET) from $SEARCH_RESUME_DB"
  cp "$SEARCH_RESUME_DB" "$DB"
  $EVO search --resume "$RUN" --db "$DB" --budget "$BUDGET" --no-progress 2>&1 | grep -v " INFO " | tee "$OUT/search.txt"
else
  baseline=$(sed -n 's/^baseline = "import:\(.*\)"$/\1/p' "$CONFIG")
  echo "== PyTorch SDPA on the shapes of $CONFIG (the baseline file $baseline)"
  python3 scripts/torch_sdpa_baseline.py "$CONFIG" --out "$(dirname "$CONFIG")/$baseline" 2>&1 | tee "$OUT/torch_baseline.txt"
  echo "== evo search -c $CONFIG ($BUDGET)"
  $EVO search -c "$CONFIG" --run "$RUN" --db "$DB" --budget "$BUDGET" --no-progress 2>&1 | grep -v " INFO " | tee "$OUT/search.txt"
fi
# One self-contained file (the write-ahead log folded in) for export and for carrying back.
python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('pragma wal_checkpoint(TRUNCATE)')" "$DB"
python3 bench/run_summary.py "$DB" "$RUN" 2>&1 | tee "$OUT/search_summary.txt"
# Where each evaluation's time went (the pool logs checks / timing / slowest shape per variant).
grep -h "evaluated job=" "$OUT/evo-logs/$RUN.log" 2>/dev/null | tail -n 40 | tee "$OUT/eval_times.txt"
echo "total ${SECONDS}s"
