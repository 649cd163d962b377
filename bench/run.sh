#!/usr/bin/env bash
# The one entry of the evidence scripts (bench/README.md says what each measures): runs each
# NAME (bench/gpu/NAME.sh, else bench/NAME.sh) in turn and keeps what comes back within the
# device tool's limit (8 files): each NAME writes into its own folder, packed as
# $OUT/NAME.tgz, and its console output goes to $OUT/NAME.txt.
#   bench/run.sh fp8 export        (runs bench/gpu/fp8.sh, then bench/gpu/export.sh)
# EVIDENCE_TIMEOUT_S (default 3600) bounds each script, so that what a script that runs
# long has written still comes back packed (the device call's own limit would lose it).
# From the repo root, with .gpu/ built by bench/gpu/bundle.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
for name in "$@"; do
  script=bench/gpu/$name.sh
  [ -f "$script" ] || script=bench/$name.sh
  if [ ! -f "$script" ]; then
    echo "bench/run.sh: no bench/gpu/$name.sh or bench/$name.sh (bench/README.md lists them)" | tee "$OUT/$name.txt"
    continue
  fi
  dir=/tmp/evidence/$name; rm -rf "$dir"; mkdir -p "$dir"
  start=$SECONDS
  echo "=== $name"
  OUT=$dir timeout -k 5 "${EVIDENCE_TIMEOUT_S:-3600}" bash "$script" > "$OUT/$name.txt" 2>&1
  echo "=== $name exit $? after $((SECONDS - start)) s" | tee -a "$OUT/$name.txt"
  (cd "$dir" && tar czf "$OUT/$name.tgz" .)
done
