"""This evo artifact against every PyTorch SDPA backend, in one process on a GPU.

Usage:  python3 bench.py [--shapes B,H,SQ,SKV,D ...] [--dtypes f16,bf16] [--causal both|yes|no]
                         [--reps 15] [--out FILE] [--math-limit N]

Cases: the manifest's timed shapes (or --shapes) x the dtypes the artifact has kernels for
(or --dtypes) x causal and not. On each case:
  * path: whether evo_kernel.scaled_dot_product_attention ran the artifact's kernels or
    fell back to PyTorch's SDPA, and why (evo_kernel.stats()); "slower": the export
    deferred the shape to PyTorch's SDPA because the run measured evo's kernel less than
    min_speedup times faster there (or slower), and evo's kernels are still timed alone
    (the kernel column), showing the ratio here;
  * check: evo's output against SDPA in float64 (rel L2; against PyTorch's default SDPA,
    marked ~, where the float64 score matrices would exceed --ref-limit elements);
  * eager: a plain Python loop of calls on one input set, one synchronize (what a user's
    eager code pays per call), median of 5 loops;
  * graph: many calls captured in one CUDA graph over input sets rotated past 2x the L2
    size, CUDA events, median of --reps replays (the kernels' time without launch costs);
for evo (its function, and through its torch op: what the dispatcher adds), evo's kernels
alone (graph; evo_kernel.kernel_launcher) and each backend: flash, efficient, cudnn, math
(where its score matrices stay under --math-limit elements) and default (PyTorch's choice).
Within a case the loops of all of them are taken in turn, in a new order each rep and each
after an untimed loop of its own call, and so are the graphs' replays (sdpa_bench.eager_times,
graph_times): each ratio compares one host and GPU state (a long run's clocks drift by 10% and
more; the host's speed moves between loops), and no loop inherits another's power state. The timing is
scripts/sdpa_bench.py of the evo repository (copied here as sdpa_bench.py), the method of evo's
own timing gate.

Prints two tables with each backend's time over evo's (above 1: evo is faster), evo's
graph time next to the kernel's own (its launches alone, evo_kernel.kernel_launcher, in the
same kind of CUDA graph in this process; the search's time on the exporting GPU is in the JSON
as manifest_us), and a verdict per goal; writes JSON (--out, default $OUT/bench.json).
"""
import argparse
import json
import os
import sys

import torch
from torch.nn.attention import SDPBackend

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import evo_kernel  # noqa: E402  (the artifact's binding)
from sdpa_bench import BACKENDS, DTYPES, eager_times, graph_time, graph_times, input_sets, l2_bytes, reference, sdpa_call  # noqa: E402

ap = argparse.ArgumentParser(description="evo artifact vs PyTorch SDPA backends")
ap.add_argument("--shapes", nargs="*", help="B,H,SQ,SKV,D (default: the manifest's timed shapes)")
ap.add_argument("--dtypes", help="comma-separated f16,bf16 (default: those the artifact has)")
ap.add_argument("--causal", choices=["both", "yes", "no"], default="both")
ap.add_argument("--reps", type=int, default=15, help="graph replays per timing")
ap.add_argument("--math-limit", type=int, default=1 << 27, help="time the math backend up to this many score elements")
ap.add_argument("--ref-limit", type=int, default=1 << 28, help="float64 reference up to this many score elements")
ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench.json"))
args = ap.parse_args()

m = evo_kernel.MANIFEST
dev = torch.cuda.get_device_name(0)
L2 = l2_bytes()
have = sorted({(e["specialization"]["DTYPE"], e["specialization"]["HEAD_DIM"], e["specialization"]["CAUSAL"])
               for e in m["dispatch"]["table"]})
dtypes = args.dtypes.split(",") if args.dtypes else sorted({h[0] for h in have})
causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
if args.shapes:
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes]
else:
    shapes = []
    for v in m["variants"]:
        for s in v["shapes"]:
            sh = s["shape"]
            t = (sh["BATCH"], sh["HEADS"], sh["SEQ_Q"], sh["SEQ_KV"], sh["HEAD_DIM"])
            if s["timed"] and t not in shapes:
                shapes.append(t)
    shapes.sort(key=lambda t: (t[4], t[0] * t[1] * t[2] * t[3]))
cases = [(s, dt, c) for s in shapes for dt in dtypes for c in causals]

# The kernel's time per case in the search (evo's timing gate on the exporting GPU), when measured.
own = {}
for v in m["variants"]:
    for s in v["shapes"]:
        sh = s["shape"]
        if s["timed"]:
            own[(sh["BATCH"], sh["HEADS"], sh["SEQ_Q"], sh["SEQ_KV"], sh["HEAD_DIM"], sh["DTYPE"], sh["CAUSAL"], v["name"])] = s["median_us"]
same_gpu = m["device"] == dev

print(f"artifact {HERE}: {len(m['variants'])} variant(s) from run(s) {', '.join(s['run'] + ' (' + s['family'] + ')' for s in m['sources'])}, {m['arch']}")
print(f"torch {torch.__version__} on {dev}, L2 {L2 >> 20} MiB; the manifest's times are from {m['device']}"
      + ("" if same_gpu else " (a DIFFERENT GPU: its search times are left out)"))
print(f"kernels for: {'; '.join(f'{d} head_dim {h}' + (' causal' if c else '') for d, h, c in have)}")
print(f"{len(cases)} cases; evo's op is {evo_kernel.OP}", flush=True)

backends = dict(BACKENDS)
backends["math"] = SDPBackend.MATH
rows = []
for (B, H, SQ, SKV, D), dt, causal in cases:
    torch.manual_seed(0)
    sets = input_sets(B, H, SQ, SKV, D, DTYPES[dt], L2)
    q, k, v = sets[0]
    label = f"{B}x{H}x{SQ}x{SKV}x{D} {dt}{' causal' if causal else ''}"
    row = {"shape": [B, H, SQ, SKV, D], "dtype": dt, "causal": causal, "label": label}
    evo_kernel.reset_stats()
    o = evo_kernel.scaled_dot_product_attention(q, k, v, is_causal=causal)
    st = evo_kernel.stats()
    row["path"] = "evo" if st["evo"] == 1 else "fallback: " + ",".join(st["fallback"])
    plan = evo_kernel.plan_of(q, k, v, causal)
    # The variant the call ran, or the one a "slower" fallback declined (its plan keeps it:
    # its kernels are timed alone below); None for every other fallback.
    variant = plan.variant["name"] if plan.variant else None
    row["variant"] = variant
    if row["path"] == "fallback: slower":
        row["slower"] = plan.detail
    score_elems = B * H * SQ * SKV
    if score_elems <= args.ref_limit:
        ref, row["check_against"] = reference(q, k, v, causal), "float64"
    else:
        ref, row["check_against"] = sdpa_call(None, causal)(q, k, v).double(), "sdpa default"
    torch.cuda.synchronize()
    d = o.double() - ref
    row["rel_l2"] = float(d.norm() / ref.norm())
    row["max_abs_err"] = float(d.abs().max())
    del ref, d, o

    # Every timing of a case interleaved (sdpa_bench.eager_times, graph_times): evo, its torch
    # op, its kernels alone and each backend see the same host and GPU state.
    evo_call = lambda q, k, v: evo_kernel.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    eager_calls, graph_calls = {"evo": evo_call}, {"evo": evo_call}
    if evo_kernel._op is not None:
        eager_calls["evo_op"] = lambda q, k, v: evo_kernel._op(q, k, v, None, 0.0, causal, None, False)
    if variant:
        # The kernels alone (no dispatch, no allocation) in the same kind of graph, each input
        # set with its own output (as evo's timing gate: no launch meets an earlier one's).
        launch = evo_kernel.kernel_launcher(q, k, v, is_causal=causal)
        outs = {s[0].data_ptr(): torch.empty_like(s[0]) for s in sets}
        graph_calls["kernel"] = lambda q, k, v: launch(q, k, v, outs[q.data_ptr()])
    for name, be in backends.items():
        if name == "math" and score_elems > args.math_limit:
            row[name] = {"error": f"not timed: {score_elems} score elements > --math-limit"}
            continue
        call = sdpa_call(be, causal)
        try:
            call(q, k, v)
            torch.cuda.synchronize()
        except Exception as e:  # a backend that does not support the shape, dtype or GPU
            row[name] = {"error": (str(e).splitlines() or [type(e).__name__])[0][:100]}
            continue
        eager_calls[name] = graph_calls[name] = call
    loops = [[] for _ in eager_calls]
    eager = dict(zip(eager_calls, zip(eager_times(list(eager_calls.values()), q, k, v, loops=loops), loops)))
    try:
        graph = dict(zip(graph_calls, graph_times(list(graph_calls.values()), sets, args.reps)))
    except Exception:  # one call that cannot be captured: the others one at a time
        graph = {}
        for name, call in graph_calls.items():
            try:
                graph[name] = graph_time(call, sets, args.reps)
            except Exception as e:
                graph[name] = e
    for name, (us, per_loop) in eager.items():
        row[name] = {"eager_us": us, "eager_loops_us": per_loop}
        if name in graph:
            if isinstance(graph[name], Exception):
                row[name] = {"error": "CUDA graph: " + (str(graph[name]).splitlines() or [type(graph[name]).__name__])[0][:90]}
            else:
                row[name]["graph_us"] = graph[name]
    if isinstance(graph.get("evo"), Exception):
        raise graph["evo"]
    k_us = graph.get("kernel")
    row["kernel_us"] = k_us if isinstance(k_us, float) else None
    rows.append(row)
    via = "" if not variant else f" {variant}" if row["path"] == "evo" else f" (evo's {variant} timed alone: kernel)"
    print(f"  {label}: {row['path']}{via}, rel L2 {row['rel_l2']:.1e}, "
          f"evo eager {row['evo']['eager_us']:.1f} us, graph {row['evo']['graph_us']:.2f} us", flush=True)
    del sets, q, k, v

names = ["default", "flash", "efficient", "cudnn", "math"]


def cell(r, name, kind):
    x = r[name]
    if "error" in x:
        return "n/a"
    return f"{x[kind]:.2f} ({x[kind] / r['evo'][kind]:.2f}x)"


w = max(len(r["label"]) for r in rows) + 2


def path(r):
    return "evo" if r["path"] == "evo" else "fell back: " + r["path"][len("fallback: "):]


p = max(len(path(r)) for r in rows) + 2
for kind, title in (("eager_us", "eager: plain loop, one synchronize (µs per call; ratio = backend / evo)"),
                    ("graph_us", "CUDA graph: calls over rotated inputs (µs per call; ratio = backend / evo)")):
    print()
    print(title)
    head = f"{'case':<{w}}{'path':<{p}}{'evo':>11}"
    head += f"{'evo op':>11}" if kind == "eager_us" else f"{'kernel':>11}"
    print(head + "".join(f"{n:>20}" for n in names))
    for r in rows:
        extra = r.get("evo_op", {}).get("eager_us") if kind == "eager_us" else r["kernel_us"]
        line = f"{r['label']:<{w}}{path(r):<{p}}{r['evo'][kind]:>11.2f}"
        line += f"{extra:>11.2f}" if extra is not None else f"{'-':>11}"
        print(line + "".join(f"{cell(r, n, kind):>20}" for n in names))
print()
print(f"{'case':<{w}}{'evo checked against':>20}{'rel L2':>10}{'max abs':>10}  path")
for r in rows:
    print(f"{r['label']:<{w}}{r['check_against']:>20}{r['rel_l2']:>10.1e}{r['max_abs_err']:>10.1e}  {path(r)}{' (' + r['variant'] + ')' if r['path'] == 'evo' else ''}")

# The goals: eager no slower than PyTorch's SDPA (default) wherever evo runs its own
# kernels; in a CUDA graph, no more than 1 µs over the kernel's own time.
served = [r for r in rows if r["path"] == "evo"]
slower = [r["label"] for r in served if "error" not in r["default"] and r["evo"]["eager_us"] > r["default"]["eager_us"]]
over = [f"{r['label']} (+{r['evo']['graph_us'] - r['kernel_us']:.2f} us)" for r in served
        if r["kernel_us"] is not None and r["evo"]["graph_us"] > r["kernel_us"] + 1.0]
compared = [r for r in served if r["kernel_us"] is not None]
bad = [r["label"] for r in served if not r["rel_l2"] < 1e-2]
deferred = [r for r in rows if r["path"] == "fallback: slower"]


def deferral(r):
    """A deferred case with evo's kernel against PyTorch's default SDPA here, in CUDA graphs."""
    d = r["default"].get("graph_us")
    if r["kernel_us"] is None or d is None:
        return f"{r['label']} (not both timed here; {r['slower']})"
    return f"{r['label']} (evo's kernel {r['kernel_us']:.2f} us, SDPA default {d:.2f} us: evo {d / r['kernel_us']:.2f}x here)"


print()
print(f"evo ran its own kernels in {len(served)} of {len(rows)} cases; fell back in "
      + (", ".join(f"{r['label']} ({r['path'][len('fallback: '):]})" for r in rows if r["path"] != "evo") or "none"))
print(f"sent to PyTorch's SDPA because the run measured evo's kernel less than {m['dispatch'].get('min_speedup', 1)}x faster "
      "(slower; evo export --keep-slower keeps evo's kernels): "
      + ("; ".join(deferral(r) for r in deferred) or "none"))
print(f"eager, evo <= SDPA default where evo runs its kernels: {'yes' if not slower else 'NO: ' + '; '.join(slower)}")
print(f"graph, evo <= kernel's own time + 1 us: " + ("n/a (no case served by evo)" if not compared else
      ("yes" if not over else "NO: " + "; ".join(over)) + f" ({len(compared)} cases with a kernel time)"))
print(f"correctness, rel L2 < 1e-2 where evo runs its kernels: {'yes' if not bad else 'NO: ' + '; '.join(bad)}")
json.dump({"format": "evo-artifact-bench-1", "artifact": HERE, "device": dev, "manifest_device": m["device"],
           "torch": torch.__version__, "op": evo_kernel.OP,
           "method": {"eager": "plain loop of calls on one input set, one synchronize, median of 5 loops, the calls' loops in turn in a shuffled order, each after an untimed loop of its own call (sdpa_bench.eager_times)",
                      "graph": "CUDA graph over input sets rotated past 2x L2, CUDA events, median, the calls' graphs replayed in turn (sdpa_bench.graph_times)"},
           "rows": rows, "deferred": [r["label"] for r in deferred], "eager_slower": slower, "graph_over": over, "incorrect": bad},
          open(args.out, "w"), indent=1)
print(f"wrote {args.out}")
sys.exit(1 if bad else 0)
