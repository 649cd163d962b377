#!/usr/bin/env bash
# Evidence for the FP8 attention family (issue 7), on a GPU machine, from the repo root with
# .gpu/ carried (.gpu/evo = release build). Logs under $OUT. About 5 minutes of GPU time.
#  1. evo selftest: GPU references against float64 (sdpa_fwd_fp8 on dequantized inputs) and the
#     GPU quantizer rule against the host rule (float8 crate) BIT FOR BIT (row "fp8_quantize");
#  (with the bundle's test archive: crates/evo-gpu/tests/gpu_fp8.rs, the family's own quantizer
#     bit for bit and a covering set of genomes against float64 on ragged shapes)
#  2. planted suites: tests/planted/fp8_quantize (zero slice scale 1/448, one scale for all)
#     and tests/planted/sdpa_fp8 (wrong head's scale, uninitialised scores, row-mixing warp
#     reduction, outputs saturated at 448, forgotten v descale); each file's evo-expect must match;
#  3. a covering sample of sdpa_fwd_fp8_mma (every knob value) through every gate on the default
#     and edge shapes (kernel-level and end-to-end errors);
#  4. a search on the FP8 family (FP8_SEARCH_BUDGET, default 90s) against PyTorch SDPA fp16;
#  5. the table: best FP8 variant vs the best fp16 variant vs PyTorch SDPA fp16, kernel-only and
#     end to end (quantizer + attention as one evo variant, configs/sdpa_fp8_e2e.toml), both errors
#     (bench/fp8_table.py).
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache
EVO=.gpu/evo
T=/tmp/fp8
mkdir -p $T

if [ -z "${FP8_TABLE_ONLY:-}" ]; then  # FP8_TABLE_ONLY=1: only the search and the table
echo "== selftest"
$EVO selftest 2>&1 | tee "$OUT/selftest.txt"; echo "selftest exit ${PIPESTATUS[0]}"

if [ -f .gpu/tests.tar.zst ]; then
  echo "== GPU test: the family's quantizer vs the host rule (bit for bit), a covering set vs float64"
  .gpu/cargo-nextest nextest run --archive-file .gpu/tests.tar.zst --workspace-remap . \
    -E 'test(fp8_family_quantizer_and_attention_on_the_gpu)' --no-capture 2>&1 | tail -n 15 | tee "$OUT/gpu_test.txt"
fi

echo "== planted quantizer suite"
$EVO check tests/planted/fp8_quantize/*.cu --problem fp8_quantize -c tests/planted/fp8_quantize/check.toml 2>&1 | tee "$OUT/planted_fp8_quantize.txt"
echo "planted quantizer exit ${PIPESTATUS[0]}; expect \"3 of 3 verdicts as expected\""
echo "== planted FP8 attention suite"
$EVO check tests/planted/sdpa_fp8/*.cu --problem sdpa_fwd_fp8 -c tests/planted/sdpa_fp8/check.toml 2>&1 | tee "$OUT/planted_sdpa_fp8.txt"
echo "planted fp8 exit ${PIPESTATUS[0]}; expect \"6 of 6 verdicts as expected\""

echo "== evo eval --cover, configs/sdpa_fp8.toml"
$EVO eval -c configs/sdpa_fp8.toml --cover 2>&1 | tee "$OUT/eval_fp8_cover.txt"

fi

echo "== PyTorch SDPA fp16 on the default shapes"
python3 scripts/torch_sdpa_baseline.py configs/sdpa_fp8.toml --out configs/torch_sdpa_fp8_baseline.json 2>&1 | tee "$OUT/torch.txt"

if [ -n "${FP8_DB:-}" ]; then  # FP8_DB=FILE: the table from an earlier search's database
  echo "== no search: the best genome of run fp8 in $FP8_DB"
  cp "$FP8_DB" $T/fp8.db
else
echo "== search (${FP8_SEARCH_BUDGET:-90s})"
rm -f $T/fp8.db $T/fp8.db-*
$EVO search -c configs/sdpa_fp8_search.toml --run fp8 --db $T/fp8.db --budget "${FP8_SEARCH_BUDGET:-90s}" --no-progress 2>&1 | tail -n 30 | tee "$OUT/search.txt"
python3 bench/run_summary.py $T/fp8.db fp8 2>&1 | tee "$OUT/search_summary.txt"
cp $T/fp8.db "$OUT/fp8.db"
fi
# The search's best genome by fitness: `evaluated` or `regressed` (correct, but slower than the
# PyTorch fp16 baseline, which every FP8 genome of the mma.sync family is on Hopper). No
# fallback: a table of some other genome would not be the search's.
BEST8=$(python3 - <<'PY'
import sqlite3, sys
c = sqlite3.connect("/tmp/fp8/fp8.db")
r = c.execute("select genome from candidates where status in ('evaluated', 'regressed') and fitness is not null order by fitness desc limit 1").fetchone()
if not r:
    sys.exit("no correct genome in run fp8")
print(r[0])
PY
) || { echo "error: the FP8 search found no correct genome"; exit 1; }
# Best fp16 genome: the fastest (geometric mean over the default shapes) of the H200 landscape,
# if the family still accepts it, else the search seed of configs/sdpa_search.toml.
BEST16=$(python3 bench/landscape_best.py tests/data/landscape_sdpa_fwd_mma_h200.json)
echo "best fp8: $BEST8"; echo "best fp16 (landscape): $BEST16"
$EVO --json eval -c configs/sdpa_fp8.toml -g "$BEST8" > $T/eval_fp8_best.json 2> $T/eval_fp8_best.err; echo "fp8 eval exit $?"
if ! $EVO --json eval -c configs/sdpa.toml -g "$BEST16" > $T/eval_fp16_best.json 2> $T/eval_fp16_best.err; then
  BEST16=$(grep -o 'BLOCK_M=[^"]*' configs/sdpa_search.toml | head -1); echo "landscape genome refused; fp16 seed: $BEST16"
  $EVO --json eval -c configs/sdpa.toml -g "$BEST16" > $T/eval_fp16_best.json 2> $T/eval_fp16_best.err
fi
# End to end from fp16: the same genome as one variant of four kernels (quantizer x3 + attention),
# checked against the fp16 inputs and timed as a whole by evo (configs/sdpa_fp8_e2e.toml).
$EVO --json eval -c configs/sdpa_fp8_e2e.toml -g "$BEST8" > $T/eval_e2e_best.json 2> $T/eval_e2e_best.err; echo "e2e eval exit $?"
python3 bench/fp8_table.py $T/eval_fp8_best.json $T/eval_fp16_best.json configs/torch_sdpa_fp8_baseline.json $T/eval_e2e_best.json 2>&1 | tee "$OUT/fp8_table.txt"
# The same genome end to end with the two-pass quantizer (configs/sdpa_fp8_e2e_split.toml).
$EVO --json eval -c configs/sdpa_fp8_e2e_split.toml -g "$BEST8" > $T/eval_e2e_split_best.json 2> $T/eval_e2e_split_best.err; echo "e2e split eval exit $?"
echo "-- the same table, fp8 e2e = the two-pass quantizer (configs/sdpa_fp8_e2e_split.toml)" | tee -a "$OUT/fp8_table.txt"
python3 bench/fp8_table.py $T/eval_fp8_best.json $T/eval_fp16_best.json configs/torch_sdpa_fp8_baseline.json $T/eval_e2e_split_best.json 2>&1 | tee -a "$OUT/fp8_table.txt"
(cd $T && tar czf "$OUT/raw.tgz" *.json *.err 2>/dev/null)
echo "total ${SECONDS}s"
