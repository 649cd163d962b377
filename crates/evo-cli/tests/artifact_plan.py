"""Drives an artifact's evo_kernel.plan() with fake tensors (no torch, no GPU) for
crates/evo-cli/tests/export.rs: prints JSON with the plan of every shape in the
manifest, for each unusual call the error (a call the kernels do not serve) or the
inputs copied to contiguous first, the tensor maps of a call in a model's (batch, seq,
heads, dim) layout, and the dispatch picks of a few shapes."""
import json, os, sys

sys.path.insert(0, sys.argv[1])
import evo_kernel as ek  # noqa: E402


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from artifact_fakes import Fake, qkv  # noqa: E402

out = {"plans": [], "errors": {}, "picks": {}}
for v in ek.MANIFEST["variants"]:
    for s in v["shapes"]:
        sh = s["shape"]
        dtype = {"f16": "torch.float16", "bf16": "torch.bfloat16"}[sh["DTYPE"]]
        q, k, vv = qkv(sh["BATCH"], sh["HEADS"], sh["SEQ_Q"], sh["SEQ_KV"], sh["HEAD_DIM"], dtype=dtype)
        p = ek.plan(q, k, vv, causal=sh["CAUSAL"])
        d = p.as_dict()
        if d["variant"] != v["name"] and ek.MANIFEST["dispatch"]["mode"] == "specialization":
            raise SystemExit(f"dispatch picked {d['variant']} for a shape of {v['name']}")
        if d["variant"] == v["name"]:
            d["shape"] = sh
            out["plans"].append(d)

cases = {
    "float32": lambda: ek.plan(*qkv(1, 8, 64, 64, 64, dtype="torch.float32")),
    "cpu": lambda: ek.plan(*qkv(1, 8, 64, 64, 64, device="cpu")),
    "head_dim_96": lambda: ek.plan(*qkv(1, 8, 64, 64, 96)),
    "causal": lambda: ek.plan(*qkv(1, 8, 64, 64, 64), causal=True),
    "last_dim_strided": lambda: ek.plan(Fake((1, 8, 64, 64), strides=(65536, 8192, 128, 2)), *qkv(1, 8, 64, 64, 64)[1:]),
    "seq_stride_odd": lambda: ek.plan(Fake((1, 8, 64, 64), strides=(8 * 64 * 68, 64 * 68, 68, 1)), *qkv(1, 8, 64, 64, 64)[1:]),
    "misaligned": lambda: ek.plan(Fake((1, 8, 64, 64), ptr=4098), *qkv(1, 8, 64, 64, 64)[1:]),
    # Rows padded to 72 elements: fine for the ABI's strides, not for a TMA tensor map.
    "padded_rows": lambda: ek.plan(Fake((1, 8, 64, 64), strides=(8 * 64 * 72, 64 * 72, 72, 1)), *qkv(1, 8, 64, 64, 64)[1:]),
    # k broadcast over the batch (expand(): stride 0), so its elements are not apart: copied.
    "expanded_k": lambda: ek.plan(Fake((2, 8, 64, 64)), Fake((2, 8, 64, 64), strides=(0, 4096, 64, 1)),
                                  Fake((2, 8, 64, 64))),
    # A batch of one with an odd batch stride: no stride to speak of, read in place.
    "one_batch_odd_stride": lambda: ek.plan(Fake((1, 8, 64, 64), strides=(3, 4096, 64, 1)), *qkv(1, 8, 64, 64, 64)[1:]),
    "kv_mismatch": lambda: ek.plan(Fake((1, 8, 64, 64)), Fake((1, 8, 32, 64)), Fake((1, 8, 33, 64))),
    "three_d": lambda: ek.plan(Fake((8, 64, 64)), *qkv(1, 8, 64, 64, 64)[1:]),
    "mixed_dtypes": lambda: ek.plan(Fake((1, 8, 64, 64), dtype="torch.bfloat16"), *qkv(1, 8, 64, 64, 64)[1:]),
    "grid_z": lambda: ek.plan(*qkv(70000, 1, 64, 64, 64)),
}
# q, k and v as a model's x.view(b, s, h, d).transpose(1, 2), on the first shape.
sh = ek.MANIFEST["variants"][0]["shapes"][0]["shape"]
b, h, sq, skv, d = sh["BATCH"], sh["HEADS"], sh["SEQ_Q"], sh["SEQ_KV"], sh["HEAD_DIM"]
dtype = {"f16": "torch.float16", "bf16": "torch.bfloat16"}[sh["DTYPE"]]
bshd = [Fake((b, h, s, d), dtype=dtype, ptr=4096 * (i + 1), strides=(s * h * d, d, h * d, 1))
        for i, s in enumerate((sq, skv, skv))]
p = ek.plan(*bshd, causal=sh["CAUSAL"])
out["bshd"] = {"shape": sh, "copies": list(p.copies),
               "maps": [a[2] for a in p.as_dict()["launches"][0]["args"] if a[1] == "tensor_map"]}
out["copies"] = {}
for name, call in cases.items():
    try:
        out["copies"][name] = list(call().copies)
        out["errors"][name] = None
    except ek.ArtifactError as e:
        out["errors"][name] = str(e)

for b, h, s, d in [(2, 8, 2048, 64), (2, 8, 1800, 64), (1, 8, 600, 64), (3, 8, 512, 128)]:
    try:
        out["picks"][f"{b},{h},{s},{d}"] = ek.plan(*qkv(b, h, s, s, d)).variant["name"]
    except ek.ArtifactError as e:
        out["picks"][f"{b},{h},{s},{d}"] = str(e)
print(json.dumps(out))
