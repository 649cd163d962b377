#!/usr/bin/env bash
# Where one FP8 ws consumer's KV tile goes, by the clock (issue 19): the templates with
# bench/kernel/trace/fp8_ws_timeline.patch (clock64 at points of the overlapped loop of one CTA's
# third unit, per consumer warpgroup and the producer; a second kernel prints them) rendered for
# each genome of TIMELINE_GENOMES (default: n192-LP of bench/gpu/len_sweep_genomes.txt), launched
# once by `evo profile` (its launch plan) and `evo run-once` at TIMELINE_SHAPE (default
# 4,16,4096,128), and the lines summarised by bench/gpu/fp8_timeline.py. Diagnostic only: the
# traced kernel has ~40 more instructions per tile than the product one. TIMELINE_SKIP_TRANSPOSE=1:
# the producer hands over V^T slots without transposing (wrong results; what the transposes cost).
# Usage, from the repo root on the device: OUT=... bash bench/gpu/fp8_timeline.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${OUT:-/tmp/evo-out}; mkdir -p "$DEST"
EVO=${EVO:-$PWD/.gpu/evo}
GENOMES=${TIMELINE_GENOMES:-bench/gpu/len_sweep_genomes.txt}
NAMES=${TIMELINE_NAMES:-n192-LP}
IFS=, read -r b h s d <<< "${TIMELINE_SHAPE:-4,16,4096,128}"
export EVO_CACHE_DIR=$PWD/.evo-cache
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
cp -r templates "$t/templates"
(cd "$t" && patch -s -p1 < "$OLDPWD/bench/kernel/trace/fp8_ws_timeline.patch")
# TIMELINE_SKIP_TRANSPOSE=1: the producer skips the V transposes (wrong results; their cost).
[ "${TIMELINE_SKIP_TRANSPOSE:-0}" = 1 ] && sed -i 's/^#define TRACE_SKIP_TRANSPOSE 0/#define TRACE_SKIP_TRANSPOSE 1/' \
  "$t/templates/sdpa_fwd_fp8/sdpa_fwd_fp8_ws.cu.tera"
for name in $NAMES; do
  genome=$(sed 's/#.*//' "$GENOMES" | awk -v n="$name" '$1 == n {print $2}')
  [ -n "$genome" ] || { echo "no genome $name in $GENOMES" >&2; exit 1; }
  "$EVO" --json profile -c bench/gpu/fp8_ab_shapes.toml --templates "$t/templates" -g "$genome" \
    --shape "BATCH=$b,HEADS=$h,SEQ_Q=$s,SEQ_KV=$s,HEAD_DIM=$d" --tools none > "$DEST/plan_$name.json"
  src=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kernel"])' "$DEST/plan_$name.json")
  "$EVO" run-once --problem sdpa_fwd_fp8 --source "$src" --shape "BATCH=$b,HEADS=$h,SEQ_Q=$s,SEQ_KV=$s,HEAD_DIM=$d" \
    --plan "${src%.cu}.plan.json" > "$DEST/timeline_$name.txt" 2>&1
  echo "== $name at ($b,$h,$s,$d)"
  python3 bench/gpu/fp8_timeline.py "$DEST/timeline_$name.txt" | tee "$DEST/timeline_${name}_summary.txt"
done
