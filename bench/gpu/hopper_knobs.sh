#!/usr/bin/env bash
# The schedule and layout knobs of sdpa_fwd_wgmma (CONSUMER_WG 3, PINGPONG, the
# FlashAttention-3 OVERLAP order, PRODUCER_REGS, SWIZZLE_BYTES) on an H100/H200, about 8
# minutes, from the repo root with .gpu/ (bench/gpu/bundle.sh). Logs under $OUT.
#  1. GPU tests of crates/evo-gpu/tests/gpu_hopper.rs: a TMA box with the 128-, 64- and 32-byte
#     swizzles lands where swz_offset says; wgmma with each swizzle's descriptors is exact.
#  2. evo eval --pairwise of sdpa_fwd_wgmma (every pair of knob values) through every gate on
#     the default and edge shapes: non-causal timed, causal correctness only.
#  3. evo eval --cover, correctness only, of the families that share its code: the split-KV
#     family (causal and not) and the FP8 wgmma family (common/wgmma.cuh's swizzle helpers).
#  4. chosen genomes timed on (4,16,4096,64) and (4,16,4096,128) (configs/sdpa_wgmma_large.toml)
#     beside PyTorch SDPA on the same shapes (docs/RESULTS.md has the last table).
#  5. compute-sanitizer (memcheck, racecheck, synccheck) on a ping-pong genome of three consumers.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=$PWD/.gpu/evo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${KNOBS_SKIP_TESTS:-0}" != 1 ]; then
echo "== [${SECONDS}s] GPU tests: gpu_hopper"
timeout 120 .gpu/cargo-nextest nextest run --archive-file .gpu/tests.tar.zst --workspace-remap . \
  --run-ignored all -E 'binary(gpu_hopper)' --no-capture 2>&1 | tail -n 30 | tee "$OUT/gpu_hopper_test.txt"
fi
echo "== [${SECONDS}s] evo eval --pairwise sdpa_wgmma (timed)"
timeout 200 $EVO eval -c configs/sdpa_wgmma.toml --pairwise 2>&1 | tee "$OUT/eval_pairwise.txt"; echo "exit ${PIPESTATUS[0]}"
sed 's/^CAUSAL = false/CAUSAL = true/' configs/sdpa_wgmma.toml > /tmp/sdpa_wgmma_causal.toml
echo "== [${SECONDS}s] causal, correctness only"
timeout 120 $EVO eval -c /tmp/sdpa_wgmma_causal.toml --templates templates --pairwise --no-timing 2>&1 | tee "$OUT/eval_pairwise_causal.txt"; echo "exit ${PIPESTATUS[0]}"
echo "== [${SECONDS}s] split-KV and FP8 wgmma covering sets, correctness only"
sed 's/^CAUSAL = false/CAUSAL = true/' configs/sdpa_wgmma_splitkv.toml > /tmp/sdpa_wgmma_splitkv_causal.toml
for c in configs/sdpa_wgmma_splitkv.toml /tmp/sdpa_wgmma_splitkv_causal.toml configs/sdpa_fp8_wgmma.toml; do
  timeout 90 $EVO eval -c $c --templates templates --cover --no-timing 2>&1 | tee -a "$OUT/eval_shared.txt"; echo "exit ${PIPESTATUS[0]} $c" | tee -a "$OUT/eval_shared.txt"
done
# The split-KV genome with ping-pong and the 64-byte swizzle (its family's tensor maps once
# ignored SWIZZLE_BYTES: an illegal address).
timeout 60 $EVO eval -c /tmp/sdpa_wgmma_splitkv_causal.toml --templates templates --no-timing \
  -g "BLOCK_N=128,CONSUMER_WG=2,KV_SPLITS=4,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=3,SWIZZLE_BYTES=64,WARP_SPEC=on,WG_SPLIT=rows" 2>&1 | tee -a "$OUT/eval_shared.txt"; echo "exit ${PIPESTATUS[0]} split-KV ping-pong" | tee -a "$OUT/eval_shared.txt"
echo "== [${SECONDS}s] long shapes: PyTorch SDPA and chosen genomes"
python3 scripts/torch_sdpa_baseline.py configs/sdpa_wgmma_large.toml --out /tmp/torch_large.json 2>&1 | tee "$OUT/torch_large.txt"
G=()
for g in \
  "BLOCK_N=64,CONSUMER_WG=1,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=40,RESCALE=always,SCHEDULER=grid,SETMAXNREG=false,STAGES=4,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows" \
  "BLOCK_N=128,CONSUMER_WG=2,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=40,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows" \
  "BLOCK_N=128,CONSUMER_WG=2,LOADER=tma,OVERLAP=on,PINGPONG=off,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows" \
  "BLOCK_N=128,CONSUMER_WG=2,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows" \
  "BLOCK_N=128,CONSUMER_WG=2,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=64,WARP_SPEC=on,WG_SPLIT=rows" \
  "BLOCK_N=64,CONSUMER_WG=2,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=4,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows" \
  "BLOCK_N=64,CONSUMER_WG=3,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=3,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows" \
  "BLOCK_N=64,CONSUMER_WG=3,LOADER=tma,OVERLAP=on,PINGPONG=off,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=3,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows" \
  "BLOCK_N=64,CONSUMER_WG=3,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows" \
  "BLOCK_N=64,CONSUMER_WG=2,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows" \
  "BLOCK_N=128,CONSUMER_WG=1,LOADER=tma,OVERLAP=on,PINGPONG=off,PRODUCER_REGS=40,RESCALE=always,SCHEDULER=grid,SETMAXNREG=false,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows"; do
  G+=(-g "$g")
done
timeout 300 $EVO eval -c configs/sdpa_wgmma_large.toml "${G[@]}" 2>&1 | tee "$OUT/eval_large.txt"; echo "exit ${PIPESTATUS[0]}"
echo "== [${SECONDS}s] compute-sanitizer on a three-consumer ping-pong genome"
timeout 150 $EVO profile -c configs/sdpa_wgmma.toml -g "BLOCK_N=64,CONSUMER_WG=3,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=3,SWIZZLE_BYTES=64,WARP_SPEC=on,WG_SPLIT=rows" \
  --shape BATCH=1,HEADS=2,SEQ_Q=200,SEQ_KV=300,HEAD_DIM=128,DTYPE=f16,CAUSAL=true --tools memcheck,racecheck,synccheck 2>&1 | tee "$OUT/profile_pingpong.txt"; echo "exit ${PIPESTATUS[0]}"
echo "total ${SECONDS}s"
