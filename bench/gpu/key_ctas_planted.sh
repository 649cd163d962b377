#!/usr/bin/env bash
# Issue 18, KEY_CTAS (session 28): the gate against a planted cluster race. The templates are
# copied and rank 0 no longer waits for the other CTA's partial (the mbar_wait_parity_cluster line
# removed), so it merges whatever its buffer holds; the genomes PLANTED_NAMES of PLANTED_GENOMES
# (default: the two cluster genomes of bench/gpu/key_ctas_genomes.txt) are gated on
# PLANTED_CONFIG (default configs/sdpa_wgmma.toml; no timing). No specialization should pass.
# Usage, from the repo root on the device: OUT=... bash bench/gpu/key_ctas_planted.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
DEST=${OUT:-/tmp/evo-out}; mkdir -p "$DEST"
EVO=${EVO:-$PWD/.gpu/evo}
export EVO_CACHE_DIR=$PWD/.evo-cache
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
cp -r templates "$t/templates"
sed -i '/evo::mbar_wait_parity_cluster(&merge_full\[mwg\], 0);/d' "$t/templates/sdpa_fwd/sdpa_fwd_wgmma.cu.tera"
if grep -q 'mbar_wait_parity_cluster(&merge_full' "$t/templates/sdpa_fwd/sdpa_fwd_wgmma.cu.tera"; then
  echo "the wait is still there: nothing planted" >&2; exit 1
fi
for name in ${PLANTED_NAMES:-kc2-9125fc38 kc2-keys2-L}; do
  genome=$(sed 's/#.*//' "${PLANTED_GENOMES:-bench/gpu/key_ctas_genomes.txt}" | awk -v n="$name" '$1 == n {print $2}')
  "$EVO" eval -c "${PLANTED_CONFIG:-configs/sdpa_wgmma.toml}" --templates "$t/templates" --no-timing -g "$genome" > "$DEST/planted_$name.txt" 2>&1
  echo "planted (rank 0 does not wait) $name: $(grep -oE 'evaluated|incorrect|crashed|timed_out|launch_failed' "$DEST/planted_$name.txt" | sort | uniq -c | tr '\n' ' ')"
done
