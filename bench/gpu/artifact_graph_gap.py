"""Where an artifact's op costs more than its kernels alone under CUDA graphs (issue 17):
at one shape, sdpa_bench.graph_times (graphs replayed in turn) of
  op        evo_kernel.scaled_dot_product_attention (its output allocated per call)
  op_out    the kernels alone into an output allocated per call (torch.empty inside the call)
  per_set   the kernels alone into one output per input set (bench.py's "kernel")
  one_out   the kernels alone into one output for every call
Usage: python3 bench/gpu/artifact_graph_gap.py ARTIFACT_DIR B,H,S,D [--causal] [--dtype f16|bf16]
"""
import argparse
import os
import sys

import torch

ap = argparse.ArgumentParser()
ap.add_argument("artifact")
ap.add_argument("shape")
ap.add_argument("--causal", action="store_true")
ap.add_argument("--dtype", default="f16")
ap.add_argument("--reps", type=int, default=31)
a = ap.parse_args()
sys.path.insert(0, os.path.abspath(a.artifact))
import evo_kernel  # noqa: E402
from sdpa_bench import DTYPES, graph_times, input_sets, l2_bytes  # noqa: E402

B, H, S, D = (int(x) for x in a.shape.split(","))
torch.manual_seed(0)
sets = input_sets(B, H, S, S, D, DTYPES[a.dtype], l2_bytes())
q, k, v = sets[0]
launch = evo_kernel.kernel_launcher(q, k, v, is_causal=a.causal)
outs = {s[0].data_ptr(): torch.empty_like(s[0]) for s in sets}
calls = {
    "op": lambda q, k, v: evo_kernel.scaled_dot_product_attention(q, k, v, is_causal=a.causal),
    "op_out": lambda q, k, v: launch(q, k, v, torch.empty_like(q)),
    "per_set": lambda q, k, v: launch(q, k, v, outs[q.data_ptr()]),
    "one_out": lambda q, k, v: launch(q, k, v),
}
us = graph_times(list(calls.values()), sets, a.reps)
print(f"{a.shape} {a.dtype}{' causal' if a.causal else ''}, {len(sets)} sets, variant "
      f"{evo_kernel.plan_of(q, k, v, a.causal).variant['name']}: "
      + ", ".join(f"{n} {t:.2f} us" for n, t in zip(calls, us)))
