#!/usr/bin/env python3
"""The table of bench/gpu/fp8_e2e.sh: FP8 attention end to end (fp16/bf16 in, quantizer +
attention as one call) beside the same genome kernel only (inputs already e4m3) and PyTorch SDPA.

Per shape and genome: end-to-end median us with the two-pass quantizer (sdpa_fwd_fp8_e2e_ws) and
with the one-pass cluster quantizer (sdpa_fwd_fp8_e2e_ws_cluster), kernel-only us (CUDA graph,
evo's timing gate), each quantizer's time (e2e - kernel) and the bandwidth that implies for one
pass's minimal traffic (read q, k, v in DTYPE, write their codes: 3 bytes per element), cuDNN
(fp16/bf16, the same shape) over each, and the errors: each end-to-end variant's relative L2
against attention on the original inputs (the worst trial), the kernel-only variant's end-to-end
error (its trials' `end_to_end`), and cuDNN's own relative L2 against float64 SDPA
(scripts/torch_sdpa_baseline.py). Then per shape the best end-to-end variant. No GPU needed: it
only reads files.

Usage: fp8_e2e_table.py --genomes bench/gpu/fp8_e2e_genomes.txt --torch torch.json \
         --e2e e2e.json [--cluster cluster.json] --kernel kernel.json [--json summary.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_ab_table as kt  # noqa: E402


def key_of(vars_: dict) -> tuple:
    """kernel_ab_table's shape key (batch, heads, seq_q, seq_kv, head_dim, causal) plus DTYPE:
    the same shape runs in f16 and bf16 here."""
    return kt.shape_key(vars_) + (vars_.get("DTYPE", "f16"),)


def fmt_key(key: tuple) -> str:
    return f"{kt.fmt_shape(key[:6])} {key[6]}"


def read_genomes(path: Path) -> dict[str, str]:
    """canonical genome -> name (lines `name genome`)."""
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split("#")[0].split()
        if len(parts) == 2:
            out[kt.canonical(parts[1])] = parts[0]
        elif parts:
            raise SystemExit(f"{path}: expected `name genome`: {line!r}")
    return out


def read_torch(path: Path) -> dict[tuple, dict]:
    """shape key -> {"us": {backend: us}, "rel_l2": {backend: error}}."""
    out = {}
    for e in json.loads(path.read_text())["shapes"]:
        us = dict(e.get("backends_us") or {})
        us.setdefault("default", e["median_us"])
        out[key_of(e["shape"])] = {"us": us, "rel_l2": dict(e.get("backends_rel_l2") or {})}
    return out


def worst(trials: list[dict], field: str) -> float | None:
    errs = [t[field]["rel_l2"] for t in trials if t.get(field)]
    return max(errs) if errs else None


def genome_name(genome: str, names: dict[str, str], fallback: str) -> str:
    """The genome's name in the genomes file; a cluster genome's quantizer schedule (its
    QUANT_CLUSTER and QUANT_CTAS_PER_SM, not in the file) as a suffix: `n192-L q16x3`."""
    knobs = dict(p.split("=", 1) for p in kt.canonical(genome).split(",") if "=" in p)
    quant = {k: knobs.pop(k) for k in ("QUANT_CLUSTER", "QUANT_CTAS_PER_SM") if k in knobs}
    name = names.get(",".join(f"{k}={v}" for k, v in sorted(knobs.items())), fallback)
    if quant:
        name += f" q{quant.get('QUANT_CLUSTER', '8')}x{quant.get('QUANT_CTAS_PER_SM', '1')}"
    return name


def read_eval(path: Path | None, names: dict[str, str]) -> tuple[dict, list[str]]:
    """(genome name, shape key) -> {"us", "rel_l2", "e2e_rel_l2"}, and the failures in words."""
    rows, failed = {}, []
    if path is None or not path.is_file() or not path.read_text().strip():
        return rows, failed
    for gv in json.loads(path.read_text()):
        name = genome_name(gv["genome"], names, gv.get("hash", gv["genome"])[:8])
        for v in gv.get("verdicts", []):
            result = v.get("result") or {}
            if v.get("status") != "evaluated" or not result.get("shapes"):
                detail = (v.get("detail") or "").splitlines()[:1]
                failed.append(f"{name} {v.get('label')}: {v.get('status')} {' '.join(detail)}")
                continue
            for s in result["shapes"]:
                trials = s.get("trials") or []
                rows[(name, key_of(s["vars"]))] = {
                    "us": (s.get("timing") or {}).get("median_us"),
                    "rel_l2": worst(trials, "stats"),
                    "e2e_rel_l2": worst(trials, "end_to_end"),
                }
    return rows, failed


def elements(key: tuple) -> int:
    b, h, sq, skv, d = key[:5]
    return b * h * (sq + 2 * skv) * d


def gb_per_s(key: tuple, us: float | None) -> float | None:
    """One pass's minimal traffic (2-byte reads, 1-byte codes) over `us`, in GB/s."""
    return 3 * elements(key) / us / 1e3 if us and us > 0 else None


def build(names, torch, e2e, kernel, cluster=None) -> dict:
    cluster = cluster or {}
    keys = sorted({k for _, k in e2e} | {k for _, k in cluster} | {k for _, k in kernel} | set(torch),
                  key=lambda k: (k[6] != "f16", k[5], k[4], k[0] * k[1] * k[2]))
    genomes = list(dict.fromkeys(list(names.values()) + [g for g, _ in e2e] + [g for g, _ in cluster]
                                 + [g for g, _ in kernel]))
    rows, shapes = [], []
    for key in keys:
        t = torch.get(key, {"us": {}, "rel_l2": {}})
        cudnn = t["us"].get("cudnn")
        best_sdpa = min((x for x in t["us"].values() if x), default=None)
        for g in genomes:
            # A cluster row's kernel-only time is its genome's without the quantizer schedule.
            a, c, k = e2e.get((g, key)), cluster.get((g, key)), kernel.get((g.split(" ")[0], key))
            if not a and not c and not k:
                continue
            e2e_us, cluster_us, kernel_us = a and a["us"], c and c["us"], k and k["us"]
            quant_us = e2e_us - kernel_us if e2e_us and kernel_us else None
            cquant_us = cluster_us - kernel_us if cluster_us and kernel_us else None
            rows.append({
                "shape": key, "genome": g, "e2e_us": e2e_us, "cluster_us": cluster_us, "kernel_us": kernel_us,
                "quant_us": quant_us, "cluster_quant_us": cquant_us,
                "quant_share": quant_us / e2e_us if quant_us is not None else None,
                "quant_gb_per_s": gb_per_s(key, quant_us), "cluster_quant_gb_per_s": gb_per_s(key, cquant_us),
                "cudnn_us": cudnn, "cudnn_over_e2e": kt.ratio(cudnn, e2e_us),
                "cudnn_over_cluster": kt.ratio(cudnn, cluster_us),
                "cudnn_over_kernel": kt.ratio(cudnn, kernel_us),
                "best_sdpa_over_e2e": kt.ratio(best_sdpa, e2e_us),
                "best_sdpa_over_cluster": kt.ratio(best_sdpa, cluster_us),
                "e2e_rel_l2": a and a["rel_l2"], "cluster_rel_l2": c and c["rel_l2"],
                "kernel_e2e_rel_l2": k and k["e2e_rel_l2"], "cudnn_rel_l2": t["rel_l2"].get("cudnn"),
            })
        # The fastest end-to-end variant of the shape: (us, genome, quantizer, cuDNN/us, SDPA/us).
        timed = [(r[f"{q}_us"], r["genome"], q, r[f"cudnn_over_{q}"], r[f"best_sdpa_over_{q}"])
                 for r in rows if r["shape"] == key for q in ("e2e", "cluster") if r[f"{q}_us"]]
        best = min(timed) if timed else None
        shapes.append({"shape": key, "cudnn_us": cudnn, "best_sdpa_us": best_sdpa,
                       "best_e2e": best and f"{best[1]} {'split' if best[2] == 'e2e' else 'cluster'}",
                       "best_e2e_us": best and best[0], "cudnn_over_best_e2e": best and best[3],
                       "best_sdpa_over_best_e2e": best and best[4]})
    return {"rows": rows, "shapes": shapes}


def show(summary: dict, failed: list[str]) -> str:
    def f(x, spec):
        return format(x, spec) if x is not None else "-".rjust(int(spec.split(".")[0]))

    out = ["== per shape and genome: end to end (fp16/bf16 in; split: two-pass quantizer, cluster: one pass) vs "
           "kernel only (e4m3 in) vs cuDNN, median us (CUDA graph, inputs rotated past 2x L2); quant: e2e - kernel, "
           "GB/s for 3 bytes per element; errors: relative L2 against attention on the original inputs (evo: float32 "
           "GPU reference; cuDNN: float64)",
           f"{'shape':<32} {'genome':<12} {'split us':>9} {'clust us':>9} {'kernel us':>9} {'q split':>8} "
           f"{'GB/s':>6} {'q clust':>8} {'GB/s':>6} {'cuDNN us':>9} {'cuDNN/spl':>9} {'cuDNN/cl':>8} "
           f"{'cuDNN/kern':>10} {'split err':>9} {'clust err':>9} {'kern err':>8} {'cuDNN err':>9}"]
    for r in summary["rows"]:
        out.append(f"{fmt_key(r['shape']):<32} {r['genome']:<12} "
                   f"{f(r['e2e_us'], '9.2f')} {f(r['cluster_us'], '9.2f')} {f(r['kernel_us'], '9.2f')} "
                   f"{f(r['quant_us'], '8.2f')} {f(r['quant_gb_per_s'], '6.0f')} "
                   f"{f(r['cluster_quant_us'], '8.2f')} {f(r['cluster_quant_gb_per_s'], '6.0f')} "
                   f"{f(r['cudnn_us'], '9.2f')} {f(r['cudnn_over_e2e'], '9.3f')} {f(r['cudnn_over_cluster'], '8.3f')} "
                   f"{f(r['cudnn_over_kernel'], '10.3f')} {f(r['e2e_rel_l2'], '9.1e')} {f(r['cluster_rel_l2'], '9.1e')} "
                   f"{f(r['kernel_e2e_rel_l2'], '8.1e')} {f(r['cudnn_rel_l2'], '9.1e')}")
    for line in failed:
        out.append(f"FAILED {line}")
    out += ["", "== per shape: the best end-to-end variant (genome, quantizer)",
            f"{'shape':<32} {'cuDNN us':>9} {'best e2e':<20} {'us':>9} {'cuDNN/e2e':>9} {'bestSDPA/e2e':>12}"]
    for s in summary["shapes"]:
        out.append(f"{fmt_key(s['shape']):<32} {f(s['cudnn_us'], '9.2f')} "
                   f"{s['best_e2e'] or '-':<20} {f(s['best_e2e_us'], '9.2f')} "
                   f"{f(s['cudnn_over_best_e2e'], '9.3f')} {f(s['best_sdpa_over_best_e2e'], '12.3f')}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--genomes", type=Path, required=True)
    ap.add_argument("--torch", type=Path)
    ap.add_argument("--e2e", type=Path, help="evo eval --json of the end-to-end family")
    ap.add_argument("--cluster", type=Path, help="evo eval --json of the end-to-end family with the cluster quantizer")
    ap.add_argument("--kernel", type=Path, help="evo eval --json of the kernel-only family")
    ap.add_argument("--json", type=Path, help="write the rows and the summary here")
    a = ap.parse_args(argv)
    for p in (a.torch, a.e2e, a.cluster, a.kernel):
        if p is not None and not p.is_file():
            print(f"note: {p} is missing (its step did not run or was cut short)", file=sys.stderr)
    names = read_genomes(a.genomes)
    torch = read_torch(a.torch) if a.torch and a.torch.is_file() else {}
    e2e, failed_e2e = read_eval(a.e2e, names)
    cluster, failed_cluster = read_eval(a.cluster, names)
    kernel, failed_kernel = read_eval(a.kernel, names)
    summary = build(names, torch, e2e, kernel, cluster)
    print(show(summary, [f"(split) {x}" for x in failed_e2e] + [f"(cluster) {x}" for x in failed_cluster]
               + [f"(kernel) {x}" for x in failed_kernel]))
    if a.json:
        a.json.write_text(json.dumps(summary, indent=1, default=list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
