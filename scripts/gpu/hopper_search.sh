#!/usr/bin/env bash
# Issue 8, part 1 on an H200 (about 5-6 minutes): PyTorch SDPA (every backend) on the shapes of
# configs/sdpa_wgmma_search.toml (default shapes + (4,16,4096,128), causal and not) as the
# search's imported baseline, then an `evo search` of
# sdpa_fwd_wgmma for HOPPER_SEARCH_BUDGET (default 4m). Writes $OUT/torch_baseline.txt,
# search.txt, search_summary.txt and hopper.db (part 2, scripts/gpu/hopper_export.sh, exports
# from it). HOPPER_RESUME_DB=FILE resumes run `hopper` of that database instead.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=$PWD/.gpu/evo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -n "${HOPPER_RESUME_DB:-}" ]; then
  # HOPPER_RESUME_DB=FILE: resume run `hopper` of that database (its baseline is stored in it).
  echo "== evo search --resume hopper (${HOPPER_SEARCH_BUDGET:-4m}) from $HOPPER_RESUME_DB"
  rm -f "$OUT/hopper.db" "$OUT"/hopper.db-*
  cp "$HOPPER_RESUME_DB" "$OUT/hopper.db"
  $EVO search --resume hopper --db "$OUT/hopper.db" --budget "${HOPPER_SEARCH_BUDGET:-4m}" --no-progress 2>&1 | grep -v " INFO " | tee "$OUT/search.txt"
else
  echo "== PyTorch SDPA on the search's shapes (the baseline file)"
  python3 scripts/torch_sdpa_baseline.py configs/sdpa_wgmma_search.toml --out configs/torch_sdpa_wgmma_baseline.json 2>&1 | tee "$OUT/torch_baseline.txt"
  echo "== evo search (${HOPPER_SEARCH_BUDGET:-4m})"
  rm -f "$OUT/hopper.db" "$OUT"/hopper.db-*
  $EVO search -c configs/sdpa_wgmma_search.toml --run hopper --db "$OUT/hopper.db" --budget "${HOPPER_SEARCH_BUDGET:-4m}" --no-progress 2>&1 | grep -v " INFO " | tee "$OUT/search.txt"
fi
# One self-contained file (the write-ahead log folded in) for export and for carrying back.
python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('pragma wal_checkpoint(TRUNCATE)')" "$OUT/hopper.db"
python3 scripts/run_summary.py "$OUT/hopper.db" hopper 2>&1 | tee "$OUT/search_summary.txt"
# Where each evaluation's time went (the pool logs checks / timing / slowest shape per variant).
grep -h "evaluated job=" "$OUT/evo-logs/hopper.log" 2>/dev/null | tail -n 40 | tee "$OUT/eval_times.txt"
echo "total ${SECONDS}s"
