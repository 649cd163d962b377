#!/usr/bin/env bash
# Issue 18, the Hopper attention kernel's A/B on an H100/H200, from the repo root with the release
# binary at .gpu/evo and PyTorch; no network. Logs, JSON and a final table under $OUT. Every step
# has its own time limit and the whole stays within KERNEL_AB_BUDGET_S seconds (default 450): a
# step that would start past it is skipped (said in commands.txt), and the table shows what ran.
#  1. check: correctness (every gate, default and edge shapes, causal and not, no timing) of a
#     covering set of the widened sdpa_fwd_wgmma, of its split-KV family, and of the families
#     sharing templates/common/softmax.cuh (sdpa_fwd_mma, sdpa_fwd_fp8_mma, sdpa_fwd_fp8_wgmma).
#  2. ab: PyTorch SDPA (every backend, scripts/torch_sdpa_baseline.py) on the A/B shapes, then
#     the genomes of bench/gpu/kernel_ab_genomes.txt timed on (4,16,4096,128), (4,16,4096,64),
#     the five default shapes and (1,16,16384,128), causal and not (kernel_ab_<set>.toml): the
#     previous kernel ("old": templates from $BASELINE_TEMPLATES, e.g. made by
#     bench/kernel/baseline_templates.sh) against the new one (./templates).
#  3. ncu (NCU=1, or in --phases): Nsight Compute on one launch at (4,16,4096,128) of the old
#     01815f20 and the new 01815f20-L and 01815f20-LP (persistent): tensor (gmma) pipe active, issue slots busy,
#     instructions executed, L2 and DRAM throughput, duration (ncu around evo eval --no-timing,
#     its worker processes included, the third sdpa_fwd launch of each).
# Usage: bench/gpu/kernel_ab.sh [--phases check,ab,ncu] [--dry-run] [--table]
#   --dry-run  print every command instead of running it (no GPU needed)
#   --table    only (re)print the table from the JSON already under $OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/evo-out}
EVO=${EVO:-$PWD/.gpu/evo}
BASE_T=${BASELINE_TEMPLATES:-bench/gpu/baseline-templates}
GENOMES=bench/gpu/kernel_ab_genomes.txt
PHASES=check,ab
DRY=0
TABLE_ONLY=0
[ "${NCU:-0}" = 1 ] && PHASES=$PHASES,ncu
while [ $# -gt 0 ]; do
  case "$1" in
    --phases) PHASES=${2:?--phases needs a list, e.g. check,ab}; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --table) TABLE_ONLY=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "kernel_ab.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for p in ${PHASES//,/ }; do
  case "$p" in check|ab|ncu) ;; *) echo "kernel_ab.sh: unknown phase $p (check, ab, ncu)" >&2; exit 2 ;; esac
done
has_phase() { [[ ",$PHASES," == *",$1,"* ]]; }
mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache

BUDGET=${KERNEL_AB_BUDGET_S:-450}

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

# A config of configs/ with CAUSAL = true in its [spec].
causal_copy() { sed 's/^CAUSAL = false/CAUSAL = true/' "$1" > "$2"; }

table() {
  local evals=()
  for f in "$OUT"/ab_*.json; do [ -e "$f" ] && evals+=(--eval "$f"); done
  python3 bench/gpu/kernel_ab_table.py --genomes "$GENOMES" --torch "$OUT/torch_ab.json" "${evals[@]}" \
    --json "$OUT/ab_summary.json" | tee "$OUT/table.txt"
}

if [ $TABLE_ONLY = 1 ]; then table; exit 0; fi
if [ $DRY = 0 ]; then
  [ -x "$EVO" ] || { echo "kernel_ab.sh: no evo binary at $EVO (build it into .gpu/ first)" >&2; exit 3; }
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
fi

if has_phase check; then
  tmp=$(mktemp -d)
  for c in sdpa_wgmma sdpa_wgmma_splitkv sdpa sdpa_fp8 sdpa_fp8_wgmma; do causal_copy configs/$c.toml "$tmp/${c}_causal.toml"; done
  run 100 "$OUT/check_wgmma.txt" "$EVO" eval -c configs/sdpa_wgmma.toml --cover --no-timing
  run 100 "$OUT/check_wgmma_causal.txt" "$EVO" eval -c "$tmp/sdpa_wgmma_causal.toml" --templates templates --cover --no-timing
  run 60 "$OUT/check_splitkv_causal.txt" "$EVO" eval -c "$tmp/sdpa_wgmma_splitkv_causal.toml" --templates templates --cover --no-timing
  run 45 "$OUT/check_mma.txt" "$EVO" eval -c configs/sdpa.toml --cover --no-timing
  run 45 "$OUT/check_fp8_causal.txt" "$EVO" eval -c "$tmp/sdpa_fp8_causal.toml" --templates templates --cover --no-timing
  run 45 "$OUT/check_fp8_wgmma.txt" "$EVO" eval -c configs/sdpa_fp8_wgmma.toml --cover --no-timing
  if [ $DRY = 0 ]; then
    bad=$(cat "$OUT"/check_*.txt | grep -cE "incorrect|crashed|timed_out|launch_failed|compile_failed|render_failed|rejected_static|regressed")
    echo "check: $bad lines with a failing status in $OUT/check_*.txt (0: every covering genome evaluated)" | tee "$OUT/check_summary.txt"
  fi
fi

if has_phase ab; then
  run 120 "$OUT/torch_ab.txt" python3 scripts/torch_sdpa_baseline.py bench/gpu/kernel_ab_torch.toml --out "$OUT/torch_ab.json"
  [ -d "$BASE_T" ] || echo "note: no previous templates at $BASE_T: the old genomes are left out (bench/kernel/baseline_templates.sh makes them)" | tee -a "$OUT/commands.txt"
  # Per shape set, the genomes of each code (old, new) in one evo eval.
  for set in d128 d64 short 16k; do
    case $set in d128) limit=90 ;; d64) limit=60 ;; short) limit=45 ;; 16k) limit=90 ;; esac
    for code in old new; do
      G=()
      while read -r name tmpl sets genome; do
        [ -z "${name:-}" ] && continue
        [ "$tmpl" = "$code" ] && [[ ",$sets," == *",$set,"* ]] && G+=(-g "$genome")
      done < <(sed 's/#.*//' "$GENOMES")
      [ ${#G[@]} = 0 ] && continue
      if [ $code = old ]; then
        [ -d "$BASE_T" ] || continue
        run $limit "$OUT/ab_${set}_old.json" "$EVO" --json eval -c bench/gpu/kernel_ab_$set.toml --templates "$BASE_T" "${G[@]}"
      else
        run $limit "$OUT/ab_${set}_new.json" "$EVO" --json eval -c bench/gpu/kernel_ab_$set.toml --templates templates "${G[@]}"
      fi
    done
  done
  [ $DRY = 1 ] || table
fi

if has_phase ncu; then
  METRICS=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
  for name in old-01815f20 new-01815f20-L new-01815f20-LP; do
    read -r tmpl genome < <(sed 's/#.*//' "$GENOMES" | awk -v n="$name" '$1 == n {print $2, $4}')
    t=templates; [ "$tmpl" = old ] && t=$BASE_T
    [ -d "$t" ] || continue
    run 120 "$OUT/ncu_$name.csv" ncu --target-processes all -k regex:sdpa_fwd --launch-skip 2 --launch-count 1 \
      --metrics "$METRICS" --csv "$EVO" eval -c bench/gpu/kernel_ab_d128.toml --templates "$t" -g "$genome" --no-timing
  done
fi
echo "total ${SECONDS}s"
