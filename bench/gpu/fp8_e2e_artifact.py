#!/usr/bin/env python3
"""An end-to-end FP8 artifact (problem sdpa_fwd_fp8_e2e) called as a PyTorch user calls it, on a
GPU: fp16/bf16 q, k, v into evo_kernel.scaled_dot_product_attention (its kernels quantize to e4m3
inside), strict mode on (a call the kernels do not serve raises instead of falling back).

Per case (the manifest's shapes, plus a ragged one per specialization the artifact has): the
relative L2 error of the artifact and of F.scaled_dot_product_attention (PyTorch's choice, same
dtype) against float64 SDPA (on the first batch entry: the float64 reference of a whole
(4,16,4096,128) call takes seconds), the artifact's max |difference| to PyTorch's output, and
the eager time per call of both on the whole call (scripts/sdpa_bench.eager_time: a plain loop,
one synchronize, median).

Usage: python3 bench/gpu/fp8_e2e_artifact.py ARTIFACT_DIR [--json FILE]
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from sdpa_bench import DTYPES, eager_time, reference  # noqa: E402


def cases(manifest):
    """(batch, heads, seq_q, seq_kv, head_dim, causal, dtype) to call: every measured shape of
    every variant, then a ragged shape (seq 1000 x 1537) in each variant's specialization."""
    out = []
    for v in manifest["variants"]:
        spec = v["specialization"]
        for s in v["shapes"]:
            if s["timed"]:
                sh = s["shape"]
                out.append((sh["BATCH"], sh["HEADS"], sh["SEQ_Q"], sh["SEQ_KV"], sh["HEAD_DIM"],
                            bool(sh["CAUSAL"]), sh["DTYPE"]))
        out.append((2, 8, 1000, 1537, spec["HEAD_DIM"], bool(spec["CAUSAL"]), spec["DTYPE"]))
    return list(dict.fromkeys(out))


def rel_l2(x, ref):
    return float((x.double() - ref).norm() / ref.norm())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("artifact", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    sys.path.insert(0, str(a.artifact))
    import evo_kernel

    manifest = evo_kernel.MANIFEST
    print(f"artifact {a.artifact}: problem {manifest['problem']}, "
          f"variants {[v['name'] for v in manifest['variants']]}, torch {torch.__version__} "
          f"on {torch.cuda.get_device_name(0)}")
    evo_kernel.set_strict(True)
    torch.manual_seed(0)
    rows = []
    header = (f"{'shape':<34} {'evo err':>9} {'torch err':>9} {'max|evo-torch|':>14} "
              f"{'evo us':>9} {'torch us':>9} {'torch/evo':>9}")
    print(header)
    for b, h, sq, skv, d, causal, dtype in cases(manifest):
        t = DTYPES[dtype]
        q = torch.randn(b, h, sq, d, device="cuda", dtype=t)
        k = torch.randn(b, h, skv, d, device="cuda", dtype=t)
        v = torch.randn(b, h, skv, d, device="cuda", dtype=t)
        label = f"({b},{h},{sq}x{skv},{d}) {dtype}{' causal' if causal else ''}"
        try:
            o = evo_kernel.scaled_dot_product_attention(q, k, v, is_causal=causal)
        except evo_kernel.FallbackError as e:
            print(f"{label:<34} not served: {e.reason}: {e}")
            rows.append({"case": label, "error": f"{e.reason}: {e}"})
            continue
        o_torch = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        ref = reference(q[:1], k[:1], v[:1], causal)
        evo_us = eager_time(lambda q, k, v: evo_kernel.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v)
        torch_us = eager_time(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v)
        r = {"case": label, "evo_rel_l2": rel_l2(o[:1], ref), "torch_rel_l2": rel_l2(o_torch[:1], ref),
             "max_abs_evo_torch": float((o.double() - o_torch.double()).abs().max()),
             "evo_eager_us": evo_us, "torch_eager_us": torch_us, "finite": bool(torch.isfinite(o).all())}
        rows.append(r)
        print(f"{label:<34} {r['evo_rel_l2']:9.2e} {r['torch_rel_l2']:9.2e} {r['max_abs_evo_torch']:14.3e} "
              f"{evo_us:9.2f} {torch_us:9.2f} {torch_us / evo_us:9.3f}{'' if r['finite'] else '  NOT FINITE'}")
        del q, k, v, o, o_torch, ref
        torch.cuda.empty_cache()
    stats = evo_kernel.stats()
    print(f"evo_kernel.stats(): {stats}")
    # The gates' end-to-end bound: relative L2 at most 0.25 against attention on the inputs.
    bad = [r["case"] for r in rows if "error" in r or not r["finite"] or r["evo_rel_l2"] > 0.25]
    print("every case served within the end-to-end bound (rel L2 <= 0.25)" if not bad else f"FAILED: {bad}")
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "stats": stats}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
