"""evo_kernel's call path against a fake torch and a fake libcuda.so.1 (tests/fake_cuda),
for crates/evo-cli/tests/export.rs: plan caching, every fallback reason (counted, and
PyTorch's SDPA called with the caller's arguments), strict mode (function and
environment), layout copies, the torch op and its fake, the torch.compile branch and the
transformers registration. Asserts as it goes; prints JSON naming what it checked."""
import json, os, sys

sys.path.insert(0, sys.argv[1])
import torch  # the fake, via PYTHONPATH
import torch.nn.functional as F
import evo_kernel as ek  # noqa: E402

checked = []
specs = sorted((e["specialization"]["DTYPE"], e["specialization"]["HEAD_DIM"], e["specialization"]["CAUSAL"])
               for e in ek.MANIFEST["dispatch"]["table"])
DT, D, CAUSAL = specs[0]
DTYPE = {"f16": torch.float16, "bf16": torch.bfloat16}[DT]
B, H, S = 2, 4, 96


def qkv(b=B, h=H, s=S, d=D, dtype=DTYPE, device="cuda:0", hk=None, **kw):
    hk = h if hk is None else hk
    return (torch.Tensor((b, h, s, d), dtype, device, **kw), torch.Tensor((b, hk, s, d), dtype, device, **kw),
            torch.Tensor((b, hk, s, d), dtype, device, **kw))


def served(call):
    """Runs call(); asserts the kernels served it (no fallback); returns the output."""
    before, n = ek.stats(), len(F.calls)
    o = call()
    after = ek.stats()
    assert after["evo"] == before["evo"] + 1, (before, after)
    assert after["fallback"] == before["fallback"], (before, after)
    assert len(F.calls) == n, "PyTorch SDPA was called"
    return o


def falls_back(reason, q, k, v, **kw):
    """The call goes to PyTorch's SDPA with the same arguments, counted under `reason`."""
    before, n = ek.stats(), len(F.calls)
    o = ek.scaled_dot_product_attention(q, k, v, **kw)
    after = ek.stats()
    assert after["evo"] == before["evo"], (reason, before, after)
    assert after["fallback"].get(reason, 0) == before["fallback"].get(reason, 0) + 1, (reason, before, after)
    assert sum(after["fallback"].values()) == sum(before["fallback"].values()) + 1, (reason, after)
    assert len(F.calls) == n + 1, reason
    c = F.calls[-1]
    assert c["q"] is q and c["k"] is k and c["v"] is v, reason
    for name, default in (("attn_mask", None), ("dropout_p", 0.0), ("is_causal", False), ("scale", None), ("enable_gqa", False)):
        assert c[name] == kw.get(name, default) or c[name] is kw.get(name, default), (reason, name, c[name])
    assert o.shape == q.shape[:-1] + (v.shape[-1],)
    checked.append(f"fallback:{reason}")


# -- planning and the plan cache
q, k, v = qkv()
p = ek.plan_of(q, k, v, CAUSAL)
assert isinstance(p, ek._Plan), p.detail
q2, k2, v2 = qkv()
assert q2.data_ptr() != q.data_ptr()
assert ek.plan_of(q2, k2, v2, CAUSAL) is p, "same dtypes, devices, shapes, strides, causal, scale: the same plan"
qt = torch.Tensor((B, S, H, D), DTYPE).transpose(1, 2)  # (batch, heads, seq, dim) over a (batch, seq, heads, dim) buffer
assert qt.shape == q.shape and qt.stride() != q.stride()
assert ek.plan_of(qt, k, v, CAUSAL) is not p, "other strides: another plan"
assert ek.plan_of(q, k, v, CAUSAL, 0.5) is not p, "another scale: another plan"
assert ek.plan_of(q, k, v, CAUSAL, 0.5) is ek.plan_of(q, k, v, CAUSAL, 0.5)
assert ek.plan_of(*qkv(dtype=torch.float32), CAUSAL) is not p, "another dtype: another plan"
checked.append("cache")

# -- served calls: a new contiguous output like q
o = served(lambda: ek.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL))
assert o.shape == q.shape and o.is_contiguous() and o.dtype is q.dtype
served(lambda: ek.attention(q, k, v, causal=CAUSAL))
served(lambda: ek.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL, enable_gqa=True))  # equal heads: no GQA
# ... dense in q's dimension order: a transformers-style view over (batch, seq, heads, dim)
# memory gets an output in that memory order (its transpose(1, 2) is contiguous: no copy
# there), whether or not q itself is copied for the kernels, and the kernels write it so.
ot = served(lambda: ek.scaled_dot_product_attention(qt, k, v, is_causal=CAUSAL))
want = torch._contiguous((B, H, S, D)) if "o" in ek.plan(q, k, v, CAUSAL).variant["contiguous"] else (S * H * D, D, H * D, 1)
assert ot.shape == q.shape and ot.stride() == want, (ot.stride(), want)
assert ot.transpose(1, 2).is_contiguous() == (want != torch._contiguous((B, H, S, D)))
written = {a[0]: a[2] for launch in ek.plan(qt, k, v, CAUSAL).launches for a in launch.args}
assert (written["o_batch_stride"], written["o_head_stride"], written["o_seq_stride"]) == want[:3], written
checked.append("served")

# -- every fallback reason
mask = torch.Tensor((1, 1, S, S), DTYPE)
falls_back("mask", q, k, v, attn_mask=mask, is_causal=False)
falls_back("dropout", q, k, v, dropout_p=0.1, is_causal=CAUSAL)
qg, kg, vg = qkv(hk=H // 2)
falls_back("gqa", qg, kg, vg, is_causal=CAUSAL, enable_gqa=True)
falls_back("dtype", *qkv(dtype=torch.float32), is_causal=CAUSAL)
qm = torch.Tensor((B, H, S, D), torch.bfloat16 if DT == "f16" else torch.float16)
if (("bf16" if DT == "f16" else "f16"), D, CAUSAL) not in specs:
    falls_back("dtype", qm, k, v, is_causal=CAUSAL)  # mixed dtypes
heads = {s[1] for s in specs}
other = next(d for d in (96, 80, 32, 256) if d not in heads)
falls_back("head_dim", *qkv(d=other), is_causal=CAUSAL)
if (DT, D, not CAUSAL) not in specs:
    falls_back("causal", q, k, v, is_causal=not CAUSAL)
falls_back("device", *qkv(device="cpu"), is_causal=CAUSAL)
falls_back("shape", torch.Tensor((H, S, D), DTYPE), torch.Tensor((H, S, D), DTYPE), torch.Tensor((H, S, D), DTYPE), is_causal=CAUSAL)
falls_back("shape", *qkv(b=70000, h=1, s=64), is_causal=CAUSAL)  # grid.z beyond 65535
falls_back("grad", *qkv(requires_grad=True), is_causal=CAUSAL)
torch.set_grad_enabled(False)
served(lambda: ek.scaled_dot_product_attention(*qkv(requires_grad=True), is_causal=CAUSAL))
torch.set_grad_enabled(True)
# Another architecture (a fresh decision: capabilities and plans are cached per device).
ek._capabilities.clear(), ek._plans.clear()
torch.cuda.capability = (8, 0)
falls_back("arch", q, k, v, is_causal=CAUSAL)
torch.cuda.capability = (9, 0)
ek._capabilities.clear(), ek._plans.clear()
served(lambda: ek.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL))
# ("slower" needs a dispatch entry marked defer: export.rs tests it on its own artifact.)
assert set(ek.stats()["fallback"]) >= set(ek.REASONS) - {"causal", "slower"}, ek.stats()

# -- strict mode: raises instead, names the reason, counts nothing
for how in ("function", "environment"):
    if how == "function":
        ek.set_strict(True)
    else:
        ek.set_strict(None)
        os.environ["EVO_KERNEL_STRICT"] = "1"
    before, n = ek.stats(), len(F.calls)
    try:
        ek.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        raise AssertionError(f"strict ({how}) did not raise")
    except ek.FallbackError as e:
        assert e.reason == "mask" and "attn_mask" in str(e) and isinstance(e, ek.ArtifactError), str(e)
    try:
        ek.scaled_dot_product_attention(*qkv(d=other), is_causal=CAUSAL)
        raise AssertionError(f"strict ({how}) did not raise")
    except ek.FallbackError as e:
        assert e.reason == "head_dim" and f"head dim {other}" in str(e), str(e)
    assert ek.stats() == before and len(F.calls) == n
    served(lambda: ek.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL))  # what it covers still runs
    checked.append(f"strict:{how}")
os.environ["EVO_KERNEL_STRICT"] = "0"
falls_back("mask", q, k, v, attn_mask=mask)
del os.environ["EVO_KERNEL_STRICT"]

# -- layout: declared tensors and strided last dimensions are copied, the rest keep strides
declared = ek.plan(q, k, v, CAUSAL).variant["contiguous"]
copies = ek.stats()["copies"].get("q", 0)
served(lambda: ek.scaled_dot_product_attention(qt, k, v, is_causal=CAUSAL))
assert ek.stats()["copies"].get("q", 0) == copies + ("q" in declared), (declared, ek.stats())
described = ek.plan(qt, k, v, CAUSAL)
assert described.copies == (("q",) if "q" in declared else ()), described.copies
if "q" not in declared:
    args = {a[0]: a[2] for a in described.launches[0].args}
    assert (args["q_batch_stride"], args["q_head_stride"], args["q_seq_stride"]) == qt.stride()[:3], args
q_strided = torch.Tensor((B, H, S, D), DTYPE, strides=(H * S * D * 2, S * D * 2, D * 2, 2))
served(lambda: ek.scaled_dot_product_attention(q_strided, k, v, is_causal=CAUSAL))
assert ek.plan(q_strided, k, v, CAUSAL).copies == ("q",)
copies = ek.stats()["copies"].get("k", 0)
k_odd = torch.Tensor((B, H, S, D), DTYPE, ptr=k.data_ptr() + 8)  # not 16-byte aligned
served(lambda: ek.scaled_dot_product_attention(q, k_odd, v, is_causal=CAUSAL))
assert ek.stats()["copies"]["k"] == copies + 1
checked.append("layout")

# -- the torch op: registered with a fake; the compile branch goes through it
op = torch.library.ops[ek.OP]
assert ek.OP == f"evo::sdpa_{ek.ID}" and op.fake is not None
fake_out = op.fake(q, k, v, None, 0.0, CAUSAL, None, False)
assert fake_out.shape == q.shape and fake_out.is_contiguous()
calls = len(torch.library.calls)
torch.compiler.compiling = True
o = served(lambda: ek.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL, scale=0.25))
assert len(torch.library.calls) == calls + 1 and torch.library.calls[-1][1] == (q, k, v, None, 0.0, CAUSAL, 0.25, False)
n = len(F.calls)
qr = qkv(requires_grad=True)
ek.scaled_dot_product_attention(*qr, is_causal=CAUSAL)  # traced natively: the op has no backward
assert len(torch.library.calls) == calls + 1 and len(F.calls) == n + 1 and F.calls[-1]["q"] is qr[0]
torch.compiler.compiling = False
served(lambda: ek.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL))
assert len(torch.library.calls) == calls + 1, "eager calls do not go through the dispatcher"
checked.append("op")

# -- transformers: the attention function and SDPA's mask rules under the name "evo"
import transformers  # noqa: E402  (the fake)
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # noqa: E402

assert ek.register_transformers() == "evo"
assert transformers.AttentionInterface._global_mapping["evo"] is ek.transformers_attention
assert AttentionMaskInterface._global_mapping["evo"] is sdpa_mask


class Module:
    is_causal = CAUSAL


out, weights = served(lambda: ek.transformers_attention(Module(), q, k, v, None, scaling=0.3))
assert weights is None and out.shape == (B, S, H, D) and out.is_contiguous()
n = len(F.calls)
ek.transformers_attention(Module(), q, k, v, mask, dropout=0.0, scaling=0.3)
assert F.calls[-1]["attn_mask"] is mask and F.calls[-1]["is_causal"] is False and F.calls[-1]["scale"] == 0.3
ek.transformers_attention(Module(), qg, kg, vg, None)
assert F.calls[-1]["enable_gqa"] is True and len(F.calls) == n + 2
checked.append("transformers")

print(json.dumps({"checked": checked, "stats": ek.stats(), "spec": [DT, D, CAUSAL], "declared": declared}))
