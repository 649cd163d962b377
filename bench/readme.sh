#!/usr/bin/env bash
# Issue 22's newcomer check: every command of the README, run as written in a fresh clone of
# this checkout, with a transcript (command, exit code, last lines) in $OUT/transcript.md and
# each command's whole output in $OUT/logs/.
#   bash bench/readme.sh cpu   # a machine without a GPU: the first line (install + build +
#                              # search, which must stop with exit 3), the replay search, every
#                              # read, compile and export command; GPU commands must exit 3
#   bash bench/readme.sh gpu   # the GPU machine (no Rust there): EVO=.gpu/evo, the main job
#                              # with BUDGET (default 2m) instead of 8h, then every command on
#                              # its run, the artifact's bench.py, the GPU section
# Placeholders are filled in: RUN (the run just made), ID / A B (its candidates), DIR (the
# export), CFG (configs/gemm.toml), my_kernel.cu (the planted gemm control); `evo export
# RUN_A RUN_B --per-shape` takes the attention run and the configs/sdpa.toml run. The PostgreSQL
# lines need a server (bench/bench_pg.sh runs them) and `scripts/test.sh` is CI's own command:
# both are listed as not run here.
set -uo pipefail
mode=${1:-cpu}
src=$(git rev-parse --show-toplevel)
OUT=${OUT:-/tmp/evo-readme}
mkdir -p "$OUT/logs"
: > "$OUT/transcript.md"
n=0
# run CMD...: runs the command line as given (through bash, so && and globs work as typed).
run() {
  n=$((n + 1))
  local log="$OUT/logs/$(printf %02d $n).txt" start=$SECONDS
  bash -c "$*" > "$log" 2>&1
  local rc=$?
  {
    echo "\$ $*"
    echo "exit $rc ($((SECONDS - start)) s)"
    echo '```'
    tail -n "${TAIL:-12}" "$log" | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-200
    echo '```'
  } >> "$OUT/transcript.md"
  echo "[$n] exit $rc: $*"
}
skip() { echo "\$ $1"$'\n'"not run here: $2"$'\n' >> "$OUT/transcript.md"; echo "skip: $1"; }

if [ "$mode" = cpu ]; then
  clone=${CLONE:-$(mktemp -d)/evo}
  git clone -q "$src" "$clone" && cd "$clone" || exit 1
  # The build of the clone reuses this checkout's target folder (same sources; only the
  # workspace's own crates are compiled again).
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$src/target}
  run "scripts/install-cuda.sh && cargo run --release -p evo-cli -- search -c configs/attention.toml --budget 8h"
  skip "scripts/test.sh" "CI's command (the whole suite), run by .ci/run"
  mkdir -p "$OUT/bin"; ln -sf "$CARGO_TARGET_DIR/release/evo" "$OUT/bin/evo"
  export PATH="$OUT/bin:$PATH"
  LAND=tests/data/landscape_sdpa_fwd_mma_h200.json
  run "evo search -c configs/sdpa_replay.toml --evaluator replay:$LAND --budget 4gen --no-progress"
  RUN=$(evo --json runs | python3 -c "import json,sys; print(json.load(sys.stdin)[-1]['name'])")
  run "evo search -c configs/sdpa.toml --budget 8h"
  run "evo search -c configs/sdpa_wgmma_search.toml"
  run "evo search -c configs/sdpa_wgmma_hd64_search.toml"
else
  cd "$src" || exit 1
  EVO=${EVO:-$src/.gpu/evo}
  mkdir -p "$OUT/bin"; ln -sf "$(readlink -f "$EVO")" "$OUT/bin/evo"
  export PATH="$OUT/bin:$PATH" EVO_CACHE_DIR=${EVO_CACHE_DIR:-/tmp/evo-cache}
  work=$(mktemp -d); cp -r configs templates tests scripts "$work"/ && cd "$work" || exit 1
  B=${BUDGET:-2m}
  run "evo doctor"
  run "evo search -c configs/attention.toml --budget $B --no-progress"
  RUN=$(evo --json runs | python3 -c "import json,sys; print(json.load(sys.stdin)[-1]['name'])")
  run "evo search -c configs/sdpa.toml --budget ${BUDGET2:-1m} --no-progress"
fi
run "evo search --resume $RUN --budget 2evals --no-progress"
skip "evo search -c CFG --gpus all --db postgres://USER:PW@HOST/DB --run night" "needs a PostgreSQL server (bench/bench_pg.sh)"
skip "evo join night --db postgres://USER:PW@HOST/DB --gpus all" "needs a PostgreSQL server (bench/bench_pg.sh)"
run "evo runs"
run "evo elites $RUN --top 10"
run "evo elites $RUN --top 3 --wide"
ids=$(evo --json elites "$RUN" --top 2 | python3 -c "import json,sys; print(' '.join(str(e['id']) for e in json.load(sys.stdin)['elites']))")
A=${ids%% *}; B2=${ids##* }
run "evo show $A"
run "evo show $A --source | head -n 5"
run "evo show $A --ptx | head -n 5"
run "evo show $A --sass | head -n 5"
run "evo show $A --log"
run "evo lineage $A"
run "evo diff $A $B2 | head -n 30"
run "evo stats $RUN"
run "evo report $RUN --out report.html"
if [ "$mode" = cpu ]; then
  run "scripts/report_screenshot.sh report.html"
else
  skip "scripts/report_screenshot.sh report.html" "no Chromium on the GPU machine (the CPU transcript runs it)"
fi
run "evo export-landscape $RUN --out landscape.json"
run "evo search-quality -c configs/sdpa_landscape.toml --landscape tests/data/landscape_sdpa64_h200.json.gz --seeds 3 | tail -n 12"
if [ "$mode" = cpu ]; then
  run "evo export $RUN --out artifact"
  run "evo export $RUN --out artifact --unsanitized"
  run "evo export $RUN --per-shape --out artifact2 --unsanitized"
else
  MMA=$(evo --json runs | python3 -c "import json,sys; print(json.load(sys.stdin)[-1]['name'])")
  run "evo export $RUN --out artifact"
  run "evo export $RUN $MMA --per-shape --out artifact2"
fi
# The artifact on the GPU (on a CPU machine: the GPU-free checks, then exit 3).
run "evo verify artifact"
run "python3 artifact/bench.py"
run "python3 scripts/compare_torch.py artifact"
CONTROL=tests/planted/gemm/j_correct.cu
run "evo profile $CONTROL --problem gemm --shape M=512,N=512,K=512 --tools ncu,memcheck,racecheck"
if [ "$mode" = gpu ]; then
  run "python3 scripts/torch_sdpa_baseline.py configs/sdpa.toml --out torch_baseline.json"
  run "evo baseline import torch_baseline.json --run $MMA"
else
  run "evo baseline import tests/data/torch_sdpa_baseline_h200.json --run $RUN"
fi
run "evo eval -c configs/sdpa.toml --cover"
skip "evo eval -c configs/sdpa.toml --pairwise" "hundreds of genomes (bench/gpu/gate.sh mma runs it)"
run "evo eval -c configs/sdpa_wgmma_splitkv.toml --cover"
[ "$mode" = cpu ] && run "evo doctor"
run "evo space -c configs/gemm.toml"
run "evo space -c configs/gemm.toml --list | head -n 5"
G=BLOCK_K=32,BLOCK_M=64,BLOCK_N=64,STAGES=2,SWIZZLE=xor,WARPS_M=2,WARPS_N=2
run "evo render -c configs/gemm.toml -g $G | head -n 5"
run "evo compile -c configs/gemm.toml -g $G --sass --out build/"
run "evo compile -c configs/gemm.toml --random 20 --seed 1"
[ "$mode" = cpu ] && run "evo compile -c configs/sdpa.toml --pairwise | tail -n 5"
# The rest of the GPU section (on a CPU machine each must stop with exit 3 and say so).
run "evo selftest"
run "evo check $CONTROL --problem gemm -c configs/gemm.toml"
run "evo check tests/planted/gemm/*.cu --problem gemm -c tests/planted/gemm/check.toml | tail -n 14"
echo "transcript: $OUT/transcript.md"
