"""CPU tests of bench/gpu/fp8_ab.sh's non-GPU parts: argument handling, the dry run's commands
and derived configs, the genome file, and the table (issue 19's targets) from JSON.
Run: python3 bench/gpu/test_fp8_ab.py"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPT = HERE / "fp8_ab.sh"
GENOMES = HERE / "fp8_ab_genomes.txt"


def script(*args, out=None):
    e = dict(os.environ, OUT=out or tempfile.mkdtemp())
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=e, cwd=ROOT)


def genomes(code):
    rows = [l.split("#")[0].split() for l in GENOMES.read_text().splitlines()]
    return [r[3] for r in rows if len(r) == 4 and r[1] == code]


class Arguments(unittest.TestCase):
    def test_unknown_phase_and_argument_are_usage_errors(self):
        self.assertEqual(script("--phases", "check,profile").returncode, 2)
        self.assertEqual(script("--bogus").returncode, 2)


class DryRun(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp()
        r = script("--dry-run", out=self.out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.lines = [l for l in r.stdout.splitlines() if l.startswith("[dry-run]")]

    def test_every_step_runs_under_a_limit_within_seven_minutes(self):
        limits = [int(re.match(r"\[dry-run\] timeout (\d+) ", l).group(1)) for l in self.lines]
        self.assertEqual(len(limits), 6)
        self.assertLessEqual(sum(limits), 420)

    def test_check_covers_the_new_family_causal_and_not(self):
        checks = [l for l in self.lines if "--cover --no-timing" in l]
        self.assertEqual(len(checks), 2)
        for name, causal in (("check.toml", "false"), ("check_causal.toml", "true")):
            cfg = (Path(self.out) / name).read_text()
            self.assertIn('family = "sdpa_fwd_fp8_ws"', cfg)
            self.assertIn('problem = "sdpa_fwd_fp8"', cfg)
            self.assertIn(f"CAUSAL = {causal}", cfg)

    def test_timing_runs_every_genome_on_its_family(self):
        new = [l for l in self.lines if "ab_new.json" in l][0]
        self.assertIn("--json eval -c bench/gpu/fp8_ab_shapes.toml", new)
        self.assertEqual(new.count(" -g "), len(genomes("new")))
        for g in genomes("new"):
            self.assertIn(g, new)
        old = [l for l in self.lines if "ab_old.json" in l][0]
        self.assertIn(genomes("old")[0], old)
        self.assertIn('family = "sdpa_fwd_fp8_wgmma"', (Path(self.out) / "ab_old.toml").read_text())
        f16 = (Path(self.out) / "ab_f16.toml").read_text()
        self.assertIn('problem = "sdpa_fwd"', f16)
        self.assertIn('family = "sdpa_fwd_wgmma"', f16)
        self.assertTrue(any("torch_sdpa_baseline.py bench/gpu/fp8_ab_shapes.toml" in l for l in self.lines))


class Ncu(unittest.TestCase):
    def test_ncu_profiles_one_long_shape_of_two_new_genomes_and_the_old_best(self):
        out = tempfile.mkdtemp()
        r = script("--dry-run", "--phases", "ncu", out=out)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [l for l in r.stdout.splitlines() if l.startswith("[dry-run]")]
        self.assertEqual(len(lines), 3)
        self.assertTrue(all("sm__pipe_tensor_op_gmma_cycles_active" in l and "pipe_xu" in l for l in lines))
        self.assertIn(genomes("new")[0], lines[0])
        self.assertIn(genomes("old")[0], lines[2])
        cfg = (Path(out) / "ncu_new.toml").read_text()
        self.assertEqual(cfg.count("[[shapes]]"), 1)
        self.assertIn("SEQ_Q = 4096", cfg)
        self.assertIn("[compile]", cfg)
        self.assertIn('family = "sdpa_fwd_fp8_wgmma"', (Path(out) / "ncu_old.toml").read_text())


class Table(unittest.TestCase):
    def test_ratio_to_cudnn_and_issue_19_targets(self):
        d = Path(tempfile.mkdtemp())
        key = {"BATCH": 4, "HEADS": 16, "SEQ_Q": 4096, "SEQ_KV": 4096, "HEAD_DIM": 128, "CAUSAL": False,
               "DTYPE": "f16"}
        key64 = dict(key, HEAD_DIM=64)

        def verdicts(genome, us):
            shapes = [{"vars": k, "timing": {"median_us": u, "tflops": 0.0}} for k, u in us]
            return {"genome": genome, "hash": "x", "verdicts": [{"status": "evaluated", "result": {"shapes": shapes}}]}

        (d / "ab_new.json").write_text(json.dumps([verdicts(genomes("new")[0], [(key, 500.0), (key64, 400.0)])]))
        (d / "ab_old.json").write_text(json.dumps([verdicts(genomes("old")[0], [(key, 1435.0)])]))
        (d / "torch_ab.json").write_text(json.dumps({"shapes": [
            {"shape": key, "median_us": 880.0, "backends_us": {"default": 880.0, "cudnn": 840.0}},
            {"shape": key64, "median_us": 450.0, "backends_us": {"default": 450.0, "cudnn": 450.0}}]}))
        r = script("--table", out=str(d))
        self.assertEqual(r.returncode, 0, r.stderr)
        line = [l for l in r.stdout.splitlines() if l.startswith("(4,16,4096,128)") and "ws-n128-L " in l
                and "1.60" in l][0]
        # 840 / 500 = 1.68 >= 1.6; new over old 1435 / 500 = 2.87; TFLOP/s 4 B H D S^2 / us.
        self.assertIn("1.680", line)
        self.assertIn("2.870", line)
        self.assertIn("1.60 ok", line)
        self.assertIn("1099.5", line)
        miss = [l for l in r.stdout.splitlines() if l.startswith("(4,16,4096,64)") and "1.20" in l][0]
        self.assertIn("1.20 no", miss)  # 450 / 400 = 1.125 < 1.2


if __name__ == "__main__":
    unittest.main()
