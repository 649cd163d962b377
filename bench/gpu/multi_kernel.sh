#!/usr/bin/env bash
# Evidence for multi-kernel variants (issues 7 and 8), on a GPU machine, from the repo root with
# .gpu/ carried (.gpu/evo = release build; .gpu/tests.tar.zst from ../shared/tools/gpu-bundle.sh,
# whose default crates include evo-eval). Logs under $OUT. About 3 minutes of GPU time.
#  1. GPU test (crates/evo-eval/tests/gpu_multi_kernel.rs): a gemm computed by two kernels with
#     their own arguments and a float32 scratch buffer between them, through the worker: correct
#     and timed; the planted copy whose first kernel writes half the scratch is rejected (NaN
#     poison, "not finite"); a third 200k-cycle spin kernel adds its time (the graph holds every
#     kernel); and the shipped FP8 end-to-end family on a ragged shape: correct in order, and
#     rejected ("not finite") with the attention kernel moved before the quantizers. A third test:
#     the two-pass quantizer of sdpa_fwd_fp8_e2e_split equals the host rule bit for bit. Expect
#     three "PASS" lines, the times and the end-to-end rel L2 printed.
#  2. evo eval --cover on configs/sdpa_fp8_e2e.toml: FP8 attention end to end from fp16 = the
#     family's quantizer on q, k, v (e4m3 + descales into scratch) then the attention kernel, one
#     variant, checked against attention on the fp16 inputs (end-to-end bound) and timed whole.
#     Expect every genome "evaluated", e2e rel L2 ~2-10%.
#  2b. the same on configs/sdpa_fp8_e2e_split.toml (the two-pass chunked quantizer).
#  3. the FP8 table (bench/fp8_table.py) with the end-to-end column from evo's own timing:
#     fixed FP8 genome (BEST8=... to override) vs the best fp16 genome of the H200 landscape vs
#     PyTorch SDPA fp16. Expect fp8 e2e > fp8 kernel (3 quantizer passes over fp16 q, k, v).
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache
EVO=.gpu/evo
T=/tmp/multi
mkdir -p $T

echo "== GPU tests: multi-kernel variants with scratch through the worker"
if [ -f .gpu/tests.tar.zst ]; then
  .gpu/cargo-nextest nextest run --archive-file .gpu/tests.tar.zst --workspace-remap . \
    -E 'binary(gpu_multi_kernel)' --no-capture 2>&1 | tail -n 30 | tee "$OUT/gpu_test.txt"
else
  echo "no .gpu/tests.tar.zst: build it with ../shared/tools/gpu-bundle.sh (default crates evo-gpu evo-eval)"
fi

echo "== evo eval --cover, configs/sdpa_fp8_e2e.toml (quantizer x3 + attention, one variant)"
$EVO eval -c configs/sdpa_fp8_e2e.toml --cover 2>&1 | tee "$OUT/eval_e2e_cover.txt"
echo "eval exit ${PIPESTATUS[0]}"

echo "== evo eval --cover, configs/sdpa_fp8_e2e_split.toml (two-pass chunked quantizer x3 + attention)"
$EVO eval -c configs/sdpa_fp8_e2e_split.toml --cover 2>&1 | tee "$OUT/eval_e2e_split_cover.txt"
echo "eval exit ${PIPESTATUS[0]}"

echo "== FP8 table, end to end timed by evo"
BEST8=${BEST8:-BLOCK_M=64,BLOCK_N=32,NUM_WARPS=4,PRODUCER_WARPS=1,Q_IN_REGS=true,STAGES=2,SWIZZLE=xor,V_LAYOUT=transpose,WARP_SPEC=off}
BEST16=$(python3 bench/landscape_best.py tests/data/landscape_sdpa_fwd_mma_h200.json)
echo "fp8 genome: $BEST8"; echo "fp16 genome (landscape): $BEST16"
python3 scripts/torch_sdpa_baseline.py configs/sdpa_fp8.toml --out $T/torch.json 2>&1 | tail -n 8 | tee "$OUT/torch.txt"
$EVO --json eval -c configs/sdpa_fp8.toml -g "$BEST8" > $T/eval_fp8.json 2> $T/eval_fp8.err; echo "fp8 eval exit $?"
$EVO --json eval -c configs/sdpa_fp8_e2e.toml -g "$BEST8" > $T/eval_e2e.json 2> $T/eval_e2e.err; echo "e2e eval exit $?"
if ! $EVO --json eval -c configs/sdpa.toml -g "$BEST16" > $T/eval_fp16.json 2> $T/eval_fp16.err; then
  BEST16=$(grep -o 'BLOCK_M=[^"]*' configs/sdpa_search.toml | head -1); echo "landscape genome refused; fp16 seed: $BEST16"
  $EVO --json eval -c configs/sdpa.toml -g "$BEST16" > $T/eval_fp16.json 2> $T/eval_fp16.err
fi
python3 bench/fp8_table.py $T/eval_fp8.json $T/eval_fp16.json $T/torch.json $T/eval_e2e.json 2>&1 | tee "$OUT/fp8_table.txt"
$EVO --json eval -c configs/sdpa_fp8_e2e_split.toml -g "$BEST8" > $T/eval_e2e_split.json 2> $T/eval_e2e_split.err; echo "e2e split eval exit $?"
echo "-- the same table, fp8 e2e = the two-pass quantizer (configs/sdpa_fp8_e2e_split.toml)" | tee -a "$OUT/fp8_table.txt"
python3 bench/fp8_table.py $T/eval_fp8.json $T/eval_fp16.json $T/torch.json $T/eval_e2e_split.json 2>&1 | tee -a "$OUT/fp8_table.txt"
(cd $T && tar czf "$OUT/raw.tgz" *.json *.err 2>/dev/null)
echo "total ${SECONDS}s"
