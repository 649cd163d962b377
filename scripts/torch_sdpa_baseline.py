"""PyTorch SDPA timed the way evo times kernels, on the shapes of an evo config.

Usage (on a GPU machine):  python3 scripts/torch_sdpa_baseline.py configs/sdpa.toml [--out FILE]

For each [[shapes]] entry of the config (BATCH, HEADS, SEQ_Q, SEQ_KV, HEAD_DIM, CAUSAL,
DTYPE) and each SDPA backend (default, flash, efficient, cudnn): R calls captured in one
CUDA graph, each on its own input set, sets rotated so their bytes exceed 2x the L2
size (data from HBM, not cache), replayed several times; median per call. The method
(scripts/sdpa_bench.py) and its numbers match ../shared/tools/torch_sdpa_baseline.py (column graph_us).

Writes an evo-baseline-1 file (the `default` backend's times; every backend's under
"backends_us", null where it does not support the shape, and its relative L2 error against
float64 SDPA on the first input set under "backends_rel_l2") that `[search] baseline =
"import:FILE"` reads, and prints a table of every backend. Layout (B, H, S, D)
contiguous, as evo's sdpa_fwd problem passes its tensors.
"""
import argparse, json, sys, tomllib
import torch

from sdpa_bench import BACKENDS, DTYPES, graph_time, input_sets, l2_bytes, reference, sdpa_call

ap = argparse.ArgumentParser()
ap.add_argument("config")
ap.add_argument("--out", default="sdpa_baseline.json")
ap.add_argument("--reps", type=int, default=15)
args = ap.parse_args()
cfg = tomllib.load(open(args.config, "rb"))
spec = cfg.get("spec", {})
shapes = [dict(spec, **s) for s in cfg["shapes"]]
L2 = l2_bytes()
dev = torch.cuda.get_device_name(0)
print(f"torch {torch.__version__} on {dev}, L2 {L2 >> 20} MiB", flush=True)

out_shapes, rows = [], []
for sh in shapes:
    B, H, SQ, SKV, D = sh["BATCH"], sh["HEADS"], sh["SEQ_Q"], sh["SEQ_KV"], sh["HEAD_DIM"]
    causal = bool(sh.get("CAUSAL", False))
    sets = input_sets(B, H, SQ, SKV, D, DTYPES[sh.get("DTYPE", "f16")], L2)
    q, k, v = sets[0]
    ref = reference(q, k, v, causal)
    times = {}
    for name, be in BACKENDS.items():
        call = sdpa_call(be, causal)
        try:
            o = call(q, k, v)
            torch.cuda.synchronize()
            err = float((o.double() - ref).norm() / ref.norm())
            times[name] = (graph_time(call, sets, args.reps), err)
        except Exception as e:  # a backend that does not support the shape
            times[name] = (None, str(e)[:60])
    full = dict(sh)
    full["CAUSAL"] = causal
    if times["default"][0] is None:
        sys.exit(f"the default SDPA backend failed on {full}: {times['default'][1]}")
    out_shapes.append({"shape": full, "median_us": times["default"][0],
                       "backends_us": {n: t for n, (t, _) in times.items()},
                       "backends_rel_l2": {n: e for n, (t, e) in times.items() if t is not None}})
    rows.append((f"{B}x{H}x{SQ}x{SKV}x{D}{' causal' if causal else ''}", times))

json.dump({"format": "evo-baseline-1", "source": f"torch {torch.__version__} sdpa (default backend), CUDA graph",
           "device": dev, "shapes": out_shapes}, open(args.out, "w"), indent=1)
print(f"{'shape (BxHxSqxSkvxD)':<28}" + "".join(f"{n:>22}" for n in BACKENDS))
for label, times in rows:
    cells = []
    for n in BACKENDS:
        t, e = times[n]
        cells.append(f"{t:9.2f} us (err {e:.0e})" if t is not None else f"{'n/a':>22}")
    print(f"{label:<28}" + "".join(f"{c:>22}" for c in cells))
print(f"wrote {args.out}")
