"""evo_kernel's "slower" fallback on a per-shape artifact, against a fake torch and a fake
libcuda.so.1 (tests/fake_cuda), for crates/evo-cli/tests/export.rs. The test names the
calls (B,H,S,D,dtype; S for both sequence lengths, not causal) that must go to PyTorch's SDPA
as "slower" (SLOWER) and those the kernels must serve (SERVED), from its own expectations,
not from the manifest. Checks: the fallback is counted and calls PyTorch's SDPA with the
caller's arguments, decided once per plan, raised in strict mode; served calls stay served
(strict too); kernel_launcher and plan() still reach a deferred call's kernels. Asserts as
it goes; prints JSON naming what it checked and the fallback's details."""
import json, os, sys

sys.path.insert(0, sys.argv[1])
import torch  # the fake, via PYTHONPATH
import torch.nn.functional as F
import evo_kernel as ek  # noqa: E402

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def cases(name):
    out = []
    for c in filter(None, os.environ.get(name, "").split(";")):
        b, h, s, d, dt = c.split(",")
        out.append((c, (int(b), int(h), int(s), int(d)), DTYPES[dt]))
    return out


def qkv(shape, dtype):
    b, h, s, d = shape
    return tuple(torch.Tensor((b, h, s, d), dtype, "cuda:0") for _ in range(3))


checked, details = [], {}
for label, shape, dtype in cases("SLOWER"):
    q, k, v = qkv(shape, dtype)
    before, n = ek.stats(), len(F.calls)
    o = ek.scaled_dot_product_attention(q, k, v, scale=0.5)
    after = ek.stats()
    assert after["evo"] == before["evo"], (label, before, after)
    assert after["fallback"].get("slower", 0) == before["fallback"].get("slower", 0) + 1, (label, after)
    assert len(F.calls) == n + 1 and F.calls[-1]["q"] is q and F.calls[-1]["scale"] == 0.5, label
    assert o.shape == q.shape
    # Decided once: the plan cache holds the fallback, which keeps the declined plan.
    p = ek.plan_of(q, k, v, False, 0.5)
    assert p.__class__ is ek._Fallback and p.reason == "slower" and p.plan is not None, label
    assert ek.plan_of(*qkv(shape, dtype), False, 0.5) is p, label
    details[label] = p.detail
    # Strict mode raises instead, counting nothing.
    ek.set_strict(True)
    before, n = ek.stats(), len(F.calls)
    try:
        ek.scaled_dot_product_attention(q, k, v)
        raise AssertionError(f"strict: {label} did not raise")
    except ek.FallbackError as e:
        assert e.reason == "slower" and "min_speedup times faster than PyTorch's SDPA" in str(e), str(e)
    assert ek.stats() == before and len(F.calls) == n
    ek.set_strict(False)
    # Benchmarks still reach the kernels: plan() and kernel_launcher (not counted as served).
    described = ek.plan(q, k, v)
    assert described.slower == p.detail and described.variant is p.plan.variant, label
    launch = ek.kernel_launcher(q, k, v)
    served_before = ek.stats()["evo"]
    out = launch(q, k, v)
    assert out.shape == q.shape and ek.stats()["evo"] == served_before, label
    checked.append(f"slower:{label}")

for label, shape, dtype in cases("SERVED"):
    q, k, v = qkv(shape, dtype)
    for strict in (False, True):
        ek.set_strict(strict)
        before, n = ek.stats(), len(F.calls)
        ek.scaled_dot_product_attention(q, k, v)
        after = ek.stats()
        assert after["evo"] == before["evo"] + 1 and after["fallback"] == before["fallback"], (label, after)
        assert len(F.calls) == n, label
    ek.set_strict(False)
    assert ek.plan(q, k, v).slower is None, label
    checked.append(f"served:{label}")

print(json.dumps({"checked": checked, "details": details, "stats": ek.stats()}))
