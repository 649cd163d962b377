"""An evo artifact side by side with PyTorch SDPA, in one process on a GPU machine.

Usage:  python3 scripts/compare_torch.py DIR [--shapes 1,8,512,512,64 ...] [--out FILE] [--math]

DIR is what `evo export` wrote. On each shape (the manifest's timed shapes, or
--shapes B,H,SQ,SKV,D; causal and dtype as the manifest's specializations):
  * correctness: the artifact's output (evo_kernel.attention, the CUBIN through the CUDA
    driver) and every SDPA backend's, against SDPA in float64 on the same inputs: max
    abs error and relative L2;
  * time: the artifact and every backend with one method (scripts/sdpa_bench.py: CUDA
    graph of launches over input sets rotated past 2x L2, CUDA events, warm-up, median).
Backends: flash, efficient, cudnn and default (PyTorch's choice). The math backend is
left out unless --math: it is a float reference, orders of magnitude slower with
O(seq^2) memory. Prints a table with the ratio (backend time / artifact time: above 1
means the artifact is faster) per shape and backend, and writes JSON.
"""
import argparse, json, os, sys

import torch
from torch.nn.attention import SDPBackend

from sdpa_bench import BACKENDS, DTYPES, graph_time, input_sets, l2_bytes, reference, sdpa_call

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--shapes", nargs="*", help="B,H,SQ,SKV,D (default: the manifest's timed shapes)")
ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "compare_torch.json"))
ap.add_argument("--reps", type=int, default=15)
ap.add_argument("--math", action="store_true", help="also time the math backend (slow)")
args = ap.parse_args()

sys.path.insert(0, os.path.abspath(args.dir))
import evo_kernel  # noqa: E402  the artifact's own binding

m = evo_kernel.MANIFEST
backends = dict(BACKENDS)
if args.math:
    backends["math"] = SDPBackend.MATH
dev = torch.cuda.get_device_name(0)
L2 = l2_bytes()
runs = ", ".join(f"{s['run']} ({s['family']})" for s in m["sources"])
print(f"artifact {args.dir}: {m['problem']} from {runs}, {len(m['variants'])} variant(s), {m['arch']}")
print(f"torch {torch.__version__} on {dev}, L2 {L2 >> 20} MiB; the manifest's times are from {m['device']}"
      + ("" if m["device"] == dev else "  (a DIFFERENT GPU)"))
if not args.math:
    print("math backend not timed (a float reference, far slower); --math adds it")

# (B, H, SQ, SKV, D, causal, dtype name) for every shape to run.
specs = [e["specialization"] for e in m["dispatch"]["table"]]
cases = []
if args.shapes:
    for text in args.shapes:
        B, H, SQ, SKV, D = (int(x) for x in text.split(","))
        for s in specs:
            if s["HEAD_DIM"] == D and (B, H, SQ, SKV, D, s["CAUSAL"], s["DTYPE"]) not in cases:
                cases.append((B, H, SQ, SKV, D, s["CAUSAL"], s["DTYPE"]))
        if not any(c[:5] == (B, H, SQ, SKV, D) for c in cases):
            sys.exit(f"--shapes {text}: the artifact has no kernel for head dim {D}")
else:
    for v in m["variants"]:
        for s in v["shapes"]:
            sh = s["shape"]
            c = (sh["BATCH"], sh["HEADS"], sh["SEQ_Q"], sh["SEQ_KV"], sh["HEAD_DIM"], sh["CAUSAL"], sh["DTYPE"])
            if s["timed"] and c not in cases:
                cases.append(c)

rows = []
for (B, H, SQ, SKV, D, causal, dt) in cases:
    torch.manual_seed(0)
    sets = input_sets(B, H, SQ, SKV, D, DTYPES[dt], L2)
    q, k, v = sets[0]
    ref = reference(q, k, v, causal)
    flops = 4 * B * H * D * (SQ * SKV if not causal else sum(min(i + 1, SKV) for i in range(SQ)))

    def measure(call):
        o = call(q, k, v)
        torch.cuda.synchronize()
        d = o.double() - ref
        err = {"max_abs_err": float(d.abs().max()), "rel_l2": float(d.norm() / ref.norm())}
        t = graph_time(call, sets, args.reps)
        return dict(err, us=t, tflops=flops / (t * 1e-6) / 1e12)

    label = f"{B}x{H}x{SQ}x{SKV}x{D}{' causal' if causal else ''} {dt}"
    row = {"shape": {"BATCH": B, "HEADS": H, "SEQ_Q": SQ, "SEQ_KV": SKV, "HEAD_DIM": D, "CAUSAL": causal, "DTYPE": dt},
           "label": label, "variant": evo_kernel.plan(q, k, v, causal).variant["name"]}
    row["evo"] = measure(lambda q, k, v: evo_kernel.attention(q, k, v, causal=causal))
    for name, be in backends.items():
        try:
            r = measure(sdpa_call(be, causal))
            r["ratio"] = r["us"] / row["evo"]["us"]
            row[name] = r
        except Exception as e:  # a backend that does not support the shape or GPU
            row[name] = {"error": str(e).splitlines()[0][:80] if str(e) else type(e).__name__}
    rows.append(row)
    print(f"  {label}: evo {row['evo']['us']:.2f} us (rel L2 {row['evo']['rel_l2']:.1e})", flush=True)

# The binding on real tensors beyond the contiguous case: a (batch, seq, heads, dim)
# buffer seen as (batch, heads, seq, dim) gives other strides and must give the same
# output; a float32 call must go to PyTorch's SDPA (counted as a dtype fallback) and
# raise FallbackError in strict mode.
B, H, SQ, SKV, D, causal, dt = cases[0]
q, k, v = (torch.randn(B, s_, H, D, device="cuda", dtype=DTYPES[dt]).transpose(1, 2) for s_ in (SQ, SKV, SKV))
same = torch.equal(evo_kernel.attention(q, k, v, causal=causal),
                   evo_kernel.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal))
evo_kernel.reset_stats()
evo_kernel.attention(q.float(), k.float(), v.float(), causal=causal)
fell_back = evo_kernel.stats()["fallback"] == {"dtype": 1}
evo_kernel.set_strict(True)
try:
    evo_kernel.attention(q.float(), k.float(), v.float(), causal=causal)
    refused = None
except evo_kernel.FallbackError as e:
    refused = str(e)
evo_kernel.set_strict(None)
print(f"strided (batch, seq, heads, dim) inputs give the contiguous result: {same}; float32 falls back: {fell_back}, "
      f"refused in strict mode: {refused!r}")

names = ["evo"] + list(backends)
print()
print(f"{'shape (BxHxSqxSkvxD)':<30}" + "".join(f"{n:>24}" for n in names))
for r in rows:
    cells = []
    for n in names:
        x = r[n]
        if "error" in x:
            cells.append("n/a")
        elif n == "evo":
            cells.append(f"{x['us']:.2f} us {x['tflops']:.0f} TF/s")
        else:
            cells.append(f"{x['us']:.2f} us ({x['ratio']:.2f}x)")
    print(f"{r['label']:<30}" + "".join(f"{c:>24}" for c in cells))
print("(ratio = backend time / evo time: above 1, the evo kernel is faster)")
print()
print(f"{'errors vs float64 (rel L2)':<30}" + "".join(f"{n:>24}" for n in names))
for r in rows:
    print(f"{r['label']:<30}" + "".join(f"{('n/a' if 'error' in r[n] else format(r[n]['rel_l2'], '.2e')):>24}" for n in names))
for r in rows:
    for n in names:
        if "error" in r[n]:
            print(f"  {r['label']} {n}: {r[n]['error']}")
json.dump({"format": "evo-compare-torch-1", "artifact": os.path.abspath(args.dir), "runs": [s["run"] for s in m["sources"]],
           "device": dev, "manifest_device": m["device"], "torch": torch.__version__,
           "method": "CUDA graph over input sets rotated past 2x L2, CUDA events, median (scripts/sdpa_bench.py)",
           "strided_inputs_match": same, "float32_falls_back": fell_back, "float32_refused_strict": refused,
           "rows": rows}, open(args.out, "w"), indent=1)
print(f"wrote {args.out}")
bad = [r["label"] for r in rows if not r["evo"]["rel_l2"] < 1e-2]
if bad or not same or not fell_back or refused is None:
    sys.exit(f"the artifact's output is off on {bad}" if bad else "the binding mishandled strided or float32 inputs")
