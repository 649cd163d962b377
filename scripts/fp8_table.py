"""The FP8 attention table: the best sdpa_fwd_fp8_mma variant against the best fp16
sdpa_fwd_mma variant and PyTorch SDPA (fp16) on the default shapes, kernel-only and
end to end, with both errors.

Usage (GPU machine, CuPy): python3 scripts/fp8_table.py FP8_EVAL.json FP16_EVAL.json TORCH.json CUBIN_DIR COMPILE.json

* FP8_EVAL.json / FP16_EVAL.json: `evo --json eval -g BEST` of each family: kernel-only
  median (evo's timing: CUDA graph of R launches over input sets rotated past 2x L2),
  the error against the reference on the kernel's own inputs (fp8: attention on the
  dequantized e4m3 inputs) and, for fp8, the end-to-end error against attention on the
  original fp16 inputs (worst trial of each shape).
* TORCH.json: scripts/torch_sdpa_baseline.py on the same shapes (fp16, same timing method).
* CUBIN_DIR, COMPILE.json: `evo compile --out CUBIN_DIR` and `evo --json compile` of the
  best fp8 genome. With them this script times, with CuPy and the same method (a CUDA
  graph of R calls rotating over input sets past 2x L2), the kernel alone on
  pre-quantized inputs and the end-to-end path from fp16: three quantizer launches
  (sdpa_fp8_quantize, in the same CUBIN) then the attention kernel.
"""
import json, math, sys
import numpy as np

fp8_eval, fp16_eval, torch_file, cubin_dir, compile_file = sys.argv[1:6]
KEYS = ("BATCH", "HEADS", "SEQ_Q", "SEQ_KV", "HEAD_DIM")


def key(v):
    return tuple(v.get(k) for k in KEYS)


def shapes_of(eval_file):
    """shape key -> (median us, worst rel L2, worst end-to-end rel L2 or None), hash, genome."""
    out, hashes = {}, []
    for g in json.load(open(eval_file)):
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
torch_t = {key(s["shape"]): s["median_us"] for s in json.load(open(torch_file))["shapes"]}
print(f"fp8 genome: {fp8_h}\nfp16 genome: {fp16_h}")

# ---- CuPy timing of the fp8 variant: kernel-only and end to end.
e2e_us, ko_us = {}, {}
try:
    import cupy as cp

    reports = json.load(open(compile_file))
    genome = dict(kv.split("=") for kv in reports[0]["genome"].split(","))
    h = reports[0]["hash"]
    L2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]

    def timed(launch, sets, reps=15):
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            for i in range(min(3, sets)):
                launch(i)
            s.synchronize()
            per = max(sets, 64 // sets * sets)
            try:
                s.begin_capture()
                for r in range(per):
                    launch(r % sets)
                g = s.end_capture()
                run = lambda: g.launch(stream=s)
                how = "graph"
            except Exception as e:  # noqa: BLE001
                print(f"graph capture failed ({e}); timing plain launches")
                run = lambda: [launch(r % sets) for r in range(per)]
                how = "launches"
            run()
            s.synchronize()
            ts = []
            for _ in range(reps):
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record(s)
                run()
                b.record(s)
                b.synchronize()
                ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / per)
        ts.sort()
        return ts[len(ts) // 2], how

    for k in fp8:
        B, H, S, SKV, D = k
        spec = next(r for r in reports if r["spec"].endswith(f"HEAD_DIM={D}"))
        (_, dims), = [x for x in spec["launch"] if x[0] == "sdpa_fwd_fp8"]
        cubin = f"{cubin_dir}/{h}.{spec['spec'].replace('=', '-').replace(',', '_')}.cubin"
        mod = cp.RawModule(path=cubin)
        att = mod.get_function("sdpa_fwd_fp8")
        quant = mod.get_function("sdpa_fp8_quantize")
        smem = dims["shared_bytes"]
        att.max_dynamic_shared_size_bytes = smem
        grid = (math.ceil(S / int(genome["BLOCK_M"])), H, B)
        block = tuple(dims["block"])
        n_q, n_kv = B * H * S * D, B * H * SKV * D
        set_bytes = 2 * (n_q + 2 * n_kv) + (n_q + 2 * n_kv) + 2 * n_q
        sets = max(2, math.ceil(2 * L2 / set_bytes))
        data = []
        for i in range(sets):
            x = [cp.random.standard_normal(n, dtype=cp.float32).astype(cp.float16) for n in (n_q, n_kv, n_kv)]
            c = [cp.empty(n, dtype=cp.uint8) for n in (n_q, n_kv, n_kv)]
            d = [cp.empty(B * H, dtype=cp.float32) for _ in range(3)]
            o = cp.empty(n_q, dtype=cp.float16)
            data.append((x, c, d, o))

        def quantize(i):
            x, c, d, _ = data[i]
            for t, seq in enumerate((S, SKV, SKV)):
                quant((B * H,), (256,), (x[t], c[t], d[t], np.int64(seq * D)))

        def attention(i):
            _, c, d, o = data[i]
            st = lambda seq: (np.int64(H * seq * D), np.int64(seq * D), np.int64(D))
            args = (c[0], c[1], c[2], o, d[0], d[1], d[2], np.int32(B), np.int32(H), np.int32(S), np.int32(SKV),
                    *st(S), *st(SKV), *st(SKV), *st(S), np.float32(1 / math.sqrt(D)))
            att(grid, block, args, shared_mem=smem)

        for i in range(sets):
            quantize(i)
        cp.cuda.Device().synchronize()
        ko_us[k], how = timed(attention, sets)
        e2e_us[k], _ = timed(lambda i: (quantize(i), attention(i)), sets)
        print(f"{k}: {sets} input sets, {how}; kernel-only {ko_us[k]:.2f} us, end to end {e2e_us[k]:.2f} us")
except Exception as e:  # noqa: BLE001
    print(f"CuPy timing skipped: {type(e).__name__}: {e}")

print()
hdr = ("shape", "torch fp16", "evo fp16", "fp8 kernel", "fp8 kernel*", "fp8 e2e*", "fp16 err", "fp8 err", "fp8 e2e err")
print("{:<18}{:>11}{:>10}{:>11}{:>12}{:>10}{:>10}{:>10}{:>12}".format(*hdr))
for k in sorted(fp8, key=lambda k: (k[4], k[0] * k[2])):
    f = lambda v, fmt="{:.2f}": fmt.format(v) if v is not None else "-"
    t8, e8, ee = fp8[k]
    t16, e16, _ = fp16.get(k, (None, None, None))
    print("{:<18}{:>11}{:>10}{:>11}{:>12}{:>10}{:>10}{:>10}{:>12}".format(
        f"({k[0]},{k[1]},{k[2]},{k[4]})", f(torch_t.get(k)), f(t16), f(t8), f(ko_us.get(k)), f(e2e_us.get(k)),
        f(e16, "{:.1e}"), f(e8, "{:.1e}"), f(ee, "{:.1e}")))
print("times in us (median per call); * = timed by this script with CuPy (same method); e2e = 3 quantizer launches + attention"
      " from fp16 inputs; errors = worst relative L2 over the gate's trials: fp16/fp8 err against the reference on the"
      " kernel's own inputs (fp8: dequantized e4m3), fp8 e2e err against attention on the original fp16 inputs")
