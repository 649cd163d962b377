#!/usr/bin/env bash
# A variant of several kernels end to end (issue 8), on a GPU machine, about 3 minutes: a short
# `evo search` of the split-KV Hopper family (sdpa_fwd over KV splits into float32 scratch, then
# sdpa_splitkv_combine; TMA tensor maps for LOADER = tma) on configs/sdpa_wgmma_splitkv.toml,
# then bench/gpu/export.sh on that run: the artifact holds both kernels with their own argument
# lists and scratch, evo verify re-runs every gate on its CUBIN, compare_torch.py runs it through
# evo_kernel.py against PyTorch SDPA on the run's shapes.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
DB=/tmp/splitkv.db
rm -f $DB $DB-*
echo "== evo search -c configs/sdpa_wgmma_splitkv.toml (${SPLITKV_SEARCH_BUDGET:-60s})"
.gpu/evo search -c configs/sdpa_wgmma_splitkv.toml --run splitkv --db $DB --budget "${SPLITKV_SEARCH_BUDGET:-60s}" --no-progress 2>&1 | tail -n 12 | tee "$OUT/search.txt"
bash bench/gpu/export.sh $DB splitkv
echo "total ${SECONDS}s"
