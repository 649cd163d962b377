#!/usr/bin/env bash
# Runs several evidence scripts in one GPU call and keeps what comes back within the
# device tool's limit (8 files): each script NAME writes into its own folder, packed as
# $OUT/NAME.tgz, and its console output goes to $OUT/NAME.txt.
#   scripts/gpu/evidence.sh fp8 export        (runs scripts/gpu/fp8.sh, then export.sh)
# EVIDENCE_TIMEOUT_S (default 3600) bounds each script, so that what a script that runs
# long has written still comes back packed (the device call's own limit would lose it).
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
for name in "$@"; do
  dir=/tmp/evidence/$name; rm -rf "$dir"; mkdir -p "$dir"
  start=$SECONDS
  echo "=== $name"
  OUT=$dir timeout -k 5 "${EVIDENCE_TIMEOUT_S:-3600}" bash "scripts/gpu/$name.sh" > "$OUT/$name.txt" 2>&1
  echo "=== $name exit $? after $((SECONDS - start)) s" | tee -a "$OUT/$name.txt"
  (cd "$dir" && tar czf "$OUT/$name.tgz" .)
done
