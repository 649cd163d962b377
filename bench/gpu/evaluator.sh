#!/usr/bin/env bash
# Evidence for the gated evaluator, on a GPU machine, from the repo root with .gpu/
# carried (../shared/tools/gpu-bundle.sh). Logs go to $OUT.
#  1. evo doctor and evo selftest (reference vs float64, timing of known-cost kernels,
#     fault isolation through real workers);
#  2. the planted-fault suite in one `evo check` invocation;
#  3. all gates on one gemm_mma genome, then the same genome timed in 5 separate
#     processes: the spread of the medians;
#  4. the GPU test binaries.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache
EVO=.gpu/evo
echo "== doctor"; $EVO doctor 2>&1 | tee "$OUT/doctor.txt"
echo "== selftest"; $EVO selftest 2>&1 | tee "$OUT/selftest.txt"; echo "selftest exit ${PIPESTATUS[0]}"
echo "== planted-fault suite"
$EVO check tests/planted/gemm/*.cu --problem gemm -c tests/planted/gemm/check.toml 2>&1 | tee "$OUT/planted.txt"
echo "planted exit ${PIPESTATUS[0]}"

# A gemm_mma genome rendered to a file; its launch rule written out for this genome:
# 128x128 tiles, 2x4 warps (256 threads), 3 stages of (128+128) rows x 32 halfs.
G=BLOCK_K=32,BLOCK_M=128,BLOCK_N=128,STAGES=3,SWIZZLE=xor,WARPS_M=2,WARPS_N=4
LAUNCH="grid = ceil_div(N, 128), ceil_div(M, 128); block = 256; shared_bytes = 49152"
$EVO render -c configs/gemm.toml -g "$G" > /tmp/gemm_mma_genome.cu
echo "== one gemm_mma genome through every gate"
$EVO check /tmp/gemm_mma_genome.cu --problem gemm -c configs/gemm.toml --launch "$LAUNCH" 2>&1 | tee "$OUT/genome.txt"
echo "== timing repeatability: 5 separate processes"
for i in 1 2 3 4 5; do
  $EVO --json check /tmp/gemm_mma_genome.cu --problem gemm -c configs/gemm.toml --launch "$LAUNCH" > "/tmp/rep$i.json" 2>/dev/null
done
python3 - "$OUT/repeat.txt" <<'PY' | tee -a "$OUT/genome.txt"
import json, sys
runs = [json.load(open(f"/tmp/rep{i}.json"))[0]["verdict"] for i in range(1, 6)]
print("status per run:", [r["status"] for r in runs])
shapes = {}
for r in runs:
    for s in (r.get("result") or {}).get("shapes", []):
        if s.get("timing"):
            key = "x".join(str(s["vars"][k]) for k in ("M", "N", "K"))
            shapes.setdefault(key, []).append(s["timing"]["median_us"])
lines = ["shape            medians of 5 runs (us)                     min      max   spread"]
for k, v in shapes.items():
    lines.append(f"{k:<16} {' '.join(f'{x:8.2f}' for x in v)}  {min(v):8.2f} {max(v):8.2f}  {100*(max(v)-min(v))/min(v):5.2f}%")
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "== profile gate: compute-sanitizer on the planted kernels, ncu on the genome"
$EVO profile tests/planted/gemm/j_correct.cu --problem gemm --shape M=256,N=256,K=256 --tools memcheck,racecheck 2>&1 | tee "$OUT/profile.txt"
$EVO profile tests/planted/gemm/a_write_past_end.cu --problem gemm --shape M=256,N=256,K=256 --tools memcheck 2>&1 | tee -a "$OUT/profile.txt"
$EVO profile -c configs/gemm.toml -g "$G" --tools ncu 2>&1 | tee -a "$OUT/profile.txt"
echo "== GPU tests"
.gpu/cargo-nextest nextest run --archive-file .gpu/tests.tar.zst --workspace-remap . \
  --run-ignored all --no-fail-fast 2>&1 | tee "$OUT/tests.txt" | tail -25
echo "tests exit: ${PIPESTATUS[0]}"
