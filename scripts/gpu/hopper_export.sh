#!/usr/bin/env bash
# Issue 8, part 2 on an H200 (about 4 minutes), from the database of scripts/gpu/hopper_search.sh
# (default .evidence/hopper.db, carried back to the machine): evo export of the run's best genome
# and --per-shape, evo verify of both, the tamper check, scripts/compare_torch.py (every SDPA
# backend, float64 errors, CUDA-graph timing) on the shapes, causal and not, the table
# with TFLOP/s and fraction of peak (scripts/hopper_table.py), and Nsight Compute's tensor-pipe
# utilisation at (4,16,4096,128) of the artifact and of SDPA's cuDNN and flash kernels.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
DB=${1:-.evidence/hopper.db}
cp "$DB" /tmp/hopper.db
# The shapes: the default ones plus (4,16,4096,64), (4,16,4096,128), (1,16,16384,128);
# causal and not (the artifact's specializations).
COMPARE_SHAPES="1,8,512,512,64 2,8,512,512,64 2,8,2048,2048,64 2,8,512,512,128 4,8,2048,2048,64 4,16,4096,4096,64 4,16,4096,4096,128 1,16,16384,16384,128" \
  bash scripts/gpu/export.sh /tmp/hopper.db hopper
python3 scripts/hopper_table.py "$OUT/compare_torch.json" 2>&1 | tee "$OUT/hopper_table.txt"
echo "== ncu, (4,16,4096,128)"
bash scripts/gpu/ncu_tensor_pipe.sh "$OUT/artifact" 4,16,4096,4096,128 2>&1 | tee "$OUT/ncu.txt"
echo "total ${SECONDS}s"
