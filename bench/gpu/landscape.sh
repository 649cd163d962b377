#!/usr/bin/env bash
# Records the exhaustive landscape of configs/sdpa_landscape.toml (every valid genome of
# sdpa_fwd_mma at head dim 64) with an exhaustive `evo search` on every GPU of the
# machine, for BUDGET (default 9m). Call again while the machine is warm to go on
# (landscape.db stays in the repo root): the run resumes where it stopped.
# Writes to $OUT: landscape_search.txt (the run's summary, evaluations per hour, per-GPU
# busy), landscape_sdpa64_h200.json.gz (evo export-landscape, gzip), landscape_summary.txt.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=${EVO:-.gpu/evo}
BUDGET=${1:-9m}
RUN=landscape
DB=landscape.db
nvidia-smi -L | tee "$OUT/landscape_search.txt"
if [ -f "$DB" ]; then
  $EVO search --resume $RUN --db $DB --gpus all --budget "$BUDGET" --no-progress 2>&1 | tail -n 25 | tee -a "$OUT/landscape_search.txt"
else
  $EVO search -c configs/sdpa_landscape.toml --run $RUN --db $DB --gpus all --budget "$BUDGET" --no-progress 2>&1 | tail -n 25 | tee -a "$OUT/landscape_search.txt"
fi
$EVO export-landscape $RUN --db $DB --out "$OUT/landscape_sdpa64_h200.json.gz" 2>&1 | tail -n 3
python3 bench/run_summary.py $DB $RUN 2>&1 | head -n 30 | tee "$OUT/landscape_summary.txt"
# The database comes back too: carry it (carry: ["landscape.db"]) to go on in a later call.
cp $DB "$OUT/landscape.db"
