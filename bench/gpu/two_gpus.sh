#!/usr/bin/env bash
# One `evo search` on every GPU of a 2-GPU machine (one worker process per GPU, compiles
# running ahead on the CPUs), about 2 minutes, then the per-GPU busy fractions: the
# search's own summary line ("per GPU busy: gpu0 ..%, gpu1 ..%") and the host row of the
# population database. Run from the repo root where .gpu/evo is the release binary
# (../shared/tools/gpu-bundle.sh -p evo-gpu). Logs go to $OUT.
#
#   bench/gpu/two_gpus.sh [BUDGET]     (default 2m)
#
# Expect: "per GPU busy: gpu0 NN%, gpu1 NN%" with both well above 0 (each GPU's worker
# evaluated genomes), and the worker pool's evaluations split over both GPUs.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=${EVO:-.gpu/evo}
BUDGET=${1:-2m}
RUN=two-gpus
DB="$OUT/two_gpus.db"
rm -f "$DB" "$DB"-*

nvidia-smi --query-gpu=index,name,memory.total --format=csv 2>&1 | tee "$OUT/gpus.txt"
n=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$n" -lt 2 ]; then
  echo "this machine has $n GPU(s); two_gpus.sh needs 2 (it still runs on what there is)"
fi

# The attention search config, with the seed genome as the baseline (no PyTorch run
# needed; fitness is relative to the seed).
seed=$(sed -n 's/^seeds = \["\([^"]*\)".*/\1/p' configs/sdpa_search.toml)
sed -e "s#^baseline = .*#baseline = \"genome:$seed\"#" configs/sdpa_search.toml > configs/.two_gpus.toml

# nvidia-smi samples utilisation every second while the search runs (a second view
# of the same fractions).
nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader -l 1 \
  > "$OUT/nvidia_smi_util.csv" 2>/dev/null &
smi=$!
$EVO search -c configs/.two_gpus.toml --run $RUN --db "$DB" --gpus all \
  --budget "$BUDGET" --no-progress 2>&1 | tail -n 40 | tee "$OUT/search.txt"
kill $smi 2>/dev/null
rm -f configs/.two_gpus.toml

echo "== per-GPU busy fractions (evo's worker pool: time each GPU's worker spent on jobs / wall time)"
grep -E "per GPU busy|evaluations here|GPU busy" "$OUT/search.txt"
python3 - "$DB" "$OUT/nvidia_smi_util.csv" <<'PY'
import json, sqlite3, sys, collections
db = sqlite3.connect(sys.argv[1])
for host, stats, n in db.execute("SELECT id, stats, evaluated FROM hosts"):
    s = json.loads(stats or "{}")
    print(f"host {host}: {n} evaluations, wall {s.get('wall_s', 0):.0f} s")
    for g in s.get("gpu_busy", []):
        print(f"  gpu{g['gpu']}: busy {100 * g['busy']:.1f}%")
util = collections.defaultdict(list)
for line in open(sys.argv[2]):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == 3 and parts[2].endswith("%"):
        util[parts[1]].append(float(parts[2].rstrip(" %")))
for gpu, xs in sorted(util.items()):
    busy = sum(1 for x in xs if x > 0) / max(len(xs), 1)
    print(f"nvidia-smi gpu{gpu}: mean utilization {sum(xs) / max(len(xs), 1):.0f}%, samples with a kernel running {100 * busy:.0f}%")
PY
