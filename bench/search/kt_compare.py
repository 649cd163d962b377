#!/usr/bin/env python3
"""evo's search strategies beside Kernel Tuner's on one recorded evo landscape.

For each strategy: evaluations until the best found is within 2% of the landscape's
optimum, over many seeds; printed as one table (median, p25, p75, reached), once with
the knobs' value lists as the family lists them and once reversed.

  python3 bench/search/kt_compare.py -c configs/sdpa_landscape.toml \\
      --landscape tests/data/landscape_sdpa64_h200.json.gz --seeds 100

What it does:
* installs a pinned kernel_tuner into a virtual environment it creates
  (bench/search/.venv by default; pip needs PyPI once) and re-runs itself there;
* asks `evo space` for the knobs (value lists in family order) and every valid genome;
* builds Kernel Tuner's simulation cache from the landscape: objective = evo's fitness
  as a time (the geometric mean over the config's timed shapes of the median µs, so
  1 / fitness), genomes that failed or are not recorded excluded through a restriction
  (Kernel Tuner never proposes them), every valid recorded genome in the cache;
* runs each Kernel Tuner strategy in simulation mode with Python's `random` and numpy's
  global RNG seeded per run (scipy's optimizers draw from numpy's, so runs repeat), and
  counts unique evaluations until the target, up to --budget;
* runs `evo search-quality --json` (surrogate, evolution, random) on the same landscape
  with the same seeds count, reversed too (--reverse).
"""

import argparse
import warnings
import gzip
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

KERNEL_TUNER = "kernel_tuner==1.5.0"
KT_STRATEGIES = ["bayes_opt", "genetic_algorithm", "simulated_annealing", "diff_evo", "random_sample"]
HERE = Path(__file__).resolve().parent


def ensure_venv(venv: Path) -> None:
    """Re-executes this script inside `venv` with kernel_tuner installed."""
    python = venv / "bin" / "python"
    if Path(sys.prefix).resolve() == venv.resolve():
        return
    if not python.exists():
        print(f"creating {venv} with {KERNEL_TUNER}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    check = subprocess.run(
        [str(python), "-c", "import kernel_tuner, sys; sys.exit(kernel_tuner.__version__ != '%s')" % KERNEL_TUNER.split("==")[1]],
        capture_output=True,
    )
    if check.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", KERNEL_TUNER], check=True)
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


def quantile(sorted_values, p):
    """Linear interpolation between order statistics (evo's `quantile`)."""
    if not sorted_values:
        return None
    x = (len(sorted_values) - 1) * p
    lo, hi = sorted_values[math.floor(x)], sorted_values[math.ceil(x)]
    return lo + (hi - lo) * (x - math.floor(x))


def evo_json(evo, *args):
    out = subprocess.run([evo, "--json", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def load_space(evo, config):
    knobs = [(k["name"], k["values"]) for k in evo_json(evo, "space", "-c", config)["knobs"]]
    listed = subprocess.run([evo, "space", "-c", config, "--list"], check=True, capture_output=True, text=True)
    valid = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
    return knobs, valid


def genome_times(landscape, config, valid):
    """evo's fitness as a time (µs) per valid genome that every timed shape measured."""
    shapes = len(tomllib.loads(Path(config).read_text()).get("shapes", []))
    raw = Path(landscape).read_bytes()
    if landscape.endswith(".gz"):
        raw = gzip.decompress(raw)
    points = json.loads(raw)["points"]
    times = {}
    for genome in valid:
        p = points.get(genome)
        if not p or p["status"] != "evaluated":
            continue
        medians = [s["median_us"] for s in p["shapes"] if s.get("median_us") is not None]
        if len(medians) == shapes:
            times[genome] = math.exp(sum(math.log(t) for t in medians) / len(medians))
    return times


def text(value):
    """A knob value as evo's canonical genome text writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def seed_scipy_samplers(seed):
    """bayes_opt draws its initial sample with scipy's LatinHypercube, which takes fresh
    OS entropy unless given a generator: hand it one seeded per run."""
    import numpy as np
    from scipy.stats import qmc
    from kernel_tuner.strategies import bayes_opt

    def seeded(*args, **kwargs):
        kwargs.setdefault("rng", np.random.default_rng(seed))
        return qmc.LatinHypercube(*args, **kwargs)

    bayes_opt.LatinHypercube = seeded


def kt_runs(knobs, times, strategy, seeds, budget, reverse):
    """Unique evaluations to the target for each seed (None: not reached)."""
    import numpy as np
    from kernel_tuner import tune_kernel, util
    from kernel_tuner.strategies import common

    tune_params = {name: list(reversed(values)) if reverse else list(values) for name, values in knobs}
    names = list(tune_params)

    def genome(config):
        return ",".join(f"{n}={text(config[n])}" for n in sorted(names))

    target = min(times.values()) / 0.98
    cache = {
        "device_name": "evo-landscape",
        "kernel_name": "evo",
        "problem_size": [1],
        "tune_params_keys": names,
        "tune_params": tune_params,
        "objective": "time",
        "cache": {},
    }
    for g, t in times.items():
        values = dict(kv.split("=", 1) for kv in g.split(","))
        config = {}
        for n in names:
            config[n] = next(v for v in tune_params[n] if text(v) == values[n])
        key = ",".join(str(config[n]) for n in names)
        cache["cache"][key] = {**config, "time": t, "times": [t], "compile_time": 0, "verification_time": 0,
                               "benchmark_time": 0, "strategy_time": 0, "framework_time": 0, "timestamp": "0"}
    allowed = set(times)

    # Stop a run once it has evaluated a genome within the target, the way Kernel Tuner
    # stops at max_fevals: the counts are the same as running on to the budget, and
    # bayes_opt (a Gaussian process over every evaluated point) is spared 500 steps.
    original = getattr(common.CostFunc, "_evo_original_run_configs", common.CostFunc._run_configs)
    common.CostFunc._evo_original_run_configs = original

    def run_configs(self, xs, check_restrictions=True):
        results = original(self, xs, check_restrictions=check_restrictions)
        if any(isinstance(r.get("time"), (int, float)) and r["time"] <= target for r in self.results):
            raise util.StopCriterionReached("within 2% of the optimum")
        return results

    common.CostFunc._run_configs = run_configs

    def restriction(*args):
        # Kernel Tuner calls a function restriction with the config as a dict or with
        # the values in tune_params order, depending on its version.
        config = args[0] if len(args) == 1 and isinstance(args[0], dict) else dict(zip(names, args))
        return genome(config) in allowed
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cache.json"
        path.write_text(json.dumps(cache))
        needed = []
        for seed in range(seeds):
            random.seed(seed)
            np.random.seed(seed)
            seed_scipy_samplers(seed)
            results, _ = tune_kernel(
                "evo", "", (1,), [], tune_params,
                restrictions=restriction,
                strategy=strategy, strategy_options={"max_fevals": budget},
                cache=str(path), simulation_mode=True, quiet=True, verbose=False,
            )
            seen = set()
            reached = None
            for r in results:
                t = r.get("time")
                key = genome(r)
                if not isinstance(t, (int, float)) or key not in allowed:
                    continue
                seen.add(key)
                if t <= target:
                    reached = len(seen)
                    break
            needed.append(reached)
            print(f"  {strategy} seed {seed}: {reached}", file=sys.stderr, flush=True)
    return needed


def row(name, needed, runs):
    done = sorted(n for n in needed if n is not None)
    q = lambda p: "-" if not done else f"{quantile(done, p):.1f}"
    return name, q(0.5), q(0.25), q(0.75), f"{len(done)}/{runs}"


def main():
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--landscape", required=True)
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--budget", type=int, default=600, help="Kernel Tuner's max_fevals")
    ap.add_argument("--population", type=int, help="evo's population (default: the config's)")
    ap.add_argument("--evo", default=os.environ.get("EVO", "target/release/evo"))
    ap.add_argument("--venv", type=Path, default=HERE / ".venv")
    ap.add_argument("--strategies", default=",".join(KT_STRATEGIES))
    ap.add_argument("--json", type=Path, help="also write every count here")
    ap.add_argument("--no-reverse", action="store_true", help="only the value lists as listed")
    args = ap.parse_args()
    ensure_venv(args.venv)

    knobs, valid = load_space(args.evo, args.config)
    times = genome_times(args.landscape, args.config, valid)
    print(f"{len(valid)} valid genomes, {len(times)} timed; target: within 2% of the optimum "
          f"({sum(t <= min(times.values()) / 0.98 for t in times.values())} genomes)", file=sys.stderr)
    rows, raw = [], {}
    for reverse in (False,) if args.no_reverse else (False, True):
        extra = ["--population", str(args.population)] if args.population else []
        report = evo_json(args.evo, "search-quality", "-c", args.config, "--landscape", args.landscape,
                          "--seeds", str(args.seeds), *extra, *(["--reverse"] if reverse else []))
        for s in report["strategies"]:
            name = f"evo {s['strategy']} (population {report['population']})"
            raw[(name, reverse)] = s["evaluations_needed"] + [None] * (s["runs"] - s["reached"])
        for strategy in args.strategies.split(","):
            start = time.time()
            raw[(f"Kernel Tuner {strategy}", reverse)] = kt_runs(knobs, times, strategy, args.seeds, args.budget, reverse)
            print(f"{strategy} {'reversed' if reverse else ''}: {time.time() - start:.0f} s", file=sys.stderr)
    names = list(dict.fromkeys(name for name, _ in raw))
    print(f"evaluations to within 2% of the optimum, {args.seeds} seeds; Kernel Tuner budget {args.budget} "
          f"unique evaluations ({KERNEL_TUNER})")
    print("| strategy | median | p25 | p75 | reached | median, value lists reversed | reached, reversed |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        _, med, p25, p75, reached = row(name, raw[(name, False)], args.seeds)
        _, rmed, _, _, rreached = row(name, raw.get((name, True), []), args.seeds) if not args.no_reverse else (0, "-", 0, 0, "-")
        print(f"| {name} | {med} | {p25} | {p75} | {reached} | {rmed} | {rreached} |")
    if args.json:
        args.json.write_text(json.dumps({f"{n}{' reversed' if r else ''}": v for (n, r), v in raw.items()}, indent=1))


if __name__ == "__main__":
    main()
