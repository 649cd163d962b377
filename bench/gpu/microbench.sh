#!/usr/bin/env bash
# Microbenchmarks built with nvcc on the GPU machine (no evo binary needed): the FP8 quantizer's
# schedule against a streaming roofline (bench/kernel/quant_bench.cu, issue 19) and the launch and
# data-movement floor under the short attention shapes (bench/kernel/launch_floor.cu, issue 18).
# From the repo root; logs under $OUT. QUANT_REPS (default 10) calls per timed repeat.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
bin=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/gpu.txt" 2>&1
nvcc -O3 -std=c++17 -arch=sm_90a -Xptxas -v -Itemplates/common bench/kernel/quant_bench.cu -o "$bin/qb" > "$OUT/quant_bench.build.txt" 2>&1 \
  && "$bin/qb" "${QUANT_REPS:-10}" > "$OUT/quant_bench.txt" 2>&1
echo "quant_bench exit $?" >> "$OUT/quant_bench.txt"
nvcc -O3 -std=c++17 -arch=sm_90a bench/kernel/launch_floor.cu -o "$bin/lf" > "$OUT/launch_floor.build.txt" 2>&1 \
  && "$bin/lf" > "$OUT/launch_floor.txt" 2>&1
echo "launch_floor exit $?" >> "$OUT/launch_floor.txt"
# PyTorch SDPA on the seed shapes in the same call (the yardstick beside the floor).
python3 scripts/torch_sdpa_baseline.py configs/sdpa.toml --out "$OUT/sdpa_baseline.json" > "$OUT/sdpa_baseline.txt" 2>&1
echo "sdpa_baseline exit $?" >> "$OUT/sdpa_baseline.txt"
