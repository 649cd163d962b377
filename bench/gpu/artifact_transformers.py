"""An evo artifact inside a Hugging Face model, on a GPU: a small randomly initialised
Llama-style causal LM (no download) run with attn_implementation="sdpa" and "evo"
(evo_kernel.register_transformers()) on the same weights and tokens.

Usage:  python3 bench/gpu/artifact_transformers.py DIR [--layers 4] [--batch 2] [--seq 1024] [--iters 20]

Picks the dtype (bf16 when the artifact has it) and head dim (64 or 128) of the artifact's
causal kernels. Checks: every attention call of the evo model ran the artifact's kernels
(evo_kernel.stats(): no fallback), and its logits are as close to a float32 forward of
the same model as the sdpa model's are (rel L2 at most twice the sdpa model's, or 1e-3);
reports both errors and the forward latency of both: eager (the two taking turns, --rounds
rounds of --iters forwards each after warm-up; the median of each one's forwards, and its
rounds' medians, since a forward this small is bound by the host's Python and varies with the
machine's load) and replayed from a CUDA graph of one forward (the GPU's time alone; said and
skipped where capture fails). Exits 1 when a check fails.
"""
import argparse
import os
import sys
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--batch", type=int, default=2)
ap.add_argument("--seq", type=int, default=1024)
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--rounds", type=int, default=5)
args = ap.parse_args()
sys.path.insert(0, os.path.abspath(args.dir))
import evo_kernel  # noqa: E402
import transformers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

causal = sorted({(e["specialization"]["DTYPE"], e["specialization"]["HEAD_DIM"])
                 for e in evo_kernel.MANIFEST["dispatch"]["table"] if e["specialization"]["CAUSAL"]})
if not causal:
    sys.exit("the artifact has no causal kernel: a causal LM would only fall back")
dt, head_dim = next((c for c in causal if c[0] == "bf16"), causal[0])
dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
heads = 16
config = LlamaConfig(vocab_size=8192, hidden_size=heads * head_dim, intermediate_size=4 * heads * head_dim,
                     num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=heads,
                     max_position_embeddings=max(4096, args.seq), attention_dropout=0.0)
print(f"transformers {transformers.__version__}, torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
print(f"Llama-style: {args.layers} layers, {heads} heads of {head_dim}, hidden {config.hidden_size}, {dtype}; "
      f"batch {args.batch} x {args.seq} tokens")

name = evo_kernel.register_transformers()
torch.manual_seed(0)
model = LlamaForCausalLM(config).to("cuda").eval()
tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda")


def use(impl):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(impl)
    else:
        model.config._attn_implementation = impl


@torch.inference_mode()
def logits():
    return model(input_ids=tokens, use_cache=False).logits.float()


use("sdpa")
ref = logits()  # float32 weights and activations
model.to(dtype)
out = {}
for impl in ("sdpa", name):
    use(impl)
    evo_kernel.reset_stats()
    out[impl] = logits()
    st = evo_kernel.stats()
    if impl == name:
        served = st
for impl in out:
    d = out[impl] - ref
    print(f"  {impl:>5}: logits vs float32 forward: rel L2 {float(d.norm() / ref.norm()):.2e}, max abs {float(d.abs().max()):.2e}")
err = {impl: float((out[impl] - ref).norm() / ref.norm()) for impl in out}
diff = out[name] - out["sdpa"]
print(f"  evo vs sdpa logits: rel L2 {float(diff.norm() / out['sdpa'].norm()):.2e}, max abs {float(diff.abs().max()):.2e}")
print(f"  evo_kernel.stats() for one forward: {served}")


def timed_forwards(n):
    """Wall time of each of n eager forwards, ms."""
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        logits()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    return ts


each = {"sdpa": [], name: []}
rounds = {"sdpa": [], name: []}
for impl in ("sdpa", name):
    use(impl)
    timed_forwards(3)
for _ in range(args.rounds):
    for impl in ("sdpa", name):
        use(impl)
        ts = timed_forwards(args.iters)
        each[impl] += ts
        rounds[impl].append(sorted(ts)[len(ts) // 2])
times = {impl: sorted(ts)[len(ts) // 2] for impl, ts in each.items()}
print(f"forward latency, eager ({args.rounds} rounds of {args.iters}, taking turns): median sdpa {times['sdpa']:.2f} ms, "
      f"evo {times[name]:.2f} ms ({times['sdpa'] / times[name]:.2f}x); round medians sdpa "
      f"{' '.join(f'{t:.2f}' for t in rounds['sdpa'])}, evo {' '.join(f'{t:.2f}' for t in rounds[name])}")


def graph_forward_ms(impl):
    """Median time of one forward replayed from a CUDA graph (the GPU's time, no host), ms."""
    use(impl)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            logits()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        logits()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(args.iters):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        ts.append(start.elapsed_time(end))
    return sorted(ts)[len(ts) // 2]


try:
    graph = {impl: graph_forward_ms(impl) for impl in ("sdpa", name)}
    print(f"forward latency, one CUDA graph (median of {args.iters} replays): sdpa {graph['sdpa']:.3f} ms, "
          f"evo {graph[name]:.3f} ms ({graph['sdpa'] / graph[name]:.2f}x)")
except Exception as e:  # a model whose forward cannot be captured: eager only
    print(f"forward latency, one CUDA graph: not measured, capture failed: {type(e).__name__}: {e}")

ok = True
if served["fallback"] or served["evo"] != args.layers:
    print(f"FAIL: every one of the {args.layers} attention calls should run the artifact's kernels: {served}")
    ok = False
bound = max(2 * err["sdpa"], 1e-3)
if not err[name] <= bound:
    print(f"FAIL: evo's logits are further from the float32 forward ({err[name]:.2e}) than allowed ({bound:.2e})")
    ok = False
print("transformers test: " + ("ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
