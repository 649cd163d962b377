#!/usr/bin/env bash
# Nsight Compute's tensor-pipe utilisation of an evo artifact's kernel(s) and of PyTorch SDPA's
# cuDNN and flash kernels on one shape, one launch each after a warm-up, on a GPU machine.
# Usage: bench/gpu/ncu_tensor_pipe.sh ARTIFACT_DIR B,H,SQ,SKV,D [causal]
set -uo pipefail
ART=$1; SHAPE=$2; CAUSAL=${3:-}
METRICS="sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
cat > /tmp/ncu_case.py <<PY
import sys, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, "$ART")
from evo_kernel import attention
B, H, SQ, SKV, D = (int(x) for x in "$SHAPE".split(","))
causal = "$CAUSAL" == "causal"
q = torch.randn(B, H, SQ, D, device="cuda", dtype=torch.float16)
k = torch.randn(B, H, SKV, D, device="cuda", dtype=torch.float16)
v = torch.randn(B, H, SKV, D, device="cuda", dtype=torch.float16)
for _ in range(2):
    attention(q, k, v, causal=causal)
for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
    with sdpa_kernel(be):
        for _ in range(2):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
torch.cuda.synchronize()
PY
# Every kernel of the three implementations (their names), the second launch of each counted.
ncu --target-processes all -k 'regex:sdpa|cudnn|flash|fmha|splitkv|combine' --metrics "$METRICS" --csv python3 /tmp/ncu_case.py > /tmp/ncu.csv 2> /tmp/ncu.err
rc=$?
if [ $rc -ne 0 ]; then
  echo "ncu exit $rc:"; tail -n 5 /tmp/ncu.err
  echo "retrying with the hmma pipe and the duration only"
  METRICS="sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
  ncu --target-processes all -k 'regex:sdpa|cudnn|flash|fmha|splitkv|combine' --metrics "$METRICS" --csv python3 /tmp/ncu_case.py > /tmp/ncu.csv 2> /tmp/ncu.err
  echo "ncu exit $?"
fi
python3 - <<'PY'
import csv, collections
rows = [r for r in csv.reader(l for l in open("/tmp/ncu.csv") if l.startswith('"'))]
head, rows = rows[0], rows[1:]
ix = {h: i for i, h in enumerate(head)}
per = collections.OrderedDict()
for r in rows:
    key = (r[ix["ID"]], r[ix["Kernel Name"]][:70])
    per.setdefault(key, {})[r[ix["Metric Name"]]] = (r[ix["Metric Value"]], r[ix["Metric Unit"]])
for (i, name), m in per.items():
    print(f"launch {i} {name}")
    for k, (v, u) in m.items():
        print(f"    {k} = {v} {u}")
PY
