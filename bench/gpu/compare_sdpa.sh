#!/usr/bin/env bash
# An exported attention artifact against PyTorch SDPA on a GPU machine, on the long shapes:
# scripts/compare_torch.py (every SDPA backend, float64 errors, CUDA-graph timing) on the
# default shapes plus (4,16,4096,64), (4,16,4096,128), (1,16,16384,128), causal and not (the
# artifact's specializations); the table with TFLOP/s and fraction of peak
# (bench/hopper_table.py); Nsight Compute's tensor-pipe utilisation at (4,16,4096,128) of the
# artifact and of SDPA's cuDNN and flash kernels (bench/gpu/ncu_tensor_pipe.sh).
# Usage: bench/gpu/compare_sdpa.sh ARTIFACT_DIR   (writes compare_torch.{txt,json},
# hopper_table.txt, ncu.txt under $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
ART=$1
SHAPES="1,8,512,512,64 2,8,512,512,64 2,8,2048,2048,64 2,8,512,512,128 4,8,2048,2048,64 4,16,4096,4096,64 4,16,4096,4096,128 1,16,16384,16384,128"
python3 scripts/compare_torch.py "$ART" --out "$OUT/compare_torch.json" --shapes $SHAPES 2>&1 | tee "$OUT/compare_torch.txt"
echo "compare exit: ${PIPESTATUS[0]}" | tee -a "$OUT/compare_torch.txt"
python3 bench/hopper_table.py "$OUT/compare_torch.json" 2>&1 | tee "$OUT/hopper_table.txt"
echo "== ncu, (4,16,4096,128)"
bash bench/gpu/ncu_tensor_pipe.sh "$ART" 4,16,4096,4096,128 2>&1 | tee "$OUT/ncu.txt"
