"""evo_kernel.attention end to end against fake torch and a fake libcuda.so.1
(tests/fake_cuda), for crates/evo-cli/tests/export.rs: two calls on each head dim the
artifact has; prints JSON with the shapes and pointers used and the output shape."""
import json, sys

sys.path.insert(0, sys.argv[1])
import torch  # the fake, via PYTHONPATH
import evo_kernel as ek  # noqa: E402

calls = []
for v in ek.MANIFEST["variants"]:
    d = v["specialization"]["HEAD_DIM"]
    for (b, h, sq, skv) in [(2, 3, 100, 130), (1, 8, 512, 512)]:
        q = torch.Tensor((b, h, sq, d))
        k = torch.Tensor((b, h, skv, d))
        vv = torch.Tensor((b, h, skv, d))
        o = ek.attention(q, k, vv)
        calls.append({"shape": [b, h, sq, skv, d], "ptrs": [q.data_ptr(), k.data_ptr(), vv.data_ptr(), o.data_ptr()],
                      "out_shape": list(o.shape)})
try:
    ek.attention(torch.Tensor((1, 8, 64, 64), torch.float32), torch.Tensor((1, 8, 64, 64)), torch.Tensor((1, 8, 64, 64)))
    err = None
except ek.ArtifactError as e:
    err = str(e)
print(json.dumps({"calls": calls, "float32_error": err}))
