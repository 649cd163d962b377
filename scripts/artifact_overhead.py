"""The pure-Python cost of an artifact's call path, without a GPU: evo_kernel over the fake
torch and fake libcuda.so.1 of crates/evo-cli/tests/fake_cuda (tensors are metadata, the
driver calls return at once), so what is timed is evo_kernel's own Python plus the fakes'.

Usage:  python3 scripts/artifact_overhead.py DIR [--calls N] [--shape B,H,SQ,SKV,D] [--json FILE]

Builds the fake driver with gcc into a temporary folder and re-runs itself with it and the
fake torch on the paths. Prints µs per call (best of 7 repeats of N calls) for: the call
the kernels serve (scaled_dot_product_attention, or attention() for an artifact of an
older evo), the plan look-up alone, a fallback (a mask), the fake torch.empty (part of
every served call: a real torch.empty costs differently) and the fake driver's
cuLaunchKernel. On a GPU, the artifact's bench.py measures the real eager call.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKES = os.path.join(ROOT, "crates", "evo-cli", "tests", "fake_cuda")

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--calls", type=int, default=20000)
ap.add_argument("--shape", default="1,8,512,512,64")
ap.add_argument("--json")
args = ap.parse_args()

if os.environ.get("EVO_OVERHEAD_CHILD") != "1":
    with tempfile.TemporaryDirectory() as lib:
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", os.path.join(lib, "libcuda.so.1"),
                        os.path.join(FAKES, "libcuda.c")], check=True)
        env = dict(os.environ, EVO_OVERHEAD_CHILD="1", PYTHONPATH=FAKES, LD_LIBRARY_PATH=lib,
                   FAKE_CUDA_CURRENT="1", PYTHONDONTWRITEBYTECODE="1")
        env.pop("FAKE_CUDA_LOG", None)
        sys.exit(subprocess.run([sys.executable] + sys.argv, env=env).returncode)

sys.path.insert(0, os.path.abspath(args.dir))
import torch  # noqa: E402  (the fake)
import evo_kernel as ek  # noqa: E402

B, H, SQ, SKV, D = (int(x) for x in args.shape.split(","))
spec = next(e["specialization"] for e in ek.MANIFEST["dispatch"]["table"] if e["specialization"]["HEAD_DIM"] == D)
dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[spec["DTYPE"]]
causal = spec["CAUSAL"]
q, k, v = (torch.Tensor(s, dtype) for s in ((B, H, SQ, D), (B, H, SKV, D), (B, H, SKV, D)))
mask = torch.Tensor((1, 1, SQ, SKV), dtype)
new_api = hasattr(ek, "scaled_dot_product_attention")
decided = ek.plan_of(q, k, v, causal) if new_api else None
if getattr(decided, "reason", None) == "slower":
    # The op sends this shape to PyTorch's SDPA: its "served call" would time that fallback.
    sys.exit(f"{args.shape} goes to PyTorch's SDPA in this artifact ({decided.detail}); pick another --shape")
cases = {}
if new_api:
    cases["served call (scaled_dot_product_attention)"] = lambda: ek.scaled_dot_product_attention(q, k, v, is_causal=causal)
    cases["plan look-up (plan_of)"] = lambda: ek.plan_of(q, k, v, causal)
    cases["fallback call (a mask)"] = lambda: ek.scaled_dot_product_attention(q, k, v, attn_mask=mask)
else:
    cases["served call (attention)"] = lambda: ek.attention(q, k, v, causal=causal)
cases["fake torch.empty alone"] = lambda: torch.empty((B, H, SQ, D), dtype=dtype, device=q.device)
for f in cases.values():
    f()  # plans, loads
if new_api:
    launch = ek._driver.launch
    call = ek.plan_of(q, k, v, causal).bound.calls[0][1]
    cases["fake cuLaunchKernel alone"] = lambda: launch(*call)
out = {}
print(f"artifact {args.dir}, shape {args.shape}, {spec['DTYPE']}{' causal' if causal else ''}; fake torch and driver; "
      f"best of 7 x {args.calls} calls")
for name, f in cases.items():
    us = min(timeit.repeat(f, number=args.calls, repeat=7)) / args.calls * 1e6
    out[name] = us
    print(f"  {name:<46} {us:7.2f} us")
if args.json:
    json.dump({"artifact": os.path.abspath(args.dir), "shape": args.shape, "us_per_call": out}, open(args.json, "w"), indent=1)
