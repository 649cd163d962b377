"""evo_kernel.scaled_dot_product_attention end to end against fake torch and a fake
libcuda.so.1 (tests/fake_cuda), for crates/evo-cli/tests/export.rs: on each head dim the
artifact has, two calls of two shapes and a third call of the first shape on new tensors
(the plan is reused: only pointers change), then kernel_launcher's launches; prints JSON
with the shapes and pointers used and the output shape, and what a float32 call did (it falls
back to PyTorch's SDPA)."""
import json, sys

sys.path.insert(0, sys.argv[1])
import torch  # the fake, via PYTHONPATH
import evo_kernel as ek  # noqa: E402

calls = []
for v in ek.MANIFEST["variants"]:
    d = v["specialization"]["HEAD_DIM"]
    causal = v["specialization"]["CAUSAL"]
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[v["specialization"]["DTYPE"]]
    for (b, h, sq, skv) in [(2, 3, 100, 130), (1, 8, 512, 512), (2, 3, 100, 130)]:
        q = torch.Tensor((b, h, sq, d), dtype)
        k = torch.Tensor((b, h, skv, d), dtype)
        vv = torch.Tensor((b, h, skv, d), dtype)
        o = ek.attention(q, k, vv, causal=causal)
        calls.append({"shape": [b, h, sq, skv, d], "dtype": v["specialization"]["DTYPE"], "ptrs": [q.data_ptr(), k.data_ptr(), vv.data_ptr(), o.data_ptr()],
                      "out_shape": list(o.shape)})
before = ek.stats()
# kernel_launcher (bench.py's kernel-only timing): the first shape's plan, launched on new
# tensors twice into the launcher's one output, then into a given one; the calls are not
# counted as served.
launched = []
for v in ek.MANIFEST["variants"]:
    d = v["specialization"]["HEAD_DIM"]
    causal = v["specialization"]["CAUSAL"]
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[v["specialization"]["DTYPE"]]
    shapes = [(2, 3, 100, d), (2, 3, 130, d), (2, 3, 130, d)]
    run = ek.kernel_launcher(*(torch.Tensor(s, dtype) for s in shapes), is_causal=causal)
    for given in (None, None, torch.Tensor(shapes[0], dtype)):
        q, k, vv = (torch.Tensor(s, dtype) for s in shapes)
        o = run(q, k, vv, given)
        launched.append({"dtype": v["specialization"]["DTYPE"], "ptrs": [q.data_ptr(), k.data_ptr(), vv.data_ptr(), o.data_ptr()],
                         "given": given.data_ptr() if given is not None else None})
served_after = ek.stats()["evo"]
ek.attention(torch.Tensor((1, 8, 64, 64), torch.float32), torch.Tensor((1, 8, 64, 64), torch.float32),
             torch.Tensor((1, 8, 64, 64), torch.float32))
print(json.dumps({"calls": calls, "served": before["evo"], "launched": launched, "served_after_launcher": served_after,
                  "float32": ek.stats()["fallback"]}))
