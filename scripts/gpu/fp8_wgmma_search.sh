#!/usr/bin/env bash
# Issue 8, FP8 with wgmma on an H100/H200 (about 6 minutes): PyTorch SDPA fp16 on the shapes of
# configs/sdpa_fp8_wgmma_search.toml (the imported baseline; PyTorch has no FP8 SDPA), an evo
# search of sdpa_fwd_fp8_wgmma for FP8_WGMMA_SEARCH_BUDGET (default 4m), its summary (per shape:
# the baseline and the best time), and the best genome's FP8 errors beside the fp16 family's on
# the same shapes. Writes $OUT/torch_baseline.txt, search.txt, search_summary.txt, fp8_wgmma.db.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=$PWD/.gpu/evo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== [${SECONDS}s] PyTorch SDPA fp16 on the search's shapes (the baseline file)"
python3 scripts/torch_sdpa_baseline.py configs/sdpa_fp8_wgmma_search.toml --out configs/torch_sdpa_fp8_wgmma_baseline.json 2>&1 | tee "$OUT/torch_baseline.txt"
echo "== [${SECONDS}s] evo search (${FP8_WGMMA_SEARCH_BUDGET:-4m})"
rm -f "$OUT/fp8_wgmma.db" "$OUT"/fp8_wgmma.db-*
$EVO search -c configs/sdpa_fp8_wgmma_search.toml --run fp8wgmma --db "$OUT/fp8_wgmma.db" --budget "${FP8_WGMMA_SEARCH_BUDGET:-4m}" --no-progress 2>&1 | grep -v " INFO " | tail -n 30 | tee "$OUT/search.txt"
python3 scripts/run_summary.py "$OUT/fp8_wgmma.db" fp8wgmma 2>&1 | tee "$OUT/search_summary.txt"
echo "total ${SECONDS}s"
