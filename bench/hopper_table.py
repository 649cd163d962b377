"""The long-shape table from scripts/compare_torch.py's JSON: per shape, the artifact's time,
TFLOP/s and fraction of the dense fp16/bf16 tensor-core peak, and every PyTorch SDPA
backend's time as a ratio (backend time / evo time: above 1, evo is faster).

Usage: python3 bench/hopper_table.py compare_torch.json [--peak-tflops 989.4]
The default peak is H100/H200 SXM: 132 SMs x 4 tensor cores x 1024 fp16 FLOP/clock x
1830 MHz boost (NVIDIA's 989.4 TFLOP/s dense figure); the same for both GPUs.
"""
import argparse, json

ap = argparse.ArgumentParser()
ap.add_argument("json")
ap.add_argument("--peak-tflops", type=float, default=989.4)
a = ap.parse_args()
d = json.load(open(a.json))
rows = d["rows"]
backends = [k for k in rows[0] if k not in ("shape", "label", "variant", "evo")]
print(f"{d['device']}, torch {d['torch']}; {d['method']}; peak {a.peak_tflops} TFLOP/s")
head = f"{'shape (B,H,S,D)':<22}{'causal':>7}{'evo us':>10}{'TFLOP/s':>9}{'% peak':>8}" + "".join(f"{b:>18}" for b in backends) + f"{'best SDPA/evo':>15}{'rel L2':>9}"
print(head)
for r in rows:
    s, e = r["shape"], r["evo"]
    cells, best = [], None
    for b in backends:
        x = r[b]
        if "error" in x:
            cells.append("n/a")
            continue
        cells.append(f"{x['us']:.1f} ({x['ratio']:.2f}x)")
        best = x["us"] if best is None else min(best, x["us"])
    shape = f"({s['BATCH']},{s['HEADS']},{s['SEQ_Q']},{s['HEAD_DIM']})" if s["SEQ_Q"] == s["SEQ_KV"] else f"({s['BATCH']},{s['HEADS']},{s['SEQ_Q']}/{s['SEQ_KV']},{s['HEAD_DIM']})"
    print(f"{shape:<22}{('yes' if s['CAUSAL'] else 'no'):>7}{e['us']:>10.2f}{e['tflops']:>9.1f}{100 * e['tflops'] / a.peak_tflops:>7.1f}%"
          + "".join(f"{c:>18}" for c in cells) + f"{(best / e['us'] if best else float('nan')):>15.2f}{e['rel_l2']:>9.1e}")
print("(backend cells: time in us and backend time / evo time; FLOPs: 4*B*H*D*Sq*Skv, causal counts visible pairs only)")
