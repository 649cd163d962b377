#!/usr/bin/env bash
# Runs on a GPU machine from the repo root, with .gpu/ built by gpu-bundle.sh carried:
# doctor, compile targeting the GPU's own architecture, then the GPU test binaries.
# Logs go to $OUT (default /tmp/evo-out).
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache
echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/nvidia-smi.txt"
echo "== evo doctor"; .gpu/evo doctor 2>&1 | tee "$OUT/doctor.txt"; echo "doctor exit: ${PIPESTATUS[0]}"
echo "== evo compile (arch auto)"
.gpu/evo compile -c configs/gemm.toml --random 4 --seed 3 --sass 2>&1 | tee "$OUT/compile.txt"; echo "compile exit: ${PIPESTATUS[0]}"
echo "== GPU tests"
.gpu/cargo-nextest nextest run --archive-file .gpu/tests.tar.zst --workspace-remap . \
  --run-ignored all --no-fail-fast --no-capture 2>&1 | tee "$OUT/tests.txt"
echo "tests exit: ${PIPESTATUS[0]}"
