#!/usr/bin/env bash
# Issue 19 end to end: FP8 attention from fp16/bf16 on an H100/H200 (family sdpa_fwd_fp8_e2e_ws:
# the two-pass quantizer into e4m3 scratch, then sdpa_fwd_fp8_ws's kernel over TMA maps of the
# scratch codes, timed as one call; sdpa_fwd_fp8_e2e_ws_cluster: the same with a one-pass cluster
# quantizer). From the repo root with the release binary at .gpu/evo and PyTorch; no network.
# Logs, JSON and the tables under $OUT. Every step has its own time limit and the whole stays
# within FP8_E2E_BUDGET_S seconds (default 480): a step that would start past it is skipped (said
# in commands.txt; run the skipped phases in a second call with --phases).
#  1. check: the GPU tests that compare both quantizers' codes and descales with the host rule
#     bit for bit (crates/evo-eval/tests/gpu_multi_kernel.rs, from .gpu/tests.tar.zst); every gate
#     but timing (seeded and adversarial trials, edge shapes, repeat launch, guards) at the shapes
#     of configs/sdpa_fp8_e2e_ws.toml (f16 and bf16, head dims 64 and 128, causal and not): the
#     first two genomes of bench/gpu/fp8_e2e_genomes.txt end to end, the first one with the
#     cluster quantizer at its four schedules (QUANT_CLUSTER 8/16 x QUANT_CTAS_PER_SM 1/3).
#  2. ab: PyTorch SDPA (every backend, scripts/torch_sdpa_baseline.py: times and relative L2
#     against float64) on the config's shapes, then on the same shapes the first two genomes end
#     to end (problem sdpa_fwd_fp8_e2e), the first with the cluster quantizer at its four
#     schedules, and both kernel only
#     (family sdpa_fwd_fp8_ws on problem sdpa_fwd_fp8: inputs already e4m3), one random trial
#     each (the check phase did the rest); the table (bench/gpu/fp8_e2e_table.py): per shape and
#     genome the end-to-end (both quantizers) and kernel-only times, each quantizer's share and
#     implied GB/s, cuDNN/e2e, cuDNN/kernel, and the errors against attention on the original
#     inputs beside cuDNN's own.
#  3. artifact: a small run (`evo search`, the two genomes with the cluster quantizer on clusters
#     of 16 CTAs, on (4,16,4096,128) f16, causal and not; the search sanitizes its best), `evo
#     export` of it, and bench/gpu/fp8_e2e_artifact.py: the artifact's Python entry point called
#     with fp16 tensors (quantizing inside, strict: no fallback), its error against float64
#     beside F.scaled_dot_product_attention's, eager time per call of both; the artifact's
#     example.cpp (kernel.h) on every variant; then `evo verify` of the artifact with what is
#     left of the budget.
# FP8_E2E_SPLIT=0 leaves the two-pass family out of the check and ab phases (and times kernel only
# the first genome alone: the one the cluster family runs).
# Usage: bench/gpu/fp8_e2e.sh [--phases check,ab,artifact] [--dry-run] [--table]
#   --dry-run  print every command instead of running it (no GPU needed)
#   --table    only (re)print the table from the JSON already under $OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/evo-out}
EVO=${EVO:-$PWD/.gpu/evo}
CONFIG=configs/sdpa_fp8_e2e_ws.toml
GENOMES=bench/gpu/fp8_e2e_genomes.txt
PHASES=check,ab,artifact
DRY=0
TABLE_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --phases) PHASES=${2:?--phases needs a list, e.g. check,ab}; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --table) TABLE_ONLY=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ {print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "fp8_e2e.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for p in ${PHASES//,/ }; do
  case "$p" in check|ab|artifact) ;; *) echo "fp8_e2e.sh: unknown phase $p (check, ab, artifact)" >&2; exit 2 ;; esac
done
has_phase() { [[ ",$PHASES," == *",$1,"* ]]; }
mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
BUDGET=${FP8_E2E_BUDGET_S:-480}
SPLIT=${FP8_E2E_SPLIT:-1}

# run LIMIT LOG CMD...: the command under a time limit (cut to what is left of the budget, less
# 15 s for the table), stdout to LOG (stderr to LOG.err).
run() {
  local limit=$1 log=$2; shift 2
  if [ $DRY = 1 ]; then echo "[dry-run] timeout $limit $* > $log"; return 0; fi
  local left=$((BUDGET - SECONDS - 15))
  if [ $left -lt 20 ]; then
    echo "== [${SECONDS}s] skipped (budget of ${BUDGET}s spent): $*" | tee -a "$OUT/commands.txt"
    return 0
  fi
  [ $limit -gt $left ] && limit=$left
  echo "== [${SECONDS}s] (limit ${limit}s) $*" | tee -a "$OUT/commands.txt"
  timeout "$limit" "$@" > "$log" 2> "$log.err"
  local rc=$?
  echo "   exit $rc ($log)" | tee -a "$OUT/commands.txt"
  [ $rc = 124 ] && echo "   (cut at ${limit}s)" | tee -a "$OUT/commands.txt"
  return 0
}

# The genomes of the file (the first N, default all) as -g arguments.
genome_args() {
  sed 's/#.*//' "$GENOMES" | awk -v n="${1:-999}" 'NF == 2 && c++ < n {print "-g"; print $2}'
}

table() {
  python3 bench/gpu/fp8_e2e_table.py --genomes "$GENOMES" --torch "$OUT/torch_ab.json" \
    --e2e "$OUT/ab_e2e.json" --cluster "$OUT/ab_cluster.json" --kernel "$OUT/ab_kernel.json" \
    --json "$OUT/ab_summary.json" | tee "$OUT/table.txt"
}

if [ $TABLE_ONLY = 1 ]; then table; exit 0; fi
if [ $DRY = 0 ]; then
  [ -x "$EVO" ] || { echo "fp8_e2e.sh: no evo binary at $EVO (build it into .gpu/ first)" >&2; exit 3; }
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c "import torch; print('torch', torch.__version__)"; } 2>&1 | tee "$OUT/gpu.txt"
fi

tmp=$(mktemp -d)
# Configs derived from the checked-in one (its lines before the named table): the check keeps
# its correctness settings (every gate); the timing configs one random trial per shape, no
# adversarial inputs, edge shapes or repeat launch (as bench/gpu/fp8_ab_shapes.toml), end to end
# and kernel only.
before() { awk -v t="[$1]" '$0 == t {exit} {print}' "$2"; }
before search "$CONFIG" > "$tmp/check.toml"
{ before correctness "$CONFIG"
  printf '[correctness]\nrandom_trials = 1\nadversarial = false\nrepeat_check = false\nedge_shapes = false\n\n'
  printf '[timing]\nbudget_ms = 300\nmin_samples = 8\n'; } > "$tmp/time_e2e.toml"
sed -e 's/^problem = .*/problem = "sdpa_fwd_fp8"/' -e 's/^family = .*/family = "sdpa_fwd_fp8_ws"/' \
  "$tmp/time_e2e.toml" > "$tmp/time_kernel.toml"
cluster='s/^family = .*/family = "sdpa_fwd_fp8_e2e_ws_cluster"/'
sed "$cluster" "$tmp/check.toml" > "$tmp/check_cluster.toml"
sed "$cluster" "$tmp/time_e2e.toml" > "$tmp/time_cluster.toml"

mapfile -t G_ONE < <(genome_args 1)
mapfile -t G_TWO < <(genome_args 2)
# The cluster family: the first genome at each quantizer schedule (QUANT_CLUSTER x
# QUANT_CTAS_PER_SM; bench/kernel/quant_bench.cu found the best one differing by shape).
SCHEDULES=(QUANT_CLUSTER=8,QUANT_CTAS_PER_SM=1 QUANT_CLUSTER=8,QUANT_CTAS_PER_SM=3
           QUANT_CLUSTER=16,QUANT_CTAS_PER_SM=1 QUANT_CLUSTER=16,QUANT_CTAS_PER_SM=3)
G_CLUSTER=()
for s in "${SCHEDULES[@]}"; do G_CLUSTER+=(-g "${G_ONE[1]},$s"); done
if has_phase check; then
  run 60 "$OUT/quantizer_tests.txt" .gpu/cargo-nextest nextest run --archive-file .gpu/tests.tar.zst \
    --workspace-remap . --no-fail-fast --no-capture \
    -E 'test(split_quantizer_is_the_one_pass_rule_bit_for_bit) | test(cluster_quantizer_is_the_one_pass_rule_bit_for_bit)'
  [ "$SPLIT" = 0 ] || run 120 "$OUT/check.txt" "$EVO" eval -c "$tmp/check.toml" --templates templates --no-timing "${G_TWO[@]}"
  run 300 "$OUT/check_cluster.txt" "$EVO" eval -c "$tmp/check_cluster.toml" --templates templates --no-timing "${G_CLUSTER[@]}"
  if [ $DRY = 0 ]; then
    bad=$(cat "$OUT"/check*.txt | grep -cE "incorrect|crashed|timed_out|launch_failed|compile_failed|render_failed|rejected_static")
    echo "check: $bad lines with a failing status in $OUT/check*.txt (0: every genome evaluated at every shape)" | tee "$OUT/check_summary.txt"
    # nextest reports each test on stderr: PASS / FAIL / SKIP lines.
    cat "$OUT/quantizer_tests.txt" "$OUT/quantizer_tests.txt.err" 2>/dev/null | grep -E "^ *(PASS|FAIL|SIGSEGV|TIMEOUT)|skipping|bit for bit|equal to the host rule" \
      | tee -a "$OUT/check_summary.txt"
  fi
fi

if has_phase ab; then
  run 80 "$OUT/torch_ab.txt" python3 scripts/torch_sdpa_baseline.py "$tmp/time_e2e.toml" --out "$OUT/torch_ab.json"
  [ "$SPLIT" = 0 ] || run 100 "$OUT/ab_e2e.json" "$EVO" --json eval -c "$tmp/time_e2e.toml" --templates templates "${G_TWO[@]}"
  run 240 "$OUT/ab_cluster.json" "$EVO" --json eval -c "$tmp/time_cluster.toml" --templates templates "${G_CLUSTER[@]}"
  if [ "$SPLIT" = 0 ]; then G_KERNEL=("${G_ONE[@]}"); else G_KERNEL=("${G_TWO[@]}"); fi
  run 120 "$OUT/ab_kernel.json" "$EVO" --json eval -c "$tmp/time_kernel.toml" --templates templates "${G_KERNEL[@]}"
  [ $DRY = 1 ] || table
fi

if has_phase artifact; then
  # A two-genome run on (4,16,4096,128) f16, causal and not: what an export needs (a run whose
  # best passed every gate and compute-sanitizer). Its baseline: PyTorch's time from the ab
  # phase where there is one, else its first seed.
  DB=$OUT/fp8_e2e.db
  ART=$OUT/artifact
  rm -rf "$DB" "$DB"-* "$ART"
  mapfile -t SEEDS < <(sed 's/#.*//' "$GENOMES" | awk 'NF == 2 && c++ < 2 {print $2}')
  baseline=""
  [ -s "$OUT/torch_ab.json" ] && baseline="baseline = \"import:$OUT/torch_ab.json\""
  cat > "$tmp/artifact.toml" <<EOF
# bench/gpu/fp8_e2e.sh's artifact run: configs/sdpa_fp8_e2e_ws.toml on (4,16,4096,128) f16, the
# cluster quantizer on clusters of 16 (non-portable: the loaders must allow them).
problem = "sdpa_fwd_fp8_e2e"
family = "sdpa_fwd_fp8_e2e_ws_cluster"

[spec]
DTYPE = "f16"
CAUSAL = false

[[shapes]]
BATCH = 4
HEADS = 16
SEQ_Q = 4096
SEQ_KV = 4096
HEAD_DIM = 128

[[shapes]]
BATCH = 4
HEADS = 16
SEQ_Q = 4096
SEQ_KV = 4096
HEAD_DIM = 128
CAUSAL = true

[compile]
arch = "auto"
options = ["-std=c++17", "-lineinfo"]

[correctness]
random_trials = 1

[search]
strategy = "random"
population = 2
elites = 1
$baseline
seeds = ["${SEEDS[0]:-},QUANT_CLUSTER=16,QUANT_CTAS_PER_SM=3", "${SEEDS[1]:-},QUANT_CLUSTER=16,QUANT_CTAS_PER_SM=1"]
patience = 0
EOF
  run 120 "$OUT/artifact_search.txt" "$EVO" search -c "$tmp/artifact.toml" --templates templates --run e2e \
    --db "$DB" --budget 2evals --no-progress
  run 45 "$OUT/artifact_export.txt" "$EVO" export e2e --db "$DB" --templates templates --out "$ART"
  if [ $DRY = 1 ] || [ -f "$ART/manifest.json" ]; then
    run 60 "$OUT/artifact_python.txt" python3 bench/gpu/fp8_e2e_artifact.py "$ART" --json "$OUT/artifact_python.json"
    [ $DRY = 1 ] || cat "$OUT/artifact_python.txt"
    # kernel.h from C++: example.cpp on every variant (nvcc links the toolkit's -lcuda stub).
    if [ $DRY = 1 ] || command -v nvcc > /dev/null; then
      run 60 "$OUT/artifact_example_build.txt" nvcc -std=c++17 -O2 -I "$ART" -I /usr/local/cuda/include \
        "$ART/example.cpp" -o "$tmp/example" -lcuda
      for v in $([ $DRY = 1 ] || python3 -c "import json, sys; print(' '.join(v['name'] for v in json.load(open(sys.argv[1]))['variants']))" "$ART/manifest.json"); do
        run 60 "$OUT/artifact_example_$v.txt" "$tmp/example" "$ART" "$v"
      done
    fi
    # The artifact's own CUBINs through evo's gates again, if the budget leaves time.
    run 60 "$OUT/artifact_verify.txt" "$EVO" verify "$ART" --templates templates
  else
    echo "artifact: no manifest under $ART (see $OUT/artifact_export.txt*)" | tee -a "$OUT/commands.txt"
  fi
  # One self-contained database file (the write-ahead log folded in) to carry back.
  [ $DRY = 1 ] || [ ! -f "$DB" ] || python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('pragma wal_checkpoint(TRUNCATE)')" "$DB"
fi
cp "$tmp"/*.toml "$OUT/" 2>/dev/null
echo "total ${SECONDS}s"
