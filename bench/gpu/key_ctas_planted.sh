#!/usr/bin/env bash
# Issue 18, KEY_CTAS (sessions 28-30): the gate against planted cluster faults. The templates are
# copied with one fault (PLANTED_FAULT):
#   nowait   (default) no rank waits for the other CTAs' partials (the mbar_wait_parity_cluster
#            line removed), so it merges whatever its buffer holds and may end while they write;
#   columns  each rank sends the others its own columns instead of theirs (the slices a receiver
#            merges are another rank's columns of the partials);
#   weight   a rank scales its own columns by rank 0's weight instead of its own (wrong on ranks
#            past 0 only, as session 30's first merge was).
# The genomes PLANTED_NAMES of PLANTED_GENOMES (default: the two cluster genomes of
# bench/gpu/key_ctas_genomes.txt) are gated on PLANTED_CONFIG (default configs/sdpa_wgmma.toml; no
# timing). No specialization should pass.
# Usage, from the repo root on the device: OUT=... [PLANTED_FAULT=columns] bash bench/gpu/key_ctas_planted.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
DEST=${OUT:-/tmp/evo-out}; mkdir -p "$DEST"
EVO=${EVO:-$PWD/.gpu/evo}
export EVO_CACHE_DIR=$PWD/.evo-cache
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
cp -r templates "$t/templates"
kernel=$t/templates/sdpa_fwd/sdpa_fwd_wgmma.cu.tera
fault=${PLANTED_FAULT:-nowait}
case $fault in
  nowait) sed -i '/evo::mbar_wait_parity_cluster(&merge_full\[mwg\], 0);/d' "$kernel" ;;
  columns) sed -i 's/part_chunk(acc_o, sm, to \* Tr::OWN_BLOCKS + c)/part_chunk(acc_o, sm, split * Tr::OWN_BLOCKS + c)/' "$kernel" ;;
  weight) sed -i 's/}, f\[OWN\]);/}, f[0]);/' "$kernel" ;;
  *) echo "PLANTED_FAULT: nowait, columns or weight, not $fault" >&2; exit 2 ;;
esac
if cmp -s "$kernel" templates/sdpa_fwd/sdpa_fwd_wgmma.cu.tera; then
  echo "the template is unchanged: nothing planted ($fault)" >&2; exit 1
fi
for name in ${PLANTED_NAMES:-kc2-9125fc38 kc2-keys2-L}; do
  genome=$(sed 's/#.*//' "${PLANTED_GENOMES:-bench/gpu/key_ctas_genomes.txt}" | awk -v n="$name" '$1 == n {print $2}')
  "$EVO" eval -c "${PLANTED_CONFIG:-configs/sdpa_wgmma.toml}" --templates "$t/templates" --no-timing -g "$genome" > "$DEST/planted_${fault}_$name.txt" 2>&1
  echo "planted ($fault) $name: $(grep -oE 'evaluated|incorrect|crashed|timed_out|launch_failed' "$DEST/planted_${fault}_$name.txt" | sort | uniq -c | tr '\n' ' ')"
done
