#!/usr/bin/env bash
# The Hopper attention family's building blocks and covering set, on an H100/H200, from the repo
# root with .gpu/ carried (.gpu/evo = release build; .gpu/tests.tar.zst from
# `../shared/tools/gpu-bundle.sh -p evo-gpu`). Logs under $OUT. About 2-4 minutes.
#  1. crates/evo-gpu/tests/gpu_hopper.rs: a tensor map encoded by Gpu::encode_tensor_map_tiled
#     and passed as a __grid_constant__ parameter (KernelArg::TensorMap) loads a 64x64 fp16 box
#     with the 128-byte swizzle and zero fill exactly where swz128_offset says; wgmma
#     shared x shared (K-major, the S = Q K^T form) and registers x shared (N-major B, the
#     O += P V form) exact against the CPU on 64x128x128. Expect "4 passed" and the two
#     "TMA box: ..." / "wgmma: ..." lines; a failure prints the first misplaced elements.
#  2. evo eval --cover of sdpa_fwd_wgmma (every knob value, incl. WARP_SPEC, SETMAXNREG and
#     LOADER=tma: the worker encodes the family's q/k/v tensor maps) through every gate on
#     the default and edge shapes: non-causal with timing, then causal correctness only. Expect every genome "evaluated" (static gate
#     sees HGMMA; correctness on ragged seq_q/seq_kv) and times per shape.
#  (bench/gpu/sdpa.sh runs the sdpa_fwd_mma covering set on the same shapes.)
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache
EVO=.gpu/evo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"

if [ -f .gpu/tests.tar.zst ]; then
  echo "== GPU test: TMA tensor map + wgmma probes (crates/evo-gpu/tests/gpu_hopper.rs)"
  timeout 120 .gpu/cargo-nextest nextest run --archive-file .gpu/tests.tar.zst --workspace-remap . \
    --run-ignored all -E 'binary(gpu_hopper)' --no-capture 2>&1 | tail -n 40 | tee "$OUT/gpu_hopper_test.txt"
else
  echo "== no .gpu/tests.tar.zst: build it with ../shared/tools/gpu-bundle.sh -p evo-gpu" | tee "$OUT/gpu_hopper_test.txt"
fi

sed 's/CAUSAL = false/CAUSAL = true/' configs/sdpa_wgmma.toml > /tmp/sdpa_wgmma_causal.toml
# Non-causal with timing (the figures), causal correctness only, to stay within ~4 minutes.
echo "== evo eval --cover, sdpa_wgmma (default + edge shapes, timed)"
timeout 140 $EVO eval -c configs/sdpa_wgmma.toml --cover 2>&1 | tee "$OUT/eval_sdpa_wgmma.txt"
echo "eval sdpa_wgmma exit ${PIPESTATUS[0]}"
echo "== evo eval --cover --no-timing, sdpa_wgmma causal (default + edge shapes)"
timeout 80 $EVO eval -c /tmp/sdpa_wgmma_causal.toml --templates templates --cover --no-timing 2>&1 \
  | tee "$OUT/eval_sdpa_wgmma_causal.txt"
echo "eval sdpa_wgmma_causal exit ${PIPESTATUS[0]}"
echo "total ${SECONDS}s"
