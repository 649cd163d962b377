"""Table of `evo --json eval` results against PyTorch SDPA times (evo-baseline-1 files
from scripts/torch_sdpa_baseline.py), measured in the same run.

Usage: python3 bench/sdpa_table.py EVAL.json TORCH.json [EVAL2.json TORCH2.json ...]
"""
import json, sys

KEYS = ("BATCH", "HEADS", "SEQ_Q", "SEQ_KV", "HEAD_DIM", "CAUSAL")


def key(vars):
    return tuple(vars.get(k) for k in KEYS)


def label(k):
    b, h, sq, skv, d, c = k
    return f"({b},{h},{sq},{d}){' causal' if c else ''}" if sq == skv else f"({b},{h},{sq}/{skv},{d}){' causal' if c else ''}"


for i in range(1, len(sys.argv), 2):
    genomes = json.load(open(sys.argv[i]))
    torch = {key(s["shape"]): s["median_us"] for s in json.load(open(sys.argv[i + 1]))["shapes"]}
    print(f"\n== {sys.argv[i]}")
    print(f"{'genome':<18}{'status':<16}{'shape':<26}{'max abs err':>12}{'rel L2':>10}{'median us':>11}{'SDPA us':>9}{'SDPA/evo':>9}")
    best = {}
    for g in genomes:
        status = next((v["status"] for v in g["verdicts"] if v["status"] != "evaluated"), "evaluated")
        if status != "evaluated":
            detail = next(v["detail"] for v in g["verdicts"] if v["status"] != "evaluated").splitlines()[0][:90]
            print(f"{g['hash']:<18}{status:<16}{detail}")
            continue
        for v in g["verdicts"]:
            for s in v["result"]["shapes"]:
                worst = max(s["trials"], key=lambda t: t["stats"]["rel_l2"])["stats"]
                k = key(s["vars"])
                t = s.get("timing")
                med = t["median_us"] if t else None
                ref = torch.get(k)
                ratio = f"{ref / med:9.2f}" if med and ref else " " * 9
                print(f"{g['hash']:<18}{status:<16}{label(k):<26}{worst['max_abs']:>12.2e}{worst['rel_l2']:>10.2e}"
                      + (f"{med:>11.2f}" if med else f"{'-':>11}") + (f"{ref:>9.2f}" if ref else f"{'':>9}") + ratio)
                if med and (k not in best or med < best[k][0]):
                    best[k] = (med, g["hash"], g["genome"])
    print("\nfastest evo genome per shape vs PyTorch SDPA (default backend), same GPU, same run:")
    for k, (med, h, genome) in sorted(best.items()):
        ref = torch.get(k)
        print(f"  {label(k):<26} evo {med:9.2f} us  SDPA {ref:9.2f} us  SDPA/evo {ref / med:5.2f}  {h} {genome}")
