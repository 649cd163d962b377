"""The FP8 attention table: the best sdpa_fwd_fp8_mma variant against the best fp16
sdpa_fwd_mma variant and PyTorch SDPA (fp16) on the default shapes, kernel-only and
end to end, with both errors. Every time comes from evo's own timing gate (a CUDA graph
of R calls rotating over input sets past 2x L2, CUDA events, median).

Usage: python3 bench/fp8_table.py FP8_EVAL.json FP16_EVAL.json TORCH.json E2E_EVAL.json

* FP8_EVAL.json / FP16_EVAL.json: `evo --json eval -g BEST` of each family
  (configs/sdpa_fp8.toml, configs/sdpa.toml): kernel-only median (fp8: on inputs quantized
  on the host), the error against the reference on the kernel's own inputs (fp8: attention
  on the dequantized e4m3 inputs) and, for fp8, the end-to-end error of host-quantized
  inputs against attention on the original fp16 inputs.
* TORCH.json: scripts/torch_sdpa_baseline.py on the same shapes (fp16, same timing method).
* E2E_EVAL.json: `evo --json eval -c configs/sdpa_fp8_e2e.toml -g BEST`: the same genome as
  one variant of four kernels (the family's quantizer on q, k, v, then the attention
  kernel), checked against attention on the fp16 inputs and timed as a whole by evo: the
  end-to-end time from fp16 and the end-to-end error of what the GPU really computed.
  (Until the worker could run a variant whose kernels take different arguments, this
  script timed the end-to-end path itself with CuPy; evo's gates now do, so CuPy is no
  longer needed.)
"""
import json, sys

fp8_eval, fp16_eval, torch_file, e2e_eval = sys.argv[1:5]
KEYS = ("BATCH", "HEADS", "SEQ_Q", "SEQ_KV", "HEAD_DIM")


def key(v):
    return tuple(v.get(k) for k in KEYS)


def shapes_of(eval_file):
    """shape key -> (median us, worst rel L2, worst end-to-end rel L2 or None), genomes."""
    out, hashes = {}, []
    try:
        reports = json.load(open(eval_file))
    except (OSError, ValueError) as e:
        print(f"{eval_file}: {e}")
        return out, hashes
    for g in reports:
        hashes.append((g["hash"], g.get("genome", "")))
        for v in g["verdicts"]:
            if v["status"] != "evaluated":
                print(f"{eval_file}: {g['hash']} {v['status']}: {v['detail'].splitlines()[0][:200]}")
                continue
            for s in v["result"]["shapes"]:
                if s.get("timing") is None:
                    continue
                worst = max(t["stats"]["rel_l2"] for t in s["trials"])
                e2e = [t["end_to_end"]["rel_l2"] for t in s["trials"] if t.get("end_to_end")]
                out[key(s["vars"])] = (s["timing"]["median_us"], worst, max(e2e) if e2e else None)
    return out, hashes


fp8, fp8_h = shapes_of(fp8_eval)
fp16, fp16_h = shapes_of(fp16_eval)
e2e, e2e_h = shapes_of(e2e_eval)
torch_t = {key(s["shape"]): s["median_us"] for s in json.load(open(torch_file))["shapes"]}
print(f"fp8 genome: {fp8_h}\nfp16 genome: {fp16_h}\nfp8 end-to-end genome: {e2e_h}")

print()
hdr = ("shape", "torch fp16", "evo fp16", "fp8 kernel", "fp8 e2e", "fp16 err", "fp8 err", "e2e err", "e2e err*")
fmt = "{:<18}{:>11}{:>10}{:>11}{:>10}{:>10}{:>10}{:>10}{:>10}"
print(fmt.format(*hdr))
for k in sorted(set(fp8) | set(e2e), key=lambda k: (k[4], k[0] * k[2])):
    f = lambda v, spec="{:.2f}": spec.format(v) if v is not None else "-"
    t8, e8, host_e2e = fp8.get(k, (None, None, None))
    t16, e16, _ = fp16.get(k, (None, None, None))
    te, ee, _ = e2e.get(k, (None, None, None))
    print(fmt.format(
        f"({k[0]},{k[1]},{k[2]},{k[4]})", f(torch_t.get(k)), f(t16), f(t8), f(te),
        f(e16, "{:.1e}"), f(e8, "{:.1e}"), f(ee, "{:.1e}"), f(host_e2e, "{:.1e}")))
print("times in us (median per call, evo's timing gate); fp8 kernel = attention on pre-quantized e4m3 inputs;"
      " fp8 e2e = the variant of configs/sdpa_fp8_e2e.toml (3 quantizer launches + attention from fp16 inputs,"
      " one CUDA graph); errors = worst relative L2 over the gate's trials: fp16/fp8 err against the reference on"
      " the kernel's own inputs (fp8: dequantized e4m3), e2e err = the e2e variant's output against attention on"
      " the original fp16 inputs, e2e err* = the same for inputs quantized on the host (fp8 eval)")
