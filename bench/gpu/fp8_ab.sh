#!/usr/bin/env bash
# Issue 19, the Hopper FP8 family sdpa_fwd_fp8_ws on an H100/H200, from the repo root with the
# release binary at .gpu/evo and PyTorch; no network. Logs, JSON and a final table under $OUT.
# Every step has its own time limit and the whole stays within FP8_AB_BUDGET_S seconds (default
# 420): a step that would start past it is skipped (said in commands.txt).
#  1. check: correctness (every gate, default and edge shapes of configs/sdpa_fp8_wgmma.toml,
#     causal and not, no timing) of a covering set of sdpa_fwd_fp8_ws (evo eval --cover).
#  2. ab: PyTorch SDPA fp16 (every backend, scripts/torch_sdpa_baseline.py) on the shapes of
#     bench/gpu/fp8_ab_shapes.toml ((4,16,4096,128), (1,16,16384,128), (4,16,4096,64), causal and
#     not), then on the same shapes the genomes of bench/gpu/fp8_ab_genomes.txt: the new family's
#     candidates, the previous FP8 family's best (47a897e6) and the fp16 family's 01815f20-L.
#  3. table: per shape and genome kernel us, TFLOP/s, ratio to cuDNN fp16 (bench/gpu/fp8_ab_table.py).
#  4. ncu (NCU=1, or in --phases): Nsight Compute on one launch at (4,16,4096,128) of the new
#     family's first two genomes and the old family's best: tensor (gmma) pipe and exp2 unit (XU
#     pipe) activity, issue slots busy, instructions executed, duration.
# Usage: bench/gpu/fp8_ab.sh [--phases check,ab,ncu] [--dry-run] [--table]
#   --dry-run  print every command instead of running it (no GPU needed)
#   --table    only (re)print the table from the JSON already under $OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/evo-out}
EVO=${EVO:-$PWD/.gpu/evo}
GENOMES=bench/gpu/fp8_ab_genomes.txt
SHAPES=bench/gpu/fp8_ab_shapes.toml
PHASES=check,ab
[ "${NCU:-0}" = 1 ] && PHASES=$PHASES,ncu
DRY=0
TABLE_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --phases) PHASES=${2:?--phases needs a list, e.g. check,ab}; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --table) TABLE_ONLY=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "fp8_ab.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for p in ${PHASES//,/ }; do
  case "$p" in check|ab|ncu) ;; *) echo "fp8_ab.sh: unknown phase $p (check, ab, ncu)" >&2; exit 2 ;; esac
done
has_phase() { [[ ",$PHASES," == *",$1,"* ]]; }
mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
BUDGET=${FP8_AB_BUDGET_S:-420}

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

# The genomes of one code (new, old, f16) as -g arguments.
genomes_of() {
  sed 's/#.*//' "$GENOMES" | awk -v c="$1" 'NF == 4 && $2 == c {print "-g"; print $4}'
}

table() {
  local evals=()
  for f in "$OUT"/ab_*.json; do [ -e "$f" ] && evals+=(--eval "$f"); done
  python3 bench/gpu/fp8_ab_table.py --genomes "$GENOMES" --torch "$OUT/torch_ab.json" "${evals[@]}" \
    --json "$OUT/ab_summary.json" | tee "$OUT/table.txt"
}

if [ $TABLE_ONLY = 1 ]; then table; exit 0; fi
if [ $DRY = 0 ]; then
  [ -x "$EVO" ] || { echo "fp8_ab.sh: no evo binary at $EVO (build it into .gpu/ first)" >&2; exit 3; }
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
fi

tmp=$(mktemp -d)
# Configs derived from the checked-in ones: the check shapes (configs/sdpa_fp8_wgmma.toml's five
# default shapes, edge shapes added by the gate) with the new family, causal and not; the timing
# shapes with the previous FP8 family and with the fp16 family (problem sdpa_fwd).
sed 's/^family = .*/family = "sdpa_fwd_fp8_ws"/' configs/sdpa_fp8_wgmma.toml > "$tmp/check.toml"
sed 's/^CAUSAL = false/CAUSAL = true/' "$tmp/check.toml" > "$tmp/check_causal.toml"
sed 's/^family = .*/family = "sdpa_fwd_fp8_wgmma"/' "$SHAPES" > "$tmp/ab_old.toml"
sed -e 's/^problem = .*/problem = "sdpa_fwd"/' -e 's/^family = .*/family = "sdpa_fwd_wgmma"/' "$SHAPES" > "$tmp/ab_f16.toml"

if has_phase check; then
  run 70 "$OUT/check_ws.txt" "$EVO" eval -c "$tmp/check.toml" --templates templates --cover --no-timing
  run 70 "$OUT/check_ws_causal.txt" "$EVO" eval -c "$tmp/check_causal.toml" --templates templates --cover --no-timing
  if [ $DRY = 0 ]; then
    bad=$(cat "$OUT"/check_*.txt | grep -cE "incorrect|crashed|timed_out|launch_failed|compile_failed|render_failed|rejected_static|regressed")
    echo "check: $bad lines with a failing status in $OUT/check_*.txt (0: every covering genome evaluated)" | tee "$OUT/check_summary.txt"
  fi
fi

if has_phase ab; then
  run 60 "$OUT/torch_ab.txt" python3 scripts/torch_sdpa_baseline.py "$SHAPES" --out "$OUT/torch_ab.json"
  mapfile -t G_NEW < <(genomes_of new)
  mapfile -t G_OLD < <(genomes_of old)
  mapfile -t G_F16 < <(genomes_of f16)
  run 150 "$OUT/ab_new.json" "$EVO" --json eval -c "$SHAPES" --templates templates "${G_NEW[@]}"
  run 30 "$OUT/ab_old.json" "$EVO" --json eval -c "$tmp/ab_old.toml" --templates templates "${G_OLD[@]}"
  run 30 "$OUT/ab_f16.json" "$EVO" --json eval -c "$tmp/ab_f16.toml" --templates templates "${G_F16[@]}"
  [ $DRY = 1 ] || table
fi
if has_phase ncu; then
  METRICS=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
  # (4,16,4096,128) alone, non-causal: the timing config's first shape.
  awk '/^\[\[shapes\]\]/{n++} /^\[compile\]/{rest=1} n <= 1 || rest' "$SHAPES" > "$tmp/ncu_new.toml"
  sed 's/^family = .*/family = "sdpa_fwd_fp8_wgmma"/' "$tmp/ncu_new.toml" > "$tmp/ncu_old.toml"
  mapfile -t NEW2 < <(sed 's/#.*//' "$GENOMES" | awk 'NF == 4 && $2 == "new" {print $1, $4}' | head -2)
  for entry in "${NEW2[@]}" "$(sed 's/#.*//' "$GENOMES" | awk 'NF == 4 && $2 == "old" {print $1, $4; exit}')"; do
    name=${entry%% *}; genome=${entry#* }
    cfg=$tmp/ncu_new.toml; [[ $name == old-* ]] && cfg=$tmp/ncu_old.toml
    run 120 "$OUT/ncu_$name.csv" ncu --target-processes all -k regex:sdpa_fwd_fp8 --launch-skip 2 --launch-count 1 \
      --metrics "$METRICS" --csv "$EVO" eval -c "$cfg" --templates templates -g "$genome" --no-timing
  done
fi
cp "$tmp"/*.toml "$OUT/" 2>/dev/null
echo "total ${SECONDS}s"
