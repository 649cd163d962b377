#!/usr/bin/env bash
# FP8 attention with wgmma (issue 8), on an H100/H200, about 3 minutes: the covering set of
# sdpa_fwd_fp8_wgmma (every knob value, PV = e4m3 (QGMMA) and f16 (HGMMA)) through every gate on
# the default and edge shapes, timed non-causal and correctness-only causal; the FP8 mma.sync
# family's and the fp16 wgmma family's covering sets on the same shapes, timed, for comparison;
# then `evo profile` of a TMA genome of sdpa_fwd_wgmma and of a split-KV genome (launch plans:
# tensor maps, scratch, two kernels) under ncu and compute-sanitizer memcheck.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=$PWD/.gpu/evo
echo "== evo eval --cover configs/sdpa_fp8_wgmma.toml (timed)"
timeout 150 $EVO eval -c configs/sdpa_fp8_wgmma.toml --cover 2>&1 | tee "$OUT/eval_fp8_wgmma.txt"; echo "exit ${PIPESTATUS[0]}"
sed 's/^CAUSAL = false/CAUSAL = true/' configs/sdpa_fp8_wgmma.toml > /tmp/fp8_wgmma_causal.toml
echo "== causal, correctness only"
timeout 100 $EVO eval -c /tmp/fp8_wgmma_causal.toml --templates templates --cover --no-timing 2>&1 | tee "$OUT/eval_fp8_wgmma_causal.txt"; echo "exit ${PIPESTATUS[0]}"
echo "== the FP8 mma.sync family and the fp16 wgmma family on the same shapes (timed)"
timeout 120 $EVO eval -c configs/sdpa_fp8.toml --cover 2>&1 | tee "$OUT/eval_fp8_mma.txt"; echo "exit ${PIPESTATUS[0]}"
timeout 80 $EVO eval -c configs/sdpa_wgmma.toml --cover 2>&1 | tee "$OUT/eval_wgmma.txt"; echo "exit ${PIPESTATUS[0]}"
echo "== evo profile of family genomes with their own arguments"
timeout 120 $EVO profile -c configs/sdpa_wgmma.toml -g "BLOCK_N=64,CONSUMER_WG=2,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=40,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows" \
  --shape BATCH=1,HEADS=2,SEQ_Q=200,SEQ_KV=300,HEAD_DIM=64,DTYPE=f16,CAUSAL=false --tools ncu,memcheck 2>&1 | tee "$OUT/profile_wgmma.txt"; echo "exit ${PIPESTATUS[0]}"
timeout 120 $EVO profile -c configs/sdpa_wgmma_splitkv.toml -g "BLOCK_N=64,CONSUMER_WG=1,KV_SPLITS=8,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=40,RESCALE=always,SCHEDULER=grid,SETMAXNREG=false,STAGES=3,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows" \
  --shape BATCH=1,HEADS=2,SEQ_Q=64,SEQ_KV=1000,HEAD_DIM=64,DTYPE=f16,CAUSAL=false --tools ncu,memcheck 2>&1 | tee "$OUT/profile_splitkv.txt"; echo "exit ${PIPESTATUS[0]}"
echo "total ${SECONDS}s"
