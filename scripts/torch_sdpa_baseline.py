"""PyTorch SDPA timed the way evo times kernels, on the shapes of an evo config.

Usage (on a GPU machine):  python3 scripts/torch_sdpa_baseline.py configs/sdpa.toml [--out FILE]

For each [[shapes]] entry of the config (BATCH, HEADS, SEQ_Q, SEQ_KV, HEAD_DIM, CAUSAL,
DTYPE) and each SDPA backend (auto, flash, efficient, cudnn): R calls captured in one
CUDA graph, each on its own input set, sets rotated so their bytes exceed 2x the L2
size (data from HBM, not cache), replayed several times; median per call. The method
and its numbers match ../shared/tools/torch_sdpa_baseline.py (column graph_us).

Writes an evo-baseline-1 file (the `auto` backend's times) that `[search] baseline =
"import:FILE"` reads, and prints a table of every backend. Layout (B, H, S, D)
contiguous, as evo's sdpa_fwd problem passes its tensors.
"""
import argparse, json, sys, tomllib
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

ap = argparse.ArgumentParser()
ap.add_argument("config")
ap.add_argument("--out", default="sdpa_baseline.json")
ap.add_argument("--reps", type=int, default=15)
args = ap.parse_args()
cfg = tomllib.load(open(args.config, "rb"))
spec = cfg.get("spec", {})
shapes = [dict(spec, **s) for s in cfg["shapes"]]
BACKENDS = {"auto": None, "flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION}
L2 = torch.cuda.get_device_properties(0).L2_cache_size
dev = torch.cuda.get_device_name(0)
print(f"torch {torch.__version__} on {dev}, L2 {L2 >> 20} MiB", flush=True)


def graph_time(call, sets, reps):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for qkv in sets[:3]:
            call(*qkv)  # warm-up and lazy init outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for qkv in sets:
            call(*qkv)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / len(sets))
    ts.sort()
    return ts[len(ts) // 2]


out_shapes, rows = [], []
for sh in shapes:
    B, H, SQ, SKV, D = sh["BATCH"], sh["HEADS"], sh["SEQ_Q"], sh["SEQ_KV"], sh["HEAD_DIM"]
    causal = bool(sh.get("CAUSAL", False))
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[sh.get("DTYPE", "f16")]
    per_set = 2 * (B * H * SQ * D * 2 + B * H * SKV * D * 2)
    nsets = max(2, min(64, -(-2 * L2 // per_set)))
    sets = [(torch.randn(B, H, SQ, D, device="cuda", dtype=dtype),
             torch.randn(B, H, SKV, D, device="cuda", dtype=dtype),
             torch.randn(B, H, SKV, D, device="cuda", dtype=dtype)) for _ in range(nsets)]
    q, k, v = sets[0]
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    times = {}
    for name, be in BACKENDS.items():
        def call(q, k, v, be=be):
            if be is None:
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        try:
            o = call(q, k, v)
            torch.cuda.synchronize()
            err = float((o.double() - ref).norm() / ref.norm())
            times[name] = (graph_time(call, sets, args.reps), err)
        except Exception as e:  # a backend that does not support the shape
            times[name] = (None, str(e)[:60])
    full = dict(sh)
    full["CAUSAL"] = causal
    if times["auto"][0] is None:
        sys.exit(f"the default SDPA backend failed on {full}: {times['auto'][1]}")
    out_shapes.append({"shape": full, "median_us": times["auto"][0]})
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
