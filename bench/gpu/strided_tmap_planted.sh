#!/usr/bin/env bash
# Issue 18 (session 31): sdpa_fwd_wgmma reads q, k and v through TMA maps over each call's own
# strides, and the gate now varies their layouts. Planted: v's map takes k's strides
# (templates copied, the family TOML edited), which is right whenever k and v share a layout
# (every contiguous call) and wrong otherwise, so only a gate that varies k's and v's layouts
# apart catches it. The genomes PLANTED_NAMES (default: 9125fc38, one CTA per query block, and
# kc2-keys2-L, a two-CTA cluster) of the files PLANTED_GENOMES (default
# bench/gpu/four_consumer_genomes.txt and bench/gpu/cluster_epilogue_genomes.txt) are gated on
# PLANTED_CONFIG (default configs/sdpa_wgmma.toml; no timing). No specialization should pass.
# Usage, from the repo root on the device: OUT=... bash bench/gpu/strided_tmap_planted.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
DEST=${OUT:-/tmp/evo-out}; mkdir -p "$DEST"
EVO=${EVO:-$PWD/.gpu/evo}
export EVO_CACHE_DIR=$PWD/.evo-cache
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
cp -r templates "$t/templates"
family=$t/templates/sdpa_fwd/sdpa_fwd_wgmma.toml
sed -i 's/v_seq_stride;v_head_stride;v_batch_stride/k_seq_stride;k_head_stride;k_batch_stride/' "$family"
if cmp -s "$family" templates/sdpa_fwd/sdpa_fwd_wgmma.toml; then
  echo "the family is unchanged: nothing planted" >&2; exit 1
fi
for name in ${PLANTED_NAMES:-9125fc38 kc2-keys2-L}; do
  # shellcheck disable=SC2086 # a list of files
  genome=$(cat ${PLANTED_GENOMES:-bench/gpu/four_consumer_genomes.txt bench/gpu/cluster_epilogue_genomes.txt} \
    | sed 's/#.*//' | awk -v n="$name" '$1 == n {print $2; exit}')
  if [ -z "$genome" ]; then echo "no genome named $name" >&2; exit 2; fi
  "$EVO" eval -c "${PLANTED_CONFIG:-configs/sdpa_wgmma.toml}" --templates "$t/templates" --no-timing -g "$genome" > "$DEST/planted_vstrides_$name.txt" 2>&1
  echo "planted (v through k's strides) $name: $(grep -oE 'evaluated|incorrect|crashed|timed_out|launch_failed' "$DEST/planted_vstrides_$name.txt" | sort | uniq -c | tr '\n' ' ')"
done
