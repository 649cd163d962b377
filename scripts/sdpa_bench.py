"""Timing and inputs shared by the PyTorch-side scripts (torch_sdpa_baseline.py,
compare_torch.py, and every artifact's bench.py, which carries a copy of this file): the
method evo's timing gate uses, so numbers compare.

graph_time: R calls captured in one CUDA graph, each on its own input set, sets rotated
so their bytes exceed 2x the L2 size (data from HBM, not cache); warm-up outside the
capture; the graph replayed `reps` times between CUDA events; median per call, in µs.
Same method and numbers as ../shared/tools/torch_sdpa_baseline.py (column graph_us).
graph_times: several calls so, their graphs replayed in turn (compared under one GPU state).

eager_time: what a user's eager code pays per call (Python, dispatch, allocation, launch,
and the kernel when it is the longer part): a plain loop of calls on one input set, one
synchronize at its end, wall clock; median of `reps` loops, in µs. eager_times: several
calls so, their loops taken in turn in a shuffled order, each after an untimed loop of itself.
"""
import random
import time

import torch
from torch.nn.attention import SDPBackend

# PyTorch's SDPA backends by name; None = PyTorch's own choice ("default"). The math
# backend is left out of timings (a reference implementation, orders of magnitude slower
# and O(S^2) memory); scripts may add it on request.
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "default": None}
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def l2_bytes(device=0):
    return torch.cuda.get_device_properties(device).L2_cache_size


def input_sets(B, H, SQ, SKV, D, dtype, l2=None, max_sets=64):
    """(q, k, v) sets, enough that they (with their outputs) exceed twice the L2."""
    l2 = l2 if l2 is not None else l2_bytes()
    per_set = 2 * (B * H * SQ * D * 2 + B * H * SKV * D * 2)
    nsets = max(2, min(max_sets, -(-2 * l2 // per_set)))
    return [(torch.randn(B, H, SQ, D, device="cuda", dtype=dtype),
             torch.randn(B, H, SKV, D, device="cuda", dtype=dtype),
             torch.randn(B, H, SKV, D, device="cuda", dtype=dtype)) for _ in range(nsets)]


def graph_times(calls, sets, reps=15):
    """Median µs per call of each `call(q, k, v)` over the rotated sets (see the module doc),
    one graph per call, the graphs replayed in turn rep after rep, in a new (seeded) order each
    rep and each after a read of 2x the L2: every call sees the same clocks and temperature,
    none inherits another's dirty cache lines (a replay right after the math backend's ran
    2-6 µs slower at (4,8,2048,64)), so their ratios hold even while the GPU drifts (a long
    run's clocks fall by 10% and more at 700 W)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for call in calls:
            for qkv in sets[:3]:
                call(*qkv)  # warm-up and lazy init (module loads, workspace) outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graphs = []
    for call in calls:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for qkv in sets:
                call(*qkv)
        g.replay()
        graphs.append(g)
    torch.cuda.synchronize()
    flush = torch.empty(2 * l2_bytes() // 4, dtype=torch.float32, device="cuda")
    order, rng = list(range(len(calls))), random.Random(0)
    ts = [[] for _ in calls]
    for _ in range(reps):
        rng.shuffle(order)
        for i in order:
            flush.sum()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); graphs[i].replay(); b.record(); b.synchronize()
            ts[i].append(a.elapsed_time(b) * 1e3 / len(sets))
    return [sorted(t)[len(t) // 2] for t in ts]


def graph_time(call, sets, reps=15):
    """graph_times of one call."""
    return graph_times([call], sets, reps)[0]


def eager_times(calls, q, k, v, iters=None, reps=5, target_ms=40.0, loops=None, settle_ms=None):
    """Median µs per call of each `call(q, k, v)` in a plain Python loop (see the module doc),
    the calls' loops taken in turn rep after rep, in a new (seeded) order each rep, each timed
    loop right after an untimed one of the same call lasting about `settle_ms` (default
    `target_ms`): a loop then starts in its own call's power and clock state, not in its
    predecessor's (with a fixed order, cuDNN's loops always after the memory-efficient
    backend's ran 5-12% faster than PyTorch's default, the same kernel, after cuDNN's, at
    (4,16,4096,128)). Per call `iters` calls per loop, by default as many as fill about
    `target_ms` (10 to 200). With `loops` (a list of lists, one per call), each timed loop's
    µs per call is appended to its call's list in the order run."""
    settle_ms = target_ms if settle_ms is None else settle_ms
    counts, per_call_ms = [], []
    for call in calls:
        for _ in range(3):
            call(q, k, v)  # warm-up and lazy init
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(5):
            call(q, k, v)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t) * 1e3 / 5
        per_call_ms.append(ms)
        counts.append(iters if iters is not None else int(min(200, max(10, target_ms / max(ms, 1e-3)))))
    # (at least one call: a call slower than settle_ms still gets its own predecessor)
    settles = [max(1, int(min(400, settle_ms / max(ms, 1e-3)))) for ms in per_call_ms]
    order, rng = list(range(len(calls))), random.Random(0)
    ts = [[] for _ in calls]
    for _ in range(reps):
        rng.shuffle(order)
        for j in order:
            call, n = calls[j], counts[j]
            for _ in range(settles[j]):
                call(q, k, v)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(n):
                call(q, k, v)
            torch.cuda.synchronize()
            ts[j].append((time.perf_counter() - start) * 1e6 / n)
    if loops is not None:
        for mine, t in zip(loops, ts):
            mine.extend(t)
    return [sorted(t)[len(t) // 2] for t in ts]


def eager_time(call, q, k, v, iters=None, reps=5, target_ms=40.0):
    """eager_times of one call."""
    return eager_times([call], q, k, v, iters, reps, target_ms)[0]


def sdpa_call(backend, causal, scale=None):
    """F.scaled_dot_product_attention restricted to one backend (None: PyTorch's choice)."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    def call(q, k, v):
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return call


def reference(q, k, v, causal, scale=None, max_score_bytes=2 << 30):
    """SDPA in float64 (the math path), a few (batch, head) slices at a time so that the
    float64 score matrices stay under `max_score_bytes` (a (1,16,16384,128) call in one
    piece would hold 34 GB of scores, twice)."""
    B, H, SQ, _ = q.shape
    SKV = k.shape[2]
    per_slice = SQ * SKV * 8
    step = max(1, max_score_bytes // per_slice)
    qf, kf, vf = (t.reshape(B * H, 1, t.shape[2], t.shape[3]) for t in (q, k, v))
    call = sdpa_call(None, causal, scale)
    out = [call(qf[i:i + step].double(), kf[i:i + step].double(), vf[i:i + step].double()) for i in range(0, B * H, step)]
    return torch.cat(out).reshape(B, H, SQ, q.shape[3])
