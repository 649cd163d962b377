"""Where an evo artifact's time goes inside a Hugging Face model (evidence for issue 17).

Usage:  python3 bench/gpu/artifact_model_profile.py DIR [--layers 4] [--batch 2] [--seq 1024]

The random Llama-style model of bench/gpu/artifact_transformers.py (same config), with
attn_implementation "sdpa" and "evo". Prints:
  1. forward latency of both (eager, median of 20 after warm-up);
  2. the attention call alone, on the tensors the model hands it (captured from its first
     layer): the output's strides and its difference from F.scaled_dot_product_attention's;
     per call in a loop of 200: host time (no synchronize inside the loop) and wall
     time (one synchronize at the end), for F.scaled_dot_product_attention on the views,
     evo's op on the views (read in place where the variant's maps take the call's strides,
     else copied to contiguous), evo's op on contiguous copies, the three copies alone, evo's
     kernels alone (kernel_launcher) on the contiguous copies and on the views;
  3. torch.profiler of one forward of each: the operators with the most self CPU time and
     with the most CUDA time, and the total CUDA time.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--batch", type=int, default=2)
ap.add_argument("--seq", type=int, default=1024)
args = ap.parse_args()
sys.path.insert(0, os.path.abspath(args.dir))
import evo_kernel  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

heads, head_dim, dtype = 16, 64, torch.bfloat16
config = LlamaConfig(vocab_size=8192, hidden_size=heads * head_dim, intermediate_size=4 * heads * head_dim,
                     num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=heads,
                     max_position_embeddings=max(4096, args.seq), attention_dropout=0.0)
name = evo_kernel.register_transformers()
torch.manual_seed(0)
model = LlamaForCausalLM(config).to("cuda", dtype).eval()
tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda")
print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; {args.layers} layers, batch {args.batch} x {args.seq}")


def use(impl):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(impl)
    else:
        model.config._attn_implementation = impl


@torch.inference_mode()
def forward():
    return model(input_ids=tokens, use_cache=False).logits


# 1. forward latency
for impl in ("sdpa", name, "sdpa", name):
    use(impl)
    for _ in range(3):
        forward()
    torch.cuda.synchronize()
    ts = []
    for _ in range(20):
        t = time.perf_counter()
        forward()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    print(f"forward {impl:>5}: median {sorted(ts)[10]:.2f} ms (min {min(ts):.2f})")

# 2. the attention call alone, on the model's own tensors
captured = {}
orig = evo_kernel.transformers_attention


def capture(module, query, key, value, attention_mask, **kw):
    captured.setdefault("qkv", (query, key, value, attention_mask, kw))
    return orig(module, query, key, value, attention_mask, **kw)


from transformers import AttentionInterface  # noqa: E402
AttentionInterface.register(name, capture)
use(name)
forward()
q, k, v, mask, kw = captured["qkv"]
print(f"attention inputs: q {tuple(q.shape)} strides {q.stride()}, k strides {k.stride()}, v strides {v.stride()}, "
      f"mask {None if mask is None else tuple(mask.shape)}, kwargs {sorted(kw)}")
scale = kw.get("scaling")
with torch.inference_mode():
    o_evo = evo_kernel.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    o_ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    err = (o_evo.float() - o_ref.float()).abs().max().item()
print(f"output strides: evo {o_evo.stride()}, F.sdpa {o_ref.stride()}; max |evo - F.sdpa| {err:.2e} "
      f"(|F.sdpa| up to {o_ref.float().abs().max().item():.2f})")
qc, kc, vc = q.contiguous(), k.contiguous(), v.contiguous()
launch = evo_kernel.kernel_launcher(qc, kc, vc, True, scale)
try:
    launch_views = evo_kernel.kernel_launcher(q, k, v, True, scale)
except evo_kernel.ArtifactError as e:  # the variant copies the views first
    print(f"kernel_launcher on the views: {e}")
    launch_views = None
cases = {
    "F.sdpa on the views": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale),
    "evo op on the views": lambda: evo_kernel.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale),
    "evo transformers_attention": lambda: orig(None, q, k, v, None, scaling=scale, is_causal=True),
    "evo op on contiguous": lambda: evo_kernel.scaled_dot_product_attention(qc, kc, vc, is_causal=True, scale=scale),
    "three .contiguous()": lambda: (q.contiguous(), k.contiguous(), v.contiguous()),
    "evo kernels alone": lambda: launch(qc, kc, vc),
}
if launch_views is not None:
    cases["evo kernels alone, views"] = lambda: launch_views(q, k, v)
with torch.inference_mode():
    for label, f in cases.items():
        for _ in range(20):
            f()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(200):
            f()
        host = (time.perf_counter() - t) / 200 * 1e6
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t) / 200 * 1e6
        print(f"  {label:<28} host {host:8.2f} us/call, wall {wall:8.2f} us/call")
print(f"evo_kernel.plan_of for the views: {evo_kernel.plan_of(q, k, v, True, scale).__class__.__name__}, "
      f"stats {evo_kernel.stats()}")
AttentionInterface.register(name, orig)

# 3. torch.profiler of one forward each
from torch.profiler import ProfilerActivity, profile  # noqa: E402
for impl in ("sdpa", name):
    use(impl)
    forward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        forward()
        torch.cuda.synchronize()
    ev = prof.key_averages()
    cuda = sum(getattr(e, "self_device_time_total", 0) for e in ev) / 1e3
    cpu = sum(e.self_cpu_time_total for e in ev) / 1e3
    print(f"\nprofile {impl}: self CPU {cpu:.2f} ms, CUDA {cuda:.2f} ms; top self CPU:")
    print(ev.table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))
    print(ev.table(sort_by="self_cuda_time_total", row_limit=8, max_name_column_width=60))
