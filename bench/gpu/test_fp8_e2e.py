"""CPU tests of bench/gpu/fp8_e2e.sh's non-GPU parts: argument handling, the dry run's commands
and derived configs, and the table from JSON (f16 and bf16 of one shape kept apart, the ratios,
the quantizer's share, the errors, failures listed).
Run: python3 bench/gpu/test_fp8_e2e.py"""

import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPT = HERE / "fp8_e2e.sh"
GENOMES = HERE / "fp8_e2e_genomes.txt"
sys.path.insert(0, str(HERE))
import fp8_e2e_table as table  # noqa: E402


def script(*args, out=None):
    e = dict(os.environ, OUT=out or tempfile.mkdtemp())
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=e, cwd=ROOT)


SCHEDULES = ["QUANT_CLUSTER=8,QUANT_CTAS_PER_SM=1", "QUANT_CLUSTER=8,QUANT_CTAS_PER_SM=3",
             "QUANT_CLUSTER=16,QUANT_CTAS_PER_SM=1", "QUANT_CLUSTER=16,QUANT_CTAS_PER_SM=3"]


def named_genomes():
    rows = [l.split("#")[0].split() for l in GENOMES.read_text().splitlines()]
    return [(r[0], r[1]) for r in rows if len(r) == 2]


def genomes():
    return [g for _, g in named_genomes()]


class Arguments(unittest.TestCase):
    def test_unknown_phase_and_argument_are_usage_errors(self):
        self.assertEqual(script("--phases", "check,profile").returncode, 2)
        self.assertEqual(script("--bogus").returncode, 2)


class DryRun(unittest.TestCase):
    def setUp(self):
        self.out = Path(tempfile.mkdtemp())
        r = script("--dry-run", out=str(self.out))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.lines = [l for l in r.stdout.splitlines() if l.startswith("[dry-run]")]

    def cfg(self, name):
        return tomllib.loads((self.out / name).read_text())

    def test_twelve_steps_each_under_a_limit(self):
        limits = [int(re.match(r"\[dry-run\] timeout (\d+) ", l).group(1)) for l in self.lines]
        self.assertEqual(len(limits), 12)  # example.cpp per variant: none in a dry run
        self.assertTrue(all(0 < x <= 300 for x in limits), limits)

    def test_check_starts_with_both_quantizers_bit_for_bit_on_the_gpu(self):
        self.assertIn("nextest run --archive-file .gpu/tests.tar.zst", self.lines[0])
        for name in ("split_quantizer_is_the_one_pass_rule_bit_for_bit", "cluster_quantizer_is_the_one_pass_rule_bit_for_bit"):
            self.assertIn(f"test({name})", self.lines[0])

    def test_check_runs_both_quantizers_with_every_gate_at_the_configs_shapes(self):
        check = [l for l in self.lines if "check.txt" in l][0]
        self.assertIn("--no-timing", check)
        self.assertEqual(check.count(" -g "), 2)
        cluster = [l for l in self.lines if "check_cluster.txt" in l][0]
        self.assertEqual(cluster.count(" -g "), 4)
        for schedule in SCHEDULES:
            self.assertIn(f"{genomes()[0]},{schedule}", cluster)
        cfg, shipped = self.cfg("check.toml"), tomllib.loads((ROOT / "configs/sdpa_fp8_e2e_ws.toml").read_text())
        self.assertEqual(cfg["shapes"], shipped["shapes"])
        self.assertEqual(cfg["family"], "sdpa_fwd_fp8_e2e_ws")
        self.assertEqual(self.cfg("check_cluster.toml")["family"], "sdpa_fwd_fp8_e2e_ws_cluster")
        self.assertEqual(self.cfg("check_cluster.toml")["shapes"], cfg["shapes"])
        self.assertNotIn("search", cfg)
        # No gate turned off: only the random trial count is the config's.
        self.assertEqual(cfg["correctness"], {"random_trials": 1})
        self.assertEqual({s.get("DTYPE", "f16") for s in cfg["shapes"]}, {"f16", "bf16"})
        self.assertEqual({s.get("CAUSAL", False) for s in cfg["shapes"]}, {False, True})

    def test_timing_runs_both_quantizers_and_kernel_only_on_the_same_shapes(self):
        e2e = [l for l in self.lines if "ab_e2e.json" in l and "eval" in l][0]
        kernel = [l for l in self.lines if "ab_kernel.json" in l][0]
        cluster = [l for l in self.lines if "ab_cluster.json" in l][0]
        for line in (e2e, kernel):
            self.assertIn("--json eval", line)
            self.assertEqual(line.count(" -g "), 2)
            for g in genomes()[:2]:
                self.assertIn(g, line)
        self.assertEqual(cluster.count(" -g "), 4)
        for schedule in SCHEDULES:
            self.assertIn(f"{genomes()[0]},{schedule}", cluster)
        a, k = self.cfg("time_e2e.toml"), self.cfg("time_kernel.toml")
        c = self.cfg("time_cluster.toml")
        self.assertEqual((a["problem"], a["family"]), ("sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_ws"))
        self.assertEqual((c["problem"], c["family"]), ("sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_ws_cluster"))
        self.assertEqual((k["problem"], k["family"]), ("sdpa_fwd_fp8", "sdpa_fwd_fp8_ws"))
        self.assertEqual(a["shapes"], k["shapes"])
        self.assertEqual(a["shapes"], c["shapes"])
        self.assertEqual(a["shapes"], self.cfg("check.toml")["shapes"])
        self.assertFalse(a["correctness"]["adversarial"])
        self.assertTrue(any("torch_sdpa_baseline.py" in l and "time_e2e.toml" in l for l in self.lines))

    def test_help_prints_the_header(self):
        r = script("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("--phases check,ab,artifact", r.stdout)
        self.assertIn("cluster quantizer", r.stdout)

    def test_artifact_is_a_two_seed_run_exported_and_called_from_python_and_cpp(self):
        cfg = self.cfg("artifact.toml")
        self.assertEqual(cfg["family"], "sdpa_fwd_fp8_e2e_ws_cluster")
        self.assertEqual(cfg["search"]["seeds"], [genomes()[0] + ",QUANT_CLUSTER=16,QUANT_CTAS_PER_SM=3",
                                                  genomes()[1] + ",QUANT_CLUSTER=16,QUANT_CTAS_PER_SM=1"])
        self.assertEqual(len(cfg["shapes"]), 2)
        search = [l for l in self.lines if " search -c " in l][0]
        self.assertIn("--budget 2evals", search)
        export = [l for l in self.lines if " export e2e " in l][0]
        self.assertNotIn("--unsanitized", export)
        self.assertTrue(any("fp8_e2e_artifact.py" in l for l in self.lines))
        self.assertTrue(any("nvcc" in l and "example.cpp" in l for l in self.lines))


def verdict(genome, shapes):
    return {"genome": genome, "hash": "x" * 16, "verdicts": [
        {"label": "spec", "status": "evaluated", "detail": None,
         "result": {"shapes": [{"vars": v, "timing": {"median_us": us},
                                "trials": [{"stats": {"rel_l2": err}, "end_to_end": e2e and {"rel_l2": e2e}}]}
                               for v, us, err, e2e in shapes]}}]}


class Table(unittest.TestCase):
    def test_rows_per_dtype_with_ratios_shares_and_errors(self):
        tmp = Path(tempfile.mkdtemp())
        (first, g), (second, _) = named_genomes()[:2]
        f16 = {"BATCH": 4, "HEADS": 16, "SEQ_Q": 4096, "SEQ_KV": 4096, "HEAD_DIM": 128, "CAUSAL": False, "DTYPE": "f16"}
        bf16 = dict(f16, DTYPE="bf16")
        (tmp / "e2e.json").write_text(json.dumps([verdict(g, [(f16, 800.0, 0.03, None), (bf16, 820.0, 0.04, None)]),
                                                  {"genome": genomes()[1], "hash": "y" * 16, "verdicts": [
                                                      {"label": "f16", "status": "incorrect", "detail": "rel L2 0.9",
                                                       "result": None}]}]))
        (tmp / "kernel.json").write_text(json.dumps([verdict(g, [(f16, 700.0, 0.001, 0.031)])]))
        (tmp / "cluster.json").write_text(json.dumps([verdict(g, [(f16, 760.0, 0.03, None)]),
                                                      verdict(g + ",QUANT_CLUSTER=16,QUANT_CTAS_PER_SM=3",
                                                              [(f16, 740.0, 0.03, None)])]))
        (tmp / "torch.json").write_text(json.dumps({"format": "evo-baseline-1", "source": "t", "shapes": [
            {"shape": f16, "median_us": 850.0, "backends_us": {"cudnn": 840.0, "flash": 900.0}, "backends_rel_l2": {"cudnn": 3e-4}},
            {"shape": bf16, "median_us": 860.0, "backends_us": {"cudnn": 861.0}}]}))
        names = table.read_genomes(GENOMES)
        e2e, failed = table.read_eval(tmp / "e2e.json", names)
        kernel, _ = table.read_eval(tmp / "kernel.json", names)
        cluster, _ = table.read_eval(tmp / "cluster.json", names)
        s = table.build(names, table.read_torch(tmp / "torch.json"), e2e, kernel, cluster)
        rows = {r["shape"][6]: r for r in s["rows"] if " " not in r["genome"]}
        self.assertEqual(set(rows), {"f16", "bf16"})
        r = rows["f16"]
        self.assertEqual((r["genome"], r["e2e_us"], r["kernel_us"], r["quant_us"]), (first, 800.0, 700.0, 100.0))
        self.assertAlmostEqual(r["cudnn_over_e2e"], 840.0 / 800.0)
        self.assertAlmostEqual(r["cudnn_over_kernel"], 840.0 / 700.0)
        self.assertAlmostEqual(r["quant_gb_per_s"], 3 * 4 * 16 * 3 * 4096 * 128 / 100.0 / 1e3)
        self.assertEqual((r["e2e_rel_l2"], r["kernel_e2e_rel_l2"], r["cudnn_rel_l2"]), (0.03, 0.031, 3e-4))
        self.assertEqual((r["cluster_us"], r["cluster_quant_us"]), (760.0, 60.0))
        self.assertAlmostEqual(r["cudnn_over_cluster"], 840.0 / 760.0)
        # A quantizer schedule is its own row, named by it, with its genome's kernel-only time.
        q = [x for x in s["rows"] if x["genome"] == f"{first} q16x3"][0]
        self.assertEqual((q["cluster_us"], q["kernel_us"], q["cluster_quant_us"], q["e2e_us"]), (740.0, 700.0, 40.0, None))
        # The fastest end-to-end variant of the f16 shape is that schedule's.
        best = [x for x in s["shapes"] if x["shape"][6] == "f16"][0]
        self.assertEqual((best["best_e2e"], best["best_e2e_us"]), (f"{first} q16x3 cluster", 740.0))
        self.assertIsNone(rows["bf16"]["kernel_us"])
        self.assertAlmostEqual(rows["bf16"]["cudnn_over_e2e"], 861.0 / 820.0)
        self.assertEqual(len(failed), 1)
        self.assertIn(second, failed[0])
        text = table.show(s, failed)
        self.assertIn("(4,16,4096,128) f16", text)
        self.assertIn("(4,16,4096,128) bf16", text)
        self.assertIn(f"FAILED {second}", text)


if __name__ == "__main__":
    unittest.main()
