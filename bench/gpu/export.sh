#!/usr/bin/env bash
# The frozen artifact end to end on a GPU machine (about 4 minutes):
#   1. a short real search of configs/sdpa.toml (skipped when a database is given),
#   2. evo export of its best genome (and --per-shape), evo verify of both, and a copy with
#      one flipped CUBIN byte that verify must refuse,
#   3. scripts/compare_torch.py: the artifact against PyTorch SDPA (every backend) on the
#      manifest's shapes; with COMPARE_LONG=1, bench/gpu/compare_sdpa.sh on both artifacts
#      instead (the long shapes, causal and not, TFLOP/s, ncu tensor-pipe utilisation).
# Usage, from the repo root with .gpu/ built by bench/gpu/bundle.sh:
#   bench/gpu/export.sh                 search for SEARCH_BUDGET (default 100s) first
#   bench/gpu/export.sh DB [RUN]        export RUN (default: the database's last GPU run);
#                                       EXPORT_DB / EXPORT_RUN say the same through bench/run.sh
# Logs under $OUT: search.txt, export.txt, verify.txt, verify_per_shape.txt,
# compare_torch.txt / compare_torch.json (compare_artifact*/ with COMPARE_LONG=1), and the
# artifacts artifact/, artifact_per_shape/. SKIP_COMPARE=1 stops before the comparison.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=$PWD/.gpu/evo
DB=${1:-${EXPORT_DB:-}}
RUN=${2:-${EXPORT_RUN:-}}
if [ -z "$DB" ]; then
  DB=$OUT/population.db
  RUN=export-demo
  rm -f "$DB" "$DB"-*
  echo "== evo search -c configs/sdpa.toml --budget ${SEARCH_BUDGET:-100s}"
  $EVO search -c configs/sdpa.toml --run $RUN --db "$DB" --budget "${SEARCH_BUDGET:-100s}" --no-progress 2>&1 | tail -n 15 | tee "$OUT/search.txt"
fi
if [ -z "$RUN" ]; then
  RUN=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT name FROM runs WHERE evaluator = 'gpu' ORDER BY id DESC LIMIT 1\").fetchone()[0])" "$DB")
fi
ART=$OUT/artifact
rm -rf "$ART" "$OUT/artifact_per_shape"
echo "== evo export $RUN"
$EVO export "$RUN" --db "$DB" --out "$ART" 2>&1 | tee "$OUT/export.txt"
$EVO export "$RUN" --db "$DB" --per-shape --out "$OUT/artifact_per_shape" 2>&1 | tee -a "$OUT/export.txt"
echo "== evo verify"
$EVO verify "$ART" 2>&1 | tee "$OUT/verify.txt"
echo "verify exit: ${PIPESTATUS[0]}" | tee -a "$OUT/verify.txt"
$EVO verify "$OUT/artifact_per_shape" 2>&1 | tee "$OUT/verify_per_shape.txt"
echo "verify --per-shape exit: ${PIPESTATUS[0]}" | tee -a "$OUT/verify_per_shape.txt"
echo "== tamper check: one flipped byte in a CUBIN must fail verify"
cp -r "$ART" "$OUT/tampered"
f=$(ls "$OUT/tampered"/*.cubin | head -n 1)
python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=1; open(p,'wb').write(bytes(b))" "$f"
$EVO verify "$OUT/tampered" 2>&1 | tail -n 3 | tee -a "$OUT/verify.txt"
echo "tampered verify exit: ${PIPESTATUS[0]} (1 expected)" | tee -a "$OUT/verify.txt"
rm -rf "$OUT/tampered"
[ -n "${SKIP_COMPARE:-}" ] && exit 0
if [ -n "${COMPARE_LONG:-}" ]; then
  for a in artifact artifact_per_shape; do
    echo "== $a against PyTorch SDPA on the long shapes"
    OUT=$OUT/compare_$a bash bench/gpu/compare_sdpa.sh "$OUT/$a"
  done
  exit 0
fi
echo "== compare_torch.py"
python3 scripts/compare_torch.py "$ART" --out "$OUT/compare_torch.json" 2>&1 | tee "$OUT/compare_torch.txt"
echo "compare exit: ${PIPESTATUS[0]}" | tee -a "$OUT/compare_torch.txt"
