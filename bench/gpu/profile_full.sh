#!/usr/bin/env bash
# Issue 18 at head dim 64, on an H100/H200 from the repo root (.gpu/evo, PyTorch, ncu); logs under
# $OUT. Phases (--phases, default ab,ncu), within PROFILE_BUDGET_S seconds (default 540):
#  ab:  per config of PROFILE_CONFIGS (default bench/gpu/kernel_ab_hd64.toml: (1|2,8,512,64),
#       (2|4,8,2048,64), causal and not), PyTorch SDPA (every backend) and the genomes of
#       PROFILE_GENOMES (default bench/gpu/profile_genomes.txt) valid there, one process each,
#       CUDA graphs over inputs rotated past L2; table in $OUT/ab_<config>_table.txt. With
#       PROFILE_BASELINE=DIR (templates of an earlier commit, bench/kernel/baseline_templates.sh)
#       the same genomes also run on those, in the same call: "old" rows and new/old per shape.
#  gate: every gate but timing (default and edge shapes, adversarial inputs) on the genomes of
#       PROFILE_GENOMES, with each config of PROFILE_GATE_CONFIGS (default configs/sdpa_wgmma.toml:
#       head dims 64 and 128), causal and not; then compute-sanitizer (memcheck, racecheck,
#       synccheck through `evo profile`) on each PROFILE_SANITIZE entry (NAME@B,H,S,D, with the
#       first gate config's family; none by default).
#  ncu: Nsight Compute's full set with per-instruction warp-stall samples on one launch of each
#       PROFILE_TARGETS entry (NAME@B,H,S,D; NAME from profile_genomes.txt, or "cudnn" for
#       PyTorch's cuDNN SDPA, its third launch): $OUT/prof_<NAME>_<S>_details.csv (every section)
#       and _sass.csv (the SASS with its stall samples). evo's kernel runs through
#       `evo profile` (its launch plan) and `evo run-once`, one process, no worker, with the
#       family and problem of PROFILE_NCU_CONFIG (default bench/gpu/kernel_ab_hd64.toml; e.g.
#       bench/gpu/fp8_ab_shapes.toml for the FP8 ws kernel).
# Everything is written to a scratch folder and packed into $OUT/profile.tgz, with the tables,
# gate_summary.txt and commands.txt beside it (the device returns few files).
# Usage: bench/gpu/profile_full.sh [--phases ab,gate,ncu]
set -uo pipefail
cd "$(dirname "$0")/../.."
DEST=${OUT:-/tmp/evo-out}
OUT=$(mktemp -d)
EVO=${EVO:-$PWD/.gpu/evo}
GENOMES=${PROFILE_GENOMES:-bench/gpu/profile_genomes.txt}
CONFIG=bench/gpu/kernel_ab_hd64.toml
CONFIGS=${PROFILE_CONFIGS:-$CONFIG}
NCU_CONFIG=${PROFILE_NCU_CONFIG:-$CONFIG}
NCU_PROBLEM=$(sed -n 's/^problem *= *"\(.*\)"/\1/p' "$NCU_CONFIG")
TARGETS=${PROFILE_TARGETS:-01815f20-L@2,8,2048,64 cudnn@2,8,2048,64 4bb93393-L@1,8,512,64 cudnn@1,8,512,64}
PHASES=ab,ncu
[ "${1:-}" = --phases ] && PHASES=${2:?--phases needs a list}
has_phase() { [[ ",$PHASES," == *",$1,"* ]]; }
mkdir -p "$DEST"
export EVO_CACHE_DIR=$PWD/.evo-cache
BUDGET=${PROFILE_BUDGET_S:-540}
genome_of() { sed 's/#.*//' "$GENOMES" | awk -v n="$1" '$1 == n {print $2}'; }

# run LIMIT LOG CMD...: under a time limit cut to what is left of the budget; stdout to LOG.
run() {
  local limit=$1 log=$2; shift 2
  local left=$((BUDGET - SECONDS - 10))
  if [ $left -lt 15 ]; then echo "== skipped (budget spent): $*" | tee -a "$OUT/commands.txt"; return 0; fi
  [ $limit -gt $left ] && limit=$left
  echo "== [${SECONDS}s] (limit ${limit}s) $*" | tee -a "$OUT/commands.txt"
  timeout "$limit" "$@" > "$log" 2> "$log.err"
  echo "   exit $? ($log)" | tee -a "$OUT/commands.txt"
}

# valid_genomes CONFIG: G=(-g GENOME ...), the genomes of $GENOMES valid for every specialization
# of CONFIG (`evo compile` says which are not; those are left out, said in commands.txt).
valid_genomes() {
  G=()
  while read -r name genome; do
    [ -n "${name:-}" ] || continue
    if "$EVO" compile -c "$1" --templates templates -g "$genome" > /dev/null 2>&1; then G+=(-g "$genome")
    else echo "   $name: not valid for $1 (left out)" | tee -a "$OUT/commands.txt"; fi
  done < <(sed 's/#.*//' "$GENOMES")
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"

if has_phase ab; then
  for cfg in $CONFIGS; do
    tag=$(basename "$cfg" .toml)
    run 150 "$OUT/torch_$tag.txt" python3 scripts/torch_sdpa_baseline.py "$cfg" --out "$OUT/torch_$tag.json"
    valid_genomes "$cfg"
    # The baseline first: unchanged code ran 0.3-2% faster in the first of two back-to-back
    # evals (session 15), so a bias of the order goes against the change.
    old=()
    if [ -n "${PROFILE_BASELINE:-}" ]; then
      run 240 "$OUT/ab_${tag}_old.json" "$EVO" --json eval -c "$cfg" --templates "$PROFILE_BASELINE" "${G[@]}"
      old=(--eval-old "$OUT/ab_${tag}_old.json")
    fi
    run 240 "$OUT/ab_$tag.json" "$EVO" --json eval -c "$cfg" --templates templates "${G[@]}"
    python3 bench/gpu/kernel_ab_table.py --genomes <(sed 's/#.*//' "$GENOMES" | awk 'NF == 2 {print "new-" $1, "new", "short", $2}') \
      --torch "$OUT/torch_$tag.json" --eval "$OUT/ab_$tag.json" "${old[@]}" --json "$OUT/ab_${tag}_summary.json" > "$OUT/ab_${tag}_table.txt" 2>&1
    cat "$OUT/ab_${tag}_table.txt"
  done
fi

if has_phase gate; then
  tmp=$(mktemp -d)
  GATE_CONFIGS=${PROFILE_GATE_CONFIGS:-configs/sdpa_wgmma.toml}
  for cfg in $GATE_CONFIGS; do
    tag=$(basename "$cfg" .toml)
    sed 's/^CAUSAL = false/CAUSAL = true/' "$cfg" > "$tmp/${tag}_causal.toml"
    valid_genomes "$cfg"
    run 200 "$OUT/gate_$tag.txt" "$EVO" eval -c "$cfg" --templates templates --no-timing "${G[@]}"
    run 200 "$OUT/gate_${tag}_causal.txt" "$EVO" eval -c "$tmp/${tag}_causal.toml" --templates templates --no-timing "${G[@]}"
  done
  first=${GATE_CONFIGS%% *}
  for t in ${PROFILE_SANITIZE:-}; do
    name=${t%@*}; shape=${t#*@}
    IFS=, read -r b h s d <<< "$shape"
    for causal in false true; do
      sed "s/^CAUSAL = false/CAUSAL = $causal/" "$first" > "$tmp/sanitize.toml"
      run 150 "$OUT/gate_sanitize_${name}_${b}x${h}x${s}x${d}_$causal.txt" "$EVO" profile -c "$tmp/sanitize.toml" \
        --templates templates -g "$(genome_of "$name")" --shape "BATCH=$b,HEADS=$h,SEQ_Q=$s,SEQ_KV=$s,HEAD_DIM=$d" \
        --tools memcheck,racecheck,synccheck
    done
  done
  bad=$(cat "$OUT"/gate_*.txt | grep -cE "incorrect|crashed|timed_out|launch_failed|compile_failed|render_failed|rejected_static")
  echo "gate: $bad lines with a failing status in $OUT/gate_*.txt" | tee "$OUT/gate_summary.txt"
  grep -H . "$OUT"/gate_sanitize_*.txt >> "$OUT/gate_summary.txt" 2>/dev/null
fi

if has_phase ncu; then
  cat > "$OUT/cudnn_case.py" <<'PY'
import sys, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
B, H, S, D = (int(x) for x in sys.argv[1].split(","))
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
PY
  for t in $TARGETS; do
    name=${t%@*}; shape=${t#*@}
    IFS=, read -r b h s d <<< "$shape"
    tag=${name}_${b}x${h}x${s}x${d}
    rep="$OUT/prof_$tag"
    if [ "$name" = cudnn ]; then
      run 150 "$OUT/prof_$tag.log" ncu --set full --import-source yes -k 'regex:sdpa|fprop|fmha|flash|attn' \
        --launch-skip 2 --launch-count 1 -f -o "$rep" python3 "$OUT/cudnn_case.py" "$shape"
    else
      genome=$(genome_of "$name")
      [ -n "$genome" ] || { echo "no genome named $name in $GENOMES" | tee -a "$OUT/commands.txt"; continue; }
      run 60 "$OUT/plan_$tag.json" "$EVO" --json profile -c "$NCU_CONFIG" --templates templates -g "$genome" \
        --shape "BATCH=$b,HEADS=$h,SEQ_Q=$s,SEQ_KV=$s,HEAD_DIM=$d" --tools none
      src=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kernel"])' "$OUT/plan_$tag.json" 2>/dev/null)
      [ -n "$src" ] || { echo "no plan for $tag (see $OUT/plan_$tag.json.err)" | tee -a "$OUT/commands.txt"; continue; }
      run 150 "$OUT/prof_$tag.log" ncu --set full --import-source yes -k regex:sdpa_fwd --launch-count 1 -f -o "$rep" \
        "$EVO" run-once --problem "$NCU_PROBLEM" --source "$src" --shape "BATCH=$b,HEADS=$h,SEQ_Q=$s,SEQ_KV=$s,HEAD_DIM=$d" \
        --plan "${src%.cu}.plan.json"
    fi
    [ -f "$rep.ncu-rep" ] || continue
    ncu -i "$rep.ncu-rep" --page details --csv > "$OUT/prof_${tag}_details.csv" 2>> "$OUT/commands.txt"
    ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/prof_${tag}_sass.csv" 2>> "$OUT/commands.txt"
  done
fi
echo "total ${SECONDS}s" | tee -a "$OUT/commands.txt"
(cd "$OUT" && tar czf "$DEST/profile.tgz" --exclude='*.ncu-rep' .)
cp "$OUT"/ab_*_table.txt "$OUT"/gate_summary.txt "$OUT/commands.txt" "$DEST/" 2>/dev/null
true
