#!/usr/bin/env bash
# Issue 17 on one H100 (about 8 minutes): the artifact in a PyTorch user's hands.
# From the repo root, with .gpu/evo (../shared/tools/gpu-bundle.sh), PyTorch 2.11 and
# transformers 5.x; no network:
#   1. evo search -c configs/sdpa.toml (sdpa_fwd_mma, fp16 and bf16) for MMA_BUDGET (90s),
#   2. evo search -c configs/sdpa_wgmma_quick.toml (sdpa_fwd_wgmma on (2,8,2048,64),
#      (4,8,2048,64) and (4,16,4096,128), causal and not, fp16 and bf16) for HOPPER_BUDGET (120s),
#      then -c configs/sdpa_wgmma_hd64_search.toml (run hopper64: the head-dim-64 shapes with
#      (4,16,4096,64), where four consumer warpgroups fit; its own PyTorch baseline) for
#      HOPPER64_BUDGET (90s; 0 skips it),
#   3. PyTorch SDPA timed on both runs' shapes (scripts/torch_sdpa_baseline.py) and imported as
#      their baselines (evo baseline import), then evo export mma hopper --per-shape: the
#      fastest correct variant per shape over both runs, shapes where it measured less than
#      1.05x faster than PyTorch (--min-speedup) marked for evo_kernel.py to send to PyTorch's SDPA,
#   4. the artifact's bench.py: evo against every PyTorch SDPA backend, eager and CUDA graph,
#      on the manifest's shapes (the seed shapes and (4,16,4096,128)), fp16 and bf16, causal
#      and not,
#   5. bench/gpu/artifact_torch_test.py: torch.compile(fullgraph=True) and
#      mode="reduce-overhead", CUDA-graph capture, the op's own fallback,
#   6. bench/gpu/artifact_transformers.py: a random Llama-style model with
#      attn_implementation "sdpa" and "evo": logits errors, forward latency,
#   7. the artifact's example.cpp built against kernel.h (nvcc, else g++) and run on every variant,
#   8. evo verify of the artifact, with the time left (VERIFY_UNTIL_S, default 470 s into the run),
# and prints the benchmark table last. Logs under $OUT: gpu.txt, search_mma.txt,
# search_hopper.txt, torch_mma.txt, torch_hopper.txt, export.txt, bench.txt, bench.json, torch_test.txt, transformers.txt,
# example.txt, verify.txt; the artifact (artifact/) and the database (artifact.db).
# ARTIFACT_DB=FILE skips the searches and exports runs `mma`, `hopper` and (HOPPER64_BUDGET not 0) `hopper64` of that database.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=${EVO:-$PWD/.gpu/evo}
ART=$OUT/artifact
step() { echo; echo "== [$((SECONDS))s] $*"; }

step "machine"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} 2>&1 | tee "$OUT/gpu.txt"

if [ -n "${ARTIFACT_DB:-}" ]; then
  DB=$ARTIFACT_DB
else
  DB=$OUT/artifact.db
  rm -f "$DB" "$DB"-*
  step "evo search -c configs/sdpa.toml (${MMA_BUDGET:-90s})"
  $EVO search -c configs/sdpa.toml --run mma --db "$DB" --budget "${MMA_BUDGET:-90s}" --no-progress 2>&1 \
    | grep -v " INFO " | tail -n 20 | tee "$OUT/search_mma.txt"
  step "evo search -c configs/sdpa_wgmma_quick.toml (${HOPPER_BUDGET:-120s})"
  $EVO search -c configs/sdpa_wgmma_quick.toml --run hopper --db "$DB" --budget "${HOPPER_BUDGET:-120s}" --no-progress 2>&1 \
    | grep -v " INFO " | tail -n 20 | tee "$OUT/search_hopper.txt"
  if [ "${HOPPER64_BUDGET:-90s}" != 0 ]; then
    step "evo search -c configs/sdpa_wgmma_hd64_search.toml (${HOPPER64_BUDGET:-90s})"
    $EVO search -c configs/sdpa_wgmma_hd64_search.toml --run hopper64 --db "$DB" --budget "${HOPPER64_BUDGET:-90s}" \
      --no-progress 2>&1 | grep -v " INFO " | tail -n 20 | tee "$OUT/search_hopper64.txt"
  fi
  # One self-contained file (the write-ahead log folded in) to carry back.
  python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('pragma wal_checkpoint(TRUNCATE)')" "$DB"
fi

# PyTorch's SDPA on each run's shapes, imported as the run's baseline: the quick configs'
# baselines are their first seeds, and the per-shape export marks (sends to PyTorch's SDPA in
# evo_kernel.py) only shapes where a PyTorch baseline was faster than 1.05x the variant's time
# (--min-speedup). TORCH_BASELINE=0 skips it.
if [ "${TORCH_BASELINE:-1}" = 1 ]; then
  for pair in mma:configs/sdpa.toml hopper:configs/sdpa_wgmma_quick.toml; do
    run=${pair%%:*}; cfg=${pair#*:}
    step "PyTorch SDPA on $cfg, imported as run $run's baseline"
    timeout 150 python3 scripts/torch_sdpa_baseline.py "$cfg" --out "$OUT/torch_$run.json" > "$OUT/torch_$run.txt" 2>&1 \
      && $EVO baseline import --run "$run" --db "$DB" "$OUT/torch_$run.json" 2>&1 | tail -n 3 | tee -a "$OUT/torch_$run.txt"
  done
fi

RUNS="mma hopper"
[ "${HOPPER64_BUDGET:-90s}" != 0 ] && RUNS="$RUNS hopper64"
step "evo export $RUNS --per-shape"
rm -rf "$ART"
$EVO export $RUNS --per-shape --db "$DB" --out "$ART" 2>&1 | tee "$OUT/export.txt"
if [ ! -f "$ART/manifest.json" ]; then
  echo "export failed: nothing to benchmark (see $OUT/export.txt)"
  exit 1
fi

step "python3 $ART/bench.py"
timeout 240 python3 "$ART/bench.py" --out "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
echo "bench exit: $?" | tee -a "$OUT/bench.txt"
grep "^  " "$OUT/bench.txt" | head -n 40

step "torch.compile and CUDA-graph tests"
timeout 150 python3 bench/gpu/artifact_torch_test.py "$ART" 2>&1 | grep -v "^W[0-9]" | tee "$OUT/torch_test.txt"
echo "torch tests exit: ${PIPESTATUS[0]}" | tee -a "$OUT/torch_test.txt"

step "transformers (a random Llama-style model, sdpa vs evo)"
timeout 120 python3 bench/gpu/artifact_transformers.py "$ART" 2>&1 | tee "$OUT/transformers.txt"
echo "transformers exit: ${PIPESTATUS[0]}" | tee -a "$OUT/transformers.txt"

step "example.cpp (kernel.h from C++)"
{
  INCLUDE=$($EVO doctor 2>/dev/null | awk '$1 == "headers" {print $2; exit}')
  for d in "$INCLUDE" "${CUDA_HOME:-/usr/local/cuda}/include" /usr/local/cuda/include; do
    if [ -n "$d" ] && [ -f "$d/cuda.h" ]; then INCLUDE=$d; break; fi
  done
  LIBCUDA=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF; exit}')
  CXX=""
  for c in nvcc /usr/local/cuda/bin/nvcc g++ c++; do
    if command -v "$c" > /dev/null; then CXX=$c; break; fi
  done
  echo "compiler: ${CXX:-none}; cuda.h from: ${INCLUDE:-none}; driver: ${LIBCUDA:-none}"
  if [ -z "$CXX" ] || [ ! -f "$INCLUDE/cuda.h" ] || [ -z "$LIBCUDA" ]; then
    echo "example.cpp: cannot build here (a C++ compiler, cuda.h and libcuda.so.1 are needed)"
  else
    # nvcc takes no bare library path ("Don't know what to do with libcuda.so.1" on the
    # H100): it links -lcuda from the toolkit's stubs; g++ links the driver's file.
    case "$CXX" in
      *nvcc) FLAGS="-std=c++17 -O2"; LINK="-lcuda" ;;
      *) FLAGS="-std=c++17 -O2 -Wall"; LINK="$LIBCUDA" ;;
    esac
    if $CXX $FLAGS -I "$ART" -I "$INCLUDE" "$ART/example.cpp" -o "$OUT/example" $LINK; then
      for v in $(python3 -c "import json, sys; print(' '.join(v['name'] for v in json.load(open(sys.argv[1]))['variants']))" "$ART/manifest.json"); do
        timeout 60 "$OUT/example" "$ART" "$v"
        echo "example $v exit: $?"
      done
    else
      echo "example.cpp: the build failed"
    fi
  fi
} 2>&1 | tee "$OUT/example.txt"

left=$(( ${VERIFY_UNTIL_S:-470} - SECONDS ))
step "evo verify (at most ${left}s)"
if [ "$left" -gt 20 ]; then
  timeout "$left" $EVO verify "$ART" > "$OUT/verify.txt" 2>&1
  echo "verify exit: $? (124: cut at ${left}s)" >> "$OUT/verify.txt"
else
  echo "no time left for verify" > "$OUT/verify.txt"
fi
tail -n 40 "$OUT/verify.txt"

step "benchmark table ($ART/bench.py)"
sed -n '/^eager: plain loop/,$p' "$OUT/bench.txt"
echo "total ${SECONDS}s"
