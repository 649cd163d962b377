#!/usr/bin/env bash
# Where one genome's evaluation time goes (the worker's per-stage split), for the
# throughput work: `evo eval` with the pool's log on, one genome of the mma family on
# configs/sdpa.toml and one of the Hopper family on configs/sdpa_wgmma_quick.toml.
# From the repo root with .gpu/ carried; logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache RUST_LOG=evo_eval=info
EVO=${EVO:-.gpu/evo}
MMA=${MMA:-BLOCK_M=16,BLOCK_N=16,EPILOGUE=direct,NUM_WARPS=1,PRODUCER_WARPS=1,Q_IN_REGS=false,STAGES=4,SWIZZLE=none,WARP_SPEC=off}
HOP=${HOP:-BLOCK_N=64,CONSUMER_WG=1,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=40,RESCALE=always,SCHEDULER=grid,SETMAXNREG=false,STAGES=4,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows}
for which in mma hop; do
  cfg=configs/sdpa.toml; g=$MMA
  [ $which = hop ] && { cfg=configs/sdpa_wgmma_quick.toml; g=$HOP; }
  echo "== $which: evo eval -c $cfg -g $g"
  start=$(date +%s.%N)
  $EVO eval -c $cfg -g "$g" --json > "$OUT/diag_$which.json" 2> "$OUT/diag_$which.err"
  echo "exit $? in $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
  grep "evaluated" "$OUT/diag_$which.err" | sed 's/^.*job=/job=/' | cut -c1-400
  python3 - "$OUT/diag_$which.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d if isinstance(d, list) else d.get("verdicts", d.get("results", [d]))
def walk(x):
    if isinstance(x, dict):
        if "stages_ms" in x:
            yield x
        for v in x.values():
            yield from walk(v)
    elif isinstance(x, list):
        for v in x:
            yield from walk(v)
for r in walk(d):
    st = r["stages_ms"]
    print(f'  elapsed {r.get("elapsed_ms",0):.0f} ms, check {r.get("check_ms",0):.0f}, timing {r.get("timing_ms",0):.0f}; by stage: ' + ", ".join(f"{k} {v:.0f}" for k, v in sorted(st.items(), key=lambda kv: -kv[1])))
    for s in r.get("shapes", []):
        t = s.get("timing") or {}
        v = s["vars"]
        print(f'    {v.get("DTYPE")} b{v.get("BATCH")} h{v.get("HEADS")} sq{v.get("SEQ_Q")} d{v.get("HEAD_DIM")} c{v.get("CAUSAL")}: check {s.get("check_ms",0):.0f} ms, {len(t.get("samples_us",[]))} samples, {t.get("input_sets")} sets, median {t.get("median_us")}')
PY
done
