"""An artifact's bench.py run on the CPU with a real torch and no GPU (a check of its
logic and printing, not a measurement): scripts/sdpa_bench.py's GPU pieces are replaced
(inputs on the CPU, each "timing" one call), so every line of bench.py runs; evo's calls
fall back (device) and the backends that need CUDA print n/a.

Usage:  python3 bench/gpu/artifact_bench_cpu.py DIR     (torch installed; no GPU needed)
"""
import runpy
import sys
import time

import torch

art = sys.argv[1]
sys.path.insert(0, art)
import sdpa_bench as sb  # noqa: E402  (the artifact's copy)

torch.cuda.get_device_name = lambda *a: "cpu"
torch.cuda.synchronize = lambda *a: None
sb.l2_bytes = lambda *a: 50 << 20


def input_sets(B, H, SQ, SKV, D, dtype, l2=None, max_sets=64):
    return [tuple(torch.randn(B, H, s, D, dtype=dtype) for s in (SQ, SKV, SKV)) for _ in range(2)]


def once(call, q, k, v):
    t = time.perf_counter()
    call(q, k, v)
    return (time.perf_counter() - t) * 1e6


def eager_times(calls, q, k, v, loops=None, **kw):
    ts = [once(c, q, k, v) for c in calls]
    for mine, t in zip(loops or [], ts):
        mine.append(t)
    return ts


sb.input_sets = input_sets
sb.eager_times = eager_times
sb.graph_times = lambda calls, sets, reps=15: [once(c, *sets[0]) for c in calls]
sb.graph_time = lambda call, sets, reps=15: once(call, *sets[0])
sys.argv = [art + "/bench.py", "--shapes", "1,2,64,64,64", "2,2,96,128,128", "--math-limit", "20000",
            "--out", "/dev/null"]
runpy.run_path(art + "/bench.py", run_name="__main__")
