#!/usr/bin/env bash
# Records the exhaustive landscape of configs/gemm_landscape.toml (all 336 valid genomes of
# gemm_mma) on one GPU, for BUDGET (default 9m), then exports it and runs the search-quality
# benchmark on it. Call again while the machine is warm to go on (gemm_landscape.db stays in
# the repo root; carry it to a later call): the run resumes where it stopped. Session 8
# recorded 104 of the 336 on an H100 in 500 s: `gunzip -c bench/data/gemm_landscape_h100_partial.db.gz
# > gemm_landscape.db` goes on from there.
# Writes to $OUT: landscape_gemm_search.txt (the run's summary), landscape_gemm_h100.json
# (evo export-landscape; named for the GPU it ran on), landscape_gemm_quality.txt.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=${EVO:-.gpu/evo}
BUDGET=${1:-9m}
RUN=landscape-gemm
DB=gemm_landscape.db
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | awk '{print tolower($2)}')
FILE="$OUT/landscape_gemm_${GPU:-gpu}.json"
nvidia-smi -L | tee "$OUT/landscape_gemm_search.txt"
if [ -f "$DB" ]; then
  $EVO search --resume $RUN --db $DB --gpus 0 --budget "$BUDGET" --no-progress 2>&1 | tail -n 25 | tee -a "$OUT/landscape_gemm_search.txt"
else
  $EVO search -c configs/gemm_landscape.toml --strategy exhaustive --run $RUN --db $DB --gpus 0 --budget "$BUDGET" --no-progress 2>&1 | tail -n 25 | tee -a "$OUT/landscape_gemm_search.txt"
fi
$EVO export-landscape $RUN --db $DB --out "$FILE" 2>&1 | tail -n 3
for pop in 16 8; do
  $EVO search-quality -c configs/gemm_landscape.toml --landscape "$FILE" --seeds 100 --population $pop 2>&1
  $EVO search-quality -c configs/gemm_landscape.toml --landscape "$FILE" --seeds 100 --population $pop --reverse 2>&1
done | tee "$OUT/landscape_gemm_quality.txt"
cp $DB "$OUT/gemm_landscape.db"
