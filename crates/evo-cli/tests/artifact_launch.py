"""evo_kernel.scaled_dot_product_attention end to end against fake torch and a fake
libcuda.so.1 (tests/fake_cuda), for crates/evo-cli/tests/export.rs: on each head dim the
artifact has, two calls of two shapes and a third call of the first shape on new tensors
(the plan is reused: only pointers change); prints JSON with the shapes and pointers used
and the output shape, and what a float32 call did (it falls back to PyTorch's SDPA)."""
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
ek.attention(torch.Tensor((1, 8, 64, 64), torch.float32), torch.Tensor((1, 8, 64, 64), torch.float32),
             torch.Tensor((1, 8, 64, 64), torch.float32))
print(json.dumps({"calls": calls, "served": before["evo"], "float32": ek.stats()["fallback"]}))
