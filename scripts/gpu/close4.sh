#!/usr/bin/env bash
# Follow-up of docs/notes/sdpa-crash-2026-11-22.md on a GPU machine (repo root, .gpu/ carried):
#  1. the Ctrl-C run again (workers now in their own process group): no genome may crash,
#     and --resume carries on;
#  2. every genome of that run's generation 0 (the list in the doc) through every gate
#     without any signal, with the time each evaluation spent in correctness and timing.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
bash scripts/gpu/ctrlc.sh "${1:-120}" "${2:-60s}"
args=()
while read -r g; do args+=(-g "$g"); done < <(sed -n '/^```$/,/^```$/p' docs/notes/sdpa-crash-2026-11-22.md | grep '^BLOCK_M=')
echo "== evo eval of the ${#args[@]} / 2 genomes of generation 0"
start=$SECONDS
.gpu/evo --json eval -c configs/sdpa.toml "${args[@]}" > "$OUT/gen0_eval.json" 2> "$OUT/gen0_eval.err"
echo "eval exit $? after $((SECONDS - start)) s"
python3 - "$OUT/gen0_eval.json" <<'PY' | tee "$OUT/gen0_summary.txt"
import json, sys, collections
genomes = json.load(open(sys.argv[1]))
statuses = collections.Counter()
check = timing = total = 0.0
for g in genomes:
    for v in g["verdicts"]:
        statuses[v["status"]] += 1
        r = v.get("result") or {}
        check += r.get("check_ms", 0); timing += r.get("timing_ms", 0); total += r.get("elapsed_ms", 0)
        if v["status"] not in ("evaluated", "regressed"):
            print(f'{v["label"]}: {v["status"]} {v.get("gate")} {v["detail"][:200]}')
n = sum(statuses.values())
print(f"{len(genomes)} genomes, {n} kernels: {dict(statuses)}")
print(f"worker time per kernel: {total/n:.0f} ms (correctness {check/n:.0f} ms, timing {timing/n:.0f} ms)")
PY
