#!/usr/bin/env bash
# Issue 16 follow-up on one GPU (about 8 minutes): the sanitizer gate in a search and in an
# export, and the search throughput before and after.
# From the repo root with .gpu/evo carried, and OLD_EVO / OLD_TEMPLATES for the "before" evo
# (bench/gpu/gate.sh throughput):
#   1. compute-sanitizer (memcheck, racecheck, synccheck) through `evo profile` on GENOMES
#      (default: the sdpa_fwd_mma genome with WARP_SPEC=on that a search rejected at the
#      sanitizer gate, and its WARP_SPEC=off twin) on the edge shape (1,3,77,77) and a seed
#      shape: the findings with the lines they point at;
#   2. bench/gpu/gate.sh throughput with BUDGET (default 100s): old and new evo, each new
#      best of the new one sanitized;
#   3. evo export of the new search's run (the sanitizer verdicts it stored, or sanitized
#      now), the manifest's sanitizer field, example.cpp built and run, evo verify.
# Logs under $OUT: probe_*.json, the gate.sh throughput files, export.txt, example.txt,
# verify.txt.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache
EVO=${EVO:-$PWD/.gpu/evo}
step() { echo; echo "== [$((SECONDS))s] $*"; }
WS_ON="BLOCK_M=16,BLOCK_N=16,EPILOGUE=direct,NUM_WARPS=1,PRODUCER_WARPS=1,Q_IN_REGS=true,STAGES=4,SWIZZLE=none,WARP_SPEC=on"
GENOMES=${GENOMES:-"$WS_ON ${WS_ON/WARP_SPEC=on/WARP_SPEC=off}"}

step "sanitizers on chosen genomes"
for g in $GENOMES; do
  for shape in "BATCH=1,HEADS=3,SEQ_Q=77,SEQ_KV=77,HEAD_DIM=64,DTYPE=f16,CAUSAL=false" \
               "BATCH=1,HEADS=8,SEQ_Q=512,SEQ_KV=512,HEAD_DIM=64,DTYPE=f16,CAUSAL=false"; do
    name=$(echo "$g$shape" | md5sum | cut -c1-8)
    timeout 120 $EVO --json profile -c configs/sdpa.toml -g "$g" --shape "$shape" \
      --tools memcheck,racecheck,synccheck > "$OUT/probe_$name.json" 2> "$OUT/probe_$name.err"
    echo "$g @ $shape (exit $?)"
    python3 - "$OUT/probe_$name.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("  no JSON:", e); sys.exit()
tools = r.get("tools", r)
items = tools.items() if isinstance(tools, dict) else tools
for t in items:
    name, rep = (t if isinstance(t, (list, tuple)) else (t.get("tool"), t))
    if isinstance(rep, dict) and "errors" in rep:
        print(f"  {name}: {rep['errors']} error(s)")
        for line in rep.get("summary", [])[:8]:
            print("    ", line[:220])
    else:
        print(f"  {name}: {json.dumps(rep)[:300]}")
PY
  done
done

step "throughput before/after (BUDGET ${BUDGET:-100s})"
BUDGET=${BUDGET:-100s} bash bench/gpu/gate.sh throughput

step "export of the new search's run"
DB=/tmp/tp_new/p.db
ART=$OUT/artifact
rm -rf "$ART"
$EVO export tp --db "$DB" --out "$ART" 2>&1 | tee "$OUT/export.txt" | tail -n 20
python3 - "$ART/manifest.json" <<'PY' | tee -a "$OUT/export.txt"
import json, sys
try:
    m = json.load(open(sys.argv[1]))
except Exception as e:
    print("no manifest:", e); sys.exit()
for v in m["variants"]:
    print(f"{v['name']:20} candidate {v['candidate_id']} sanitizer: {v.get('sanitizer')}")
PY
python3 - "$DB" <<'PY' | tee -a "$OUT/export.txt"
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for cid, metrics in db.execute("select candidate_id, metrics from profiles where tool = 'sanitizer'"):
    m = json.loads(metrics)
    secs = sum(r.get("seconds", 0) for r in m.get("reports", []))
    print(f"stored verdict: candidate {cid} {m['verdict']} ({secs:.1f} s)", (m.get("finding") or "")[:300])
PY

step "example.cpp"
{
  INCLUDE=$($EVO doctor 2>/dev/null | awk '$1 == "headers" {print $2; exit}')
  for d in "$INCLUDE" /usr/local/cuda/include; do [ -f "$d/cuda.h" ] && { INCLUDE=$d; break; }; done
  if nvcc -std=c++17 -O2 -I "$ART" -I "$INCLUDE" "$ART/example.cpp" -o /tmp/example -lcuda; then
    for v in $(python3 -c "import json, sys; print(' '.join(v['name'] for v in json.load(open(sys.argv[1]))['variants']))" "$ART/manifest.json"); do
      timeout 60 /tmp/example "$ART" "$v"; echo "example $v exit: $?"
    done
  else
    echo "example.cpp: the build failed"
  fi
} 2>&1 | tee "$OUT/example.txt" | tail -n 20

left=$(( ${VERIFY_UNTIL_S:-560} - SECONDS ))
step "evo verify (at most ${left}s)"
if [ "$left" -gt 15 ]; then
  timeout "$left" $EVO verify "$ART" > "$OUT/verify.txt" 2>&1
  echo "verify exit: $? (124: cut at ${left}s)" >> "$OUT/verify.txt"
else
  echo "no time left for verify" > "$OUT/verify.txt"
fi
tail -n 25 "$OUT/verify.txt"
echo "total ${SECONDS}s"
