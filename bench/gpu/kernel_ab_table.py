#!/usr/bin/env python3
"""The table of bench/gpu/kernel_ab.sh: evo's times per genome and shape beside PyTorch SDPA's.

Reads `evo eval --json` outputs (one list of genome verdicts per file) and the JSON that
scripts/torch_sdpa_baseline.py writes (per shape the default backend's median and every
backend's under "backends_us"), names the genomes from the A/B genome file, and prints:
  1. per shape and genome: status, median us, TFLOP/s, cuDNN/evo and best-SDPA/evo;
  2. per shape: the best old genome, the best new one, new-over-old speedup, ratio to cuDNN;
  3. the issue's targets (ratio to the best SDPA backend) for the best new genome per shape.
Also writes the rows as JSON (--json). No GPU needed: it only reads files.

Usage: kernel_ab_table.py --genomes bench/gpu/kernel_ab_genomes.txt --torch torch.json \
         --eval a.json [--eval b.json ...] [--eval-old c.json ...] [--json summary.json]
  --eval-old: the same genomes run on the previous templates (evo eval --templates DIR): their
  rows are "old", named old-NAME after the genome file's new-NAME.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

SHAPE_KEYS = ("BATCH", "HEADS", "SEQ_Q", "SEQ_KV", "HEAD_DIM", "CAUSAL")
# Issue 18's targets: the ratio best SDPA backend / evo per shape, causal and not.
TARGETS = {
    (4, 16, 4096, 4096, 64): 1.05,
    (4, 16, 4096, 4096, 128): 1.05,
    (1, 16, 16384, 16384, 128): 1.05,
    (1, 8, 512, 512, 64): 2.0,
    (2, 8, 512, 512, 64): 2.0,
    (2, 8, 512, 512, 128): 1.5,
}
SEED_SHAPES = [(1, 8, 512, 512, 64), (2, 8, 512, 512, 64), (2, 8, 2048, 2048, 64), (2, 8, 512, 512, 128),
               (4, 8, 2048, 2048, 64)]


# Knob values a family's [defaults] fills in (evo eval reports the completed genome): a genome
# file that leaves them out still names the genome evo ran.
DEFAULTS = {"EXP2_POLY=off"}


def canonical(genome: str) -> str:
    return ",".join(sorted(p.strip() for p in genome.split(",") if p.strip() and p.strip() not in DEFAULTS))


def read_genomes(path: Path) -> dict[str, tuple[str, str]]:
    """canonical genome -> (name, templates)."""
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split("#")[0].split()
        if len(parts) == 4:
            out[canonical(parts[3])] = (parts[0], parts[1])
        elif parts:
            raise SystemExit(f"{path}: expected `name templates sets genome`: {line!r}")
    return out


def shape_key(vars_: dict) -> tuple:
    causal = vars_.get("CAUSAL", False)
    if isinstance(causal, str):
        causal = causal == "true"
    return tuple(int(vars_[k]) for k in SHAPE_KEYS[:5]) + (bool(causal),)


def flops(key: tuple) -> float:
    """4 B H D times the (query, key) pairs computed: causal (top-left) row r sees keys 0..r."""
    b, h, sq, skv, d, causal = key
    if causal:
        n = min(sq, skv)
        pairs = n * (n + 1) // 2 + (sq - n) * skv
    else:
        pairs = sq * skv
    return 4.0 * b * h * d * pairs


def read_torch(path: Path) -> dict[tuple, dict[str, float | None]]:
    data = json.loads(path.read_text())
    out = {}
    for e in data["shapes"]:
        backends = dict(e.get("backends_us") or {})
        backends.setdefault("default", e["median_us"])
        out[shape_key(e["shape"])] = backends
    return out


def read_evals(paths: list[Path], names: dict[str, tuple[str, str]], old: bool = False) -> list[dict]:
    """One row per (genome, shape) that a verdict reports, or per failed specialization. With
    `old`, the files ran the genomes on the previous templates: every row is "old"."""
    rows = []
    for path in paths:
        text = path.read_text().strip()
        if not text:
            continue  # an eval that produced nothing (timed out): its genomes are missing
        for gv in json.loads(text):
            genome = canonical(gv["genome"])
            name, templates = names.get(genome, (gv.get("hash", genome)[:8], "?"))
            if old:
                name, templates = "old-" + name.removeprefix("new-"), "old"
            for v in gv.get("verdicts", []):
                result = v.get("result") or {}
                shapes = result.get("shapes") or []
                if v.get("status") != "evaluated" or not shapes:
                    rows.append({"genome": name, "templates": templates, "status": v.get("status"),
                                 "detail": (v.get("detail") or "").splitlines()[:1], "label": v.get("label"),
                                 "shape": None, "us": None})
                    continue
                for s in shapes:
                    t = s.get("timing") or {}
                    rows.append({"genome": name, "templates": templates, "status": "evaluated",
                                 "shape": shape_key(s["vars"]), "us": t.get("median_us"),
                                 "tflops": t.get("tflops")})
    return rows


def fmt_shape(key: tuple) -> str:
    b, h, sq, skv, d, causal = key
    s = f"({b},{h},{sq},{d})" if sq == skv else f"({b},{h},{sq}x{skv},{d})"
    return s + (" causal" if causal else "")


def ratio(a, b):
    return a / b if a and b else None


def build(rows: list[dict], torch: dict) -> dict:
    shapes = sorted({r["shape"] for r in rows if r["shape"]} | set(torch), key=lambda k: (k[5], k[4], k[0] * k[1] * k[2]))
    per_shape = []
    for key in shapes:
        sdpa = torch.get(key, {})
        cudnn = sdpa.get("cudnn")
        best_sdpa = min((t for t in sdpa.values() if t), default=None)
        timed = [r for r in rows if r["shape"] == key and r["us"]]
        for r in timed:
            r["cudnn_over_evo"] = ratio(cudnn, r["us"])
            r["best_sdpa_over_evo"] = ratio(best_sdpa, r["us"])
        best = {}
        for side in ("old", "new"):
            cands = [r for r in timed if r["templates"] == side]
            best[side] = min(cands, key=lambda r: r["us"]) if cands else None
        new, old = best["new"], best["old"]
        per_shape.append({
            "shape": key, "cudnn_us": cudnn, "best_sdpa_us": best_sdpa,
            "best_old": old and old["genome"], "best_old_us": old and old["us"],
            "best_new": new and new["genome"], "best_new_us": new and new["us"],
            "new_over_old": ratio(old and old["us"], new and new["us"]),
            "best_new_tflops": new and flops(key) / new["us"] / 1e6,
            "cudnn_over_new": ratio(cudnn, new and new["us"]),
            "best_sdpa_over_new": ratio(best_sdpa, new and new["us"]),
            "target": TARGETS.get(key[:5]),
        })
    return {"shapes": per_shape}


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def show(rows: list[dict], summary: dict) -> str:
    def f(x, spec):  # a number, or "-" as wide
        return format(x, spec) if x is not None else "-".rjust(int(spec.split(".")[0]))

    out = ["== per shape and genome (median us of a CUDA graph over inputs rotated past 2x L2)",
           f"{'shape':<26} {'genome':<16} {'code':<4} {'status':<14} {'us':>10} {'TFLOP/s':>8} "
           f"{'cuDNN/evo':>10} {'bestSDPA/evo':>12}"]
    for r in sorted((r for r in rows if r["shape"]), key=lambda r: (r["shape"][5], r["shape"][4], r["shape"][:4], r["us"] or 1e30)):
        tfl = flops(r["shape"]) / r["us"] / 1e6 if r["us"] else None
        out.append(f"{fmt_shape(r['shape']):<26} {r['genome']:<16} {r['templates']:<4} {r['status']:<14} "
                   f"{f(r['us'], '10.2f')} {f(tfl, '8.1f')} {f(r.get('cudnn_over_evo'), '10.3f')} "
                   f"{f(r.get('best_sdpa_over_evo'), '12.3f')}")
    failed = [r for r in rows if not r["shape"]]
    for r in failed:
        out.append(f"FAILED {r['genome']} ({r['templates']}) {r['label']}: {r['status']} {' '.join(r['detail'])}")
    out += ["", "== per shape: best old genome, best new genome, PyTorch SDPA",
            f"{'shape':<26} {'cuDNN us':>9} {'best old':<16} {'us':>9} {'best new':<16} {'us':>9} "
            f"{'new/old':>8} {'TFLOP/s':>8} {'cuDNN/new':>9} {'SDPA/new':>9} {'target':>7}"]
    for s in summary["shapes"]:
        tgt = s["target"]
        met = "" if tgt is None or s["best_sdpa_over_new"] is None else (" ok" if s["best_sdpa_over_new"] >= tgt else " no")
        out.append(f"{fmt_shape(s['shape']):<26} {f(s['cudnn_us'], '9.2f')} {s['best_old'] or '-':<16} "
                   f"{f(s['best_old_us'], '9.2f')} {s['best_new'] or '-':<16} {f(s['best_new_us'], '9.2f')} "
                   f"{f(s['new_over_old'], '8.3f')} {f(s['best_new_tflops'], '8.1f')} "
                   f"{f(s['cudnn_over_new'], '9.3f')} {f(s['best_sdpa_over_new'], '9.3f')} "
                   f"{(format(tgt, '.2f') + met) if tgt else '-':>7}")
    for causal in (False, True):
        seeds = [s["best_sdpa_over_new"] for s in summary["shapes"]
                 if s["shape"][:5] in SEED_SHAPES and s["shape"][5] == causal]
        g = geomean(seeds)
        if g:
            out.append(f"geomean best-SDPA/new over the {len(seeds)} seed shapes{' (causal)' if causal else ''}: "
                       f"{g:.3f} (target 1.30)")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--genomes", type=Path, required=True)
    ap.add_argument("--torch", type=Path, help="scripts/torch_sdpa_baseline.py --out file")
    ap.add_argument("--eval", type=Path, action="append", default=[], help="evo eval --json output")
    ap.add_argument("--eval-old", type=Path, action="append", default=[],
                    help="evo eval --json output of the same genomes on the previous templates")
    ap.add_argument("--json", type=Path, help="write the rows and the summary here")
    a = ap.parse_args(argv)
    names = read_genomes(a.genomes)
    missing = [p for p in a.eval + a.eval_old + ([a.torch] if a.torch else []) if not p.is_file()]
    for p in missing:
        print(f"note: {p} is missing (its phase did not run or was cut short)", file=sys.stderr)
    rows = read_evals([p for p in a.eval if p.is_file()], names)
    rows += read_evals([p for p in a.eval_old if p.is_file()], names, old=True)
    torch = read_torch(a.torch) if a.torch and a.torch.is_file() else {}
    summary = build(rows, torch)
    print(show(rows, summary))
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, **summary}, indent=1, default=list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
