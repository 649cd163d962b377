#!/usr/bin/env bash
# The tiled float32 reference of the attention correctness gate (crates/evo-kernels/src/problems/
# sdpa_reference.cu) on an H100/H200, about 4 minutes, from the repo root with .gpu/:
#  1. evo selftest: every problem's GPU reference against the float64 CPU reference on every
#     specialization, the edge shapes and every input kind (rows "reference"), timing and fault
#     isolation;
#  2. the planted suites of sdpa_fwd and sdpa_fwd_fp8 (each file's evo-expect must match: the
#     gate still rejects every planted fault and passes the correct kernels);
#  3. the pairwise sample of sdpa_fwd_wgmma through every gate on the default and edge shapes;
#  4. the gate's cost on the long shapes: one genome on configs/sdpa_wgmma_large.toml, wall time
#     and the pool's per-variant check/timing split.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=$PWD/.gpu/evo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== [${SECONDS}s] selftest"
timeout 200 $EVO selftest 2>&1 | tee "$OUT/selftest.txt"; echo "selftest exit ${PIPESTATUS[0]}"
echo "== [${SECONDS}s] planted sdpa_fwd"
timeout 150 $EVO check tests/planted/sdpa/*.cu --problem sdpa_fwd -c tests/planted/sdpa/check.toml 2>&1 | tee "$OUT/planted_sdpa.txt"; echo "exit ${PIPESTATUS[0]}"
echo "== [${SECONDS}s] planted sdpa_fwd_fp8"
timeout 100 $EVO check tests/planted/sdpa_fp8/*.cu --problem sdpa_fwd_fp8 -c tests/planted/sdpa_fp8/check.toml 2>&1 | tee "$OUT/planted_sdpa_fp8.txt"; echo "exit ${PIPESTATUS[0]}"
echo "== [${SECONDS}s] pairwise sdpa_wgmma, correctness only"
timeout 120 $EVO eval -c configs/sdpa_wgmma.toml --pairwise --no-timing 2>&1 | grep -vE "^│|^┌|^└|^╞|^├" | tee "$OUT/eval_pairwise.txt"; echo "exit ${PIPESTATUS[0]}"
echo "== [${SECONDS}s] one genome on the long shapes (every gate)"
start=$SECONDS
timeout 120 $EVO -v eval -c configs/sdpa_wgmma_large.toml \
  -g "BLOCK_N=128,CONSUMER_WG=2,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=64,WARP_SPEC=on,WG_SPLIT=rows" > "$OUT/eval_large.txt" 2> "$OUT/eval_large.err"
echo "exit $? after $((SECONDS - start)) s" | tee -a "$OUT/eval_large.txt"
grep -h "evaluated job=\|check_ms" "$OUT/eval_large.err" | tail -n 5 | tee -a "$OUT/eval_large.txt"
echo "total ${SECONDS}s"
