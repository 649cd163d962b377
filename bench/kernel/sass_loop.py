#!/usr/bin/env python3
"""Static instruction count of an attention kernel's main loop, per warp per KV tile.

The main loop is the innermost backward branch whose body holds the most warpgroup/warp MMA
instructions (HGMMA, QGMMA, HMMA): one iteration is one KV tile for every consumer warp. Its
body is split into basic blocks; every path from the loop head to the backward branch is
counted (branches that leave the body, e.g. to an out-of-line mbarrier retry, count as not
taken), and each path's instructions are grouped by opcode class. Two paths typically mean a
masked and an unmasked tile.

Usage (from the repo root, no GPU needed):
  bench/kernel/sass_loop.py -c configs/sdpa_wgmma.toml -g GENOME [--spec HEAD_DIM=128,CAUSAL=false]
  bench/kernel/sass_loop.py -c CONFIG --genomes bench/kernel/genomes.txt [--spec ...] [--templates DIR]
  bench/kernel/sass_loop.py FILE.cubin [FILE.cubin ...]       # already compiled
  bench/kernel/sass_loop.py --sass FILE.sass                    # nvdisasm/cuobjdump text
Options: --evo PATH (default target/release/evo, else target/debug/evo), --kernel NAME
(default: the kernel with the most MMA instructions), --json, --ops (per-opcode counts).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

# Opcode class of each base opcode (the text before the first '.'), in report order. Uniform
# datapath instructions (U*, R2UR, S2UR) are their own class: they take issue slots too.
CLASSES = [
    ("mma", {"HGMMA", "QGMMA", "HMMA", "QMMA", "IGMMA", "BGMMA"}),
    ("mma_sync", {"WARPGROUP"}),
    ("mufu", {"MUFU"}),
    ("fp32", {"FFMA", "FMUL", "FADD", "FFMA2", "FMUL2", "FADD2"}),
    ("fmnmx", {"FMNMX"}),
    ("select", {"SEL", "FSEL", "ISETP", "FSETP", "PLOP3", "P2R", "R2P", "VOTE", "VOTEU"}),
    ("int", {"IMAD", "IADD3", "LEA", "SHF", "LOP3", "IMNMX", "VIADD", "VIADDMNMX", "VIMNMX",
             "IABS", "SHL", "SHR", "POPC", "FLO", "BREV", "PRMT", "BMSK", "SGXT", "IADD", "IMUL"}),
    ("convert", {"F2FP", "F2F", "I2F", "F2I", "I2FP", "F2IP", "FRND"}),
    ("move", {"MOV", "S2R", "CS2R", "LDC"}),
    ("shuffle", {"SHFL"}),
    ("memory", {"LDS", "STS", "LDG", "STG", "LDSM", "STSM", "LD", "ST", "LDL", "STL", "ATOM",
                "ATOMS", "RED", "UBLKCP", "UTMALDG", "UTMASTG", "UTMAPF", "LDGSTS"}),
    ("sync", {"BAR", "SYNCS", "WARPSYNC", "BSSY", "BSYNC", "DEPBAR", "MEMBAR", "FENCE", "ERRBAR",
              "CCTL", "LDGDEPBAR", "ARRIVES", "USETMAXREG", "NANOSLEEP", "YIELD"}),
    ("control", {"BRA", "EXIT", "RET", "CALL", "JMP", "BRX", "NOP", "BPT"}),
]
UNIFORM_EXTRA = {"R2UR", "S2UR", "ULDC", "VOTEU"}
CLASS_NAMES = [c for c, _ in CLASSES] + ["uniform", "other"]
MMA_OPS = CLASSES[0][1]

INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LABEL = re.compile(r"^\s*(\.L_x_\d+):")
FUNC = re.compile(r"^\s*\.text\.(\S+):")
TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def classify(opcode: str) -> str:
    """The class of a full opcode such as `ISETP.GE.AND` or `UIADD3`."""
    base = opcode.split(".")[0]
    if base in ("IMAD", "MOV") and (".MOV" in opcode or base == "MOV"):
        return "move"
    if base == "VOTEU":
        return "uniform"
    for name, ops in CLASSES:
        if base in ops:
            return name
    if base in UNIFORM_EXTRA or (base.startswith("U") and base[1:] and base not in ("UBLKCP",)):
        return "uniform"
    return "other"


class Insn:
    __slots__ = ("addr", "pred", "opcode", "text", "target")

    def __init__(self, addr: int, body: str):
        self.addr = addr
        self.text = body
        parts = body.split()
        self.pred = None
        if parts and parts[0].startswith("@"):
            self.pred = parts[0]
            parts = parts[1:]
        self.opcode = parts[0] if parts else ""
        m = TARGET.search(body)
        self.target = m.group(1) if m else None

    @property
    def is_branch(self) -> bool:
        return self.opcode.split(".")[0] in ("BRA", "JMP", "BRX")

    @property
    def is_exit(self) -> bool:
        return self.opcode.split(".")[0] in ("EXIT", "RET") and self.pred is None


def parse(sass: str) -> dict[str, tuple[list[Insn], dict[str, int]]]:
    """Kernel name -> (instructions in address order, label -> index of the next instruction)."""
    kernels: dict[str, tuple[list[Insn], dict[str, int]]] = {}
    insns: list[Insn] = []
    labels: dict[str, int] = {}
    for line in sass.splitlines():
        m = FUNC.match(line)
        if m:
            insns, labels = [], {}
            kernels[m.group(1)] = (insns, labels)
            continue
        m = LABEL.match(line)
        if m:
            labels[m.group(1)] = len(insns)
            continue
        m = INSN.match(line)
        if m and kernels:
            insns.append(Insn(int(m.group(1), 16), m.group(2)))
    return kernels


def mma_count(insns: list[Insn], lo: int, hi: int) -> int:
    return sum(1 for i in insns[lo : hi + 1] if i.opcode.split(".")[0] in MMA_OPS)


def main_loop(insns: list[Insn], labels: dict[str, int]) -> tuple[int, int]:
    """(head, tail) instruction indices of the loop with the most MMA instructions; among
    equals, the innermost (shortest). A loop's latch is a predicated backward branch: an
    unpredicated one is the return from an out-of-line block (an mbarrier retry) to the code
    before it."""
    best = None
    for idx, ins in enumerate(insns):
        latch = ins.is_branch and ins.pred is not None and ".ANY" not in ins.opcode
        if latch and ins.target in labels and labels[ins.target] <= idx:
            head = labels[ins.target]
            key = (mma_count(insns, head, idx), -(idx - head))
            if best is None or key > best[0]:
                best = (key, head, idx)
    if best is None or best[0][0] == 0:
        raise SystemExit("no loop with MMA instructions found")
    return best[1], best[2]


def paths(insns: list[Insn], labels: dict[str, int], head: int, tail: int, enumerate_up_to: int = 8):
    """Paths head -> tail through the loop body (forward edges only; a branch that leaves
    [head, tail] counts as not taken): (number of paths, the paths as instruction-index lists:
    all of them when there are at most `enumerate_up_to`, else the shortest and the longest)."""
    starts = {head}
    for idx in range(head, tail + 1):
        ins = insns[idx]
        if ins.is_branch and ins.target in labels:
            t = labels[ins.target]
            if head <= t <= tail:
                starts.add(t)
            if idx + 1 <= tail:
                starts.add(idx + 1)
    for t in labels.values():
        if head <= t <= tail:
            starts.add(t)
    order = sorted(starts)
    end_of = {s: (order[b + 1] - 1 if b + 1 < len(order) else tail) for b, s in enumerate(order)}

    def succ(s):
        hi = end_of[s]
        last = insns[hi]
        if hi == tail:
            return ["END"]
        out = []
        if last.is_branch and last.target in labels:
            t = labels[last.target]
            inside = head < t <= tail and t > hi
            if inside:
                out.append(t)
            if last.pred is None and ".U" not in last.opcode:
                return out if inside else [hi + 1]
        if last.is_exit:
            return out
        out.append(hi + 1)
        return out

    succs = {s: [n for n in succ(s) if n == "END" or n in end_of] for s in order}
    # Counts and extreme lengths from each block to the end (blocks in address order are a
    # topological order of the forward edges).
    count, best = {}, {}
    for s in reversed(order):
        size = end_of[s] - s + 1
        opts = [(0, 1, "END") if n == "END" else (best[n][0], count[n], n) for n in succs[s]]
        if not opts:
            count[s], best[s] = 0, (None, None, None, None)
            continue
        reach = [o for o in opts if o[0] is not None or o[2] == "END"]
        count[s] = sum(o[1] for o in opts)
        if not reach:
            best[s] = (None, None, None, None)
            continue
        lo = min(reach, key=lambda o: o[0] if o[2] == "END" else best[o[2]][0])
        hi = max(reach, key=lambda o: o[0] if o[2] == "END" else best[o[2]][1])
        lo_len = size + (0 if lo[2] == "END" else best[lo[2]][0])
        hi_len = size + (0 if hi[2] == "END" else best[hi[2]][1])
        best[s] = (lo_len, hi_len, lo[2], hi[2])

    def walk(which: int) -> list[int]:
        out, s = [], head
        while s != "END":
            out += list(range(s, end_of[s] + 1))
            s = best[s][2 + which]
        return out

    total = count.get(head, 0)
    if total == 0:
        return 0, []
    if total > enumerate_up_to:
        return total, [walk(0), walk(1)]
    result, stack = [], [(head, [])]
    while stack:
        s, acc = stack.pop()
        acc = acc + list(range(s, end_of[s] + 1))
        for n in succs[s]:
            if n == "END":
                result.append(acc)
            else:
                stack.append((n, acc))
    return total, result


def count(insns: list[Insn], path: list[int]) -> Counter:
    c = Counter()
    for i in path:
        c[classify(insns[i].opcode)] += 1
    return c


def disassemble(cubin: Path, tool: str | None) -> str:
    tool = tool or find_tool("nvdisasm") or find_tool("cuobjdump")
    if not tool:
        raise SystemExit("neither nvdisasm nor cuobjdump found (scripts/install-cuda.sh installs them into .cuda/)")
    args = [tool, "-c", str(cubin)] if tool.endswith("nvdisasm") else [tool, "-sass", str(cubin)]
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def find_tool(name: str) -> str | None:
    roots = [os.environ.get("EVO_CUDA_HOME"), os.environ.get("CUDA_HOME"), ".cuda/nvidia/cu13", "/usr/local/cuda"]
    for r in roots:
        if r and (Path(r) / "bin" / name).is_file():
            return str(Path(r) / "bin" / name)
    return shutil.which(name)


def find_evo() -> str:
    for p in ("target/release/evo", "target/debug/evo", ".gpu/evo"):
        if Path(p).is_file():
            return p
    raise SystemExit("no evo binary: build it (cargo build -p evo-cli) or pass --evo PATH")


def compile_genome(evo: str, config: str, genome: str, spec: str, out: Path, templates: str | None) -> list[Path]:
    """Cubins of `genome` whose specialization holds every K=V of `spec`."""
    cmd = [evo, "compile", "-c", config, "-g", genome, "--out", str(out), "--arch", "sm_90a"]
    if templates:
        cmd += ["--templates", templates]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"evo compile failed for {genome}:\n{r.stderr.strip()}")
    want = [kv.replace("=", "-") for kv in spec.split(",") if kv]
    return sorted(p for p in out.glob("*.cubin") if all(w in p.name for w in want))


def short_label(stem: str, name: str = "") -> str:
    """`<hash>.<spec>` as evo compile --out names a CUBIN -> `name-or-hash8 causal/f16/d128`."""
    genome, _, spec = stem.partition(".")
    kv = dict(p.split("-", 1) for p in spec.split("_") if "-" in p) if spec else {}
    short = "/".join(x for x in ("causal" if kv.get("CAUSAL") == "true" else "", kv.get("DTYPE", ""),
                                 f"d{kv['DIM']}" if "DIM" in kv else "") if x)
    return f"{name or genome[:8]} {short}".strip()


def analyze(sass: str, kernel: str | None) -> dict:
    kernels = parse(sass)
    if not kernels:
        raise SystemExit("no kernel in the SASS")
    name = kernel or max(kernels, key=lambda k: mma_count(kernels[k][0], 0, len(kernels[k][0]) - 1))
    if name not in kernels:
        raise SystemExit(f"no kernel {name}; found {sorted(kernels)}")
    insns, labels = kernels[name]
    head, tail = main_loop(insns, labels)
    n_paths, ps = paths(insns, labels, head, tail)
    rows = []
    for p in sorted(ps, key=len):
        c = count(insns, p)
        ops = Counter(insns[i].opcode for i in p)
        rows.append({"total": len(p), "classes": {k: c.get(k, 0) for k in CLASS_NAMES},
                     "ops": dict(ops.most_common())})
    return {"kernel": name, "loop": [insns[head].addr, insns[tail].addr], "body": tail - head + 1,
            "n_paths": n_paths, "paths": rows}


def table(results: list[tuple[str, dict]], with_ops: bool, all_paths: bool) -> str:
    """One row per (input, path): total and class counts. Paths are sorted by length; past
    four only the shortest and the longest are shown (unless all_paths); `n/N`: path n of
    N, `min`/`max` when only the extremes are known."""
    cols = ["total"] + CLASS_NAMES
    short = {"mma_sync": "mmasync", "shuffle": "shfl", "control": "ctrl", "uniform": "unif"}
    head = f"{'variant':<34} {'path':>7} " + " ".join(f"{short.get(c, c):>7}" for c in cols)
    lines = [head, "-" * len(head)]
    for label, r in results:
        ps = list(enumerate(r["paths"]))
        extremes = r["n_paths"] > len(ps)
        if len(ps) > 4 and not all_paths:
            ps = [ps[0], ps[-1]]
        for n, p in ps:
            vals = [p["total"]] + [p["classes"][c] for c in CLASS_NAMES]
            tag = ("min" if n == 0 else "max") + f"/{r['n_paths']}" if extremes else f"{n + 1}/{r['n_paths']}"
            lines.append(f"{label[-34:]:<34} {tag:>7} " + " ".join(f"{v:>7}" for v in vals))
            if with_ops:
                lines.append("      " + ", ".join(f"{k} {v}" for k, v in p["ops"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cubins", nargs="*", help="CUBIN files")
    ap.add_argument("-c", "--config")
    ap.add_argument("-g", "--genome")
    ap.add_argument("--genomes", help="file of `label genome` lines (# comments) compiled with -c")
    ap.add_argument("--spec", default="", help="K=V,... the specializations must hold (e.g. HEAD_DIM=128,CAUSAL=false)")
    ap.add_argument("--sass", action="append", default=[], help="disassembly text file")
    ap.add_argument("--evo")
    ap.add_argument("--templates", help="templates folder for evo compile (e.g. an earlier commit's)")
    ap.add_argument("--tool", help="nvdisasm or cuobjdump")
    ap.add_argument("--kernel")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--ops", action="store_true", help="per-opcode counts under each row")
    ap.add_argument("--all-paths", action="store_true", help="every enumerated path, not only the shortest and longest past four")
    a = ap.parse_args(argv)
    if bool(a.config) != bool(a.genome or a.genomes):
        ap.error("-c goes with -g or --genomes")
    if not (a.cubins or a.sass or a.config):
        ap.error("give CUBIN files, --sass FILE or -c CONFIG -g GENOME")
    inputs: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in a.cubins:
            inputs.append((short_label(Path(c).stem), disassemble(Path(c), a.tool)))
        named = [("", a.genome)] if a.genome else []
        if a.genomes:
            for line in Path(a.genomes).read_text().splitlines():
                line = line.split("#")[0].split()
                if line:
                    named.append((line[0], line[1]))
        for n, (label, genome) in enumerate(named):
            out = Path(tmp) / str(n)
            out.mkdir()
            found = compile_genome(a.evo or find_evo(), a.config, genome, a.spec, out, a.templates)
            if not found:
                raise SystemExit(f"no specialization of {genome} matches {a.spec!r}")
            for c in found:
                inputs.append((short_label(c.stem, label), disassemble(c, a.tool)))
    for s in a.sass:
        inputs.append((Path(s).stem, Path(s).read_text()))
    results = [(label, analyze(text, a.kernel)) for label, text in inputs]
    if a.json:
        print(json.dumps([{"variant": l, **r} for l, r in results], indent=1))
    else:
        print(table(results, a.ops, a.all_paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
