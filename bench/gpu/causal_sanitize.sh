#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck through `evo profile`) on causal launches of
# the cluster genomes (session 29: `evo profile --shape` now takes the config's [spec], so a
# CAUSAL = true config profiles the causal kernel; before, these runs were non-causal). Entries
# NAME@B,H,S,D of SANITIZE_GENOMES files (default: bench/gpu/key_ctas_genomes.txt then
# bench/gpu/key_ctas4_genomes.txt). Usage, from the repo root on the device:
# OUT=... bash bench/gpu/causal_sanitize.sh NAME@B,H,S,D...
set -uo pipefail
cd "$(dirname "$0")/../.."
DEST=${OUT:-/tmp/evo-out}; mkdir -p "$DEST"
EVO=${EVO:-$PWD/.gpu/evo}
export EVO_CACHE_DIR=$PWD/.evo-cache
cfg=$(mktemp); trap 'rm -f "$cfg"' EXIT
sed 's/^CAUSAL = false/CAUSAL = true/' configs/sdpa_wgmma.toml > "$cfg"
for t in "$@"; do
  name=${t%@*}; IFS=, read -r b h s d <<< "${t#*@}"
  genome=$(sed 's/#.*//' ${SANITIZE_GENOMES:-bench/gpu/key_ctas_genomes.txt bench/gpu/key_ctas4_genomes.txt} | awk -v n="$name" '$1 == n {print $2; exit}')
  log="$DEST/sanitize_${name}_${b}x${h}x${s}x${d}_causal.txt"
  timeout 60 "$EVO" profile -c "$cfg" --templates templates -g "$genome" \
    --shape "BATCH=$b,HEADS=$h,SEQ_Q=$s,SEQ_KV=$s,HEAD_DIM=$d" --tools memcheck,racecheck,synccheck > "$log" 2>&1
  echo "$t (exit $?): $(grep -oE 'CAUSAL=[a-z]+' "$log" | head -1); $(grep -E '^│ (memcheck|racecheck|synccheck) ' "$log" | tr -s ' ' | tr '\n' ' ')"
done
