"""CPU tests of bench/gpu/kernel_ab.sh's non-GPU parts: argument handling, the dry run's
commands, and the table from saved JSON (testdata/: evo eval --json and torch baseline files).
Run: python3 bench/gpu/test_kernel_ab.py"""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import kernel_ab_table as tab  # noqa: E402

SCRIPT = HERE / "kernel_ab.sh"
DATA = HERE / "testdata"


def script(*args, env=None):
    e = dict(os.environ, OUT=tempfile.mkdtemp(), **(env or {}))
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=e, cwd=ROOT)


class Arguments(unittest.TestCase):
    def test_unknown_phase_and_argument_are_usage_errors(self):
        r = script("--phases", "check,bogus", "--dry-run")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown phase bogus", r.stderr)
        r = script("--frobnicate")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown argument --frobnicate", r.stderr)

    def test_dry_run_lists_every_step_and_old_genomes_only_with_baseline_templates(self):
        r = script("--dry-run", env={"BASELINE_TEMPLATES": "/nonexistent"})
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [l for l in r.stdout.splitlines() if l.startswith("[dry-run]")]
        self.assertEqual(sum("--cover --no-timing" in l for l in lines), 6)
        self.assertEqual(sum("torch_sdpa_baseline.py" in l for l in lines), 1)
        evals = [l for l in lines if " --json eval " in l]
        self.assertEqual(len(evals), 4, "one new-code eval per shape set")
        self.assertTrue(all("--templates templates" in l for l in evals))
        self.assertIn("no previous templates at /nonexistent", r.stdout)
        with tempfile.TemporaryDirectory() as base:
            r = script("--dry-run", "--phases", "ab", env={"BASELINE_TEMPLATES": base})
            evals = [l for l in r.stdout.splitlines() if " --json eval " in l]
            old = [l for l in evals if f"--templates {base}" in l]
            # Old genomes on short, d64 and d128 (the 16k set times new ones only).
            self.assertEqual(len(old), 3, "old genomes run on every set they list")
            self.assertFalse(any("kernel_ab_16k" in l for l in old))
            # The old genomes have no RESCALE knob; every new one has it, and SCHEDULER, persistent
            # on every set.
            self.assertTrue(all("RESCALE" not in l for l in old))
            new = [l for l in evals if l not in old]
            self.assertTrue(all("RESCALE=" in l and "SCHEDULER=grid" in l for l in new))
            self.assertTrue(all("SCHEDULER=persistent" in l for l in new))
        r = script("--dry-run", "--phases", "ncu", env={"BASELINE_TEMPLATES": "/nonexistent"})
        self.assertEqual(sum(l.startswith("[dry-run]") and " ncu " in l for l in r.stdout.splitlines()), 2)

    def test_genome_file_names_each_genome_once_with_known_sets(self):
        names = tab.read_genomes(HERE / "kernel_ab_genomes.txt")
        self.assertGreaterEqual(len(names), 10)
        for line in (HERE / "kernel_ab_genomes.txt").read_text().splitlines():
            parts = line.split("#")[0].split()
            if parts:
                self.assertIn(parts[1], ("old", "new"))
                for s in parts[2].split(","):
                    self.assertTrue((HERE / f"kernel_ab_{s}.toml").is_file(), s)


class Table(unittest.TestCase):
    def test_a_genome_named_without_a_knob_at_its_default_is_the_completed_genome(self):
        # evo eval reports EXP2_POLY=off, which kernel_ab_genomes.txt does not write out.
        self.assertEqual(tab.canonical("STAGES=2,EXP2_POLY=off,BLOCK_N=128"), tab.canonical("BLOCK_N=128,STAGES=2"))
        self.assertNotEqual(tab.canonical("BLOCK_N=128,EXP2_POLY=quarter"), tab.canonical("BLOCK_N=128"))

    def run_table(self, *evals, torch=DATA / "torch.json"):
        args = ["--genomes", str(HERE / "kernel_ab_genomes.txt"), "--torch", str(torch)]
        for e in evals:
            args += ["--eval", str(e)]
        with tempfile.TemporaryDirectory() as d:
            out_json = Path(d) / "s.json"
            buf, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
                self.assertEqual(tab.main(args + ["--json", str(out_json)]), 0)
            return buf.getvalue(), err.getvalue(), json.loads(out_json.read_text())

    def test_best_old_and_new_per_shape_with_ratios(self):
        text, _, summary = self.run_table(DATA / "eval_old_d128.json", DATA / "eval_new_d128.json")
        by_shape = {tuple(s["shape"]): s for s in summary["shapes"]}
        nc = by_shape[(4, 16, 4096, 4096, 128, False)]
        self.assertEqual((nc["best_old"], nc["best_new"]), ("old-01815f20", "new-n176-L"))
        self.assertAlmostEqual(nc["new_over_old"], 1000.0 / 780.0)
        self.assertAlmostEqual(nc["cudnn_over_new"], 844.0 / 780.0)
        self.assertAlmostEqual(nc["best_new_tflops"], 4 * 4 * 16 * 128 * 4096 * 4096 / 780.0 / 1e6)
        c = by_shape[(4, 16, 4096, 4096, 128, True)]
        # n176's causal specialization failed: the best new causal genome is 01815f20-L.
        self.assertEqual(c["best_new"], "new-01815f20-L")
        self.assertIn("FAILED new-n176-L (new)", text)
        self.assertIn("incorrect rel L2 0.5", text)
        self.assertRegex(text, r"\(4,16,4096,128\) +844\.00 old-01815f20 +1000\.00 new-n176-L +780\.00 +1\.282")
        self.assertIn("1.05 ok", text)  # non-causal: 844 / 780 >= 1.05
        self.assertIn("1.05 no", text)  # causal: 486.5 / 500 < 1.05
        # A shape only PyTorch ran shows dashes, not an error.
        self.assertRegex(text, r"\(1,8,512,64\) +10\.00 -")

    def test_eval_old_runs_the_same_genomes_as_old(self):
        # The new eval file run again on the previous templates: the same genomes, now "old".
        with tempfile.TemporaryDirectory() as d:
            slower = json.loads((DATA / "eval_new_d128.json").read_text())
            for gv in slower:
                for v in gv.get("verdicts", []):
                    for s in (v.get("result") or {}).get("shapes") or []:
                        s["timing"]["median_us"] *= 2
            old = Path(d) / "old.json"
            old.write_text(json.dumps(slower))
            args = ["--genomes", str(HERE / "kernel_ab_genomes.txt"), "--torch", str(DATA / "torch.json"),
                    "--eval", str(DATA / "eval_new_d128.json"), "--eval-old", str(old), "--json", str(Path(d) / "s.json")]
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(tab.main(args), 0)
            summary = json.loads((Path(d) / "s.json").read_text())
        nc = [s for s in summary["shapes"] if s["shape"] == [4, 16, 4096, 4096, 128, False]][0]
        self.assertEqual((nc["best_old"], nc["best_new"]), ("old-n176-L", "new-n176-L"))
        self.assertAlmostEqual(nc["new_over_old"], 2.0)

    def test_missing_and_empty_eval_files_are_noted_not_fatal(self):
        with tempfile.TemporaryDirectory() as d:
            empty = Path(d) / "empty.json"
            empty.write_text("")
            text, err, summary = self.run_table(DATA / "eval_old_d128.json", empty, Path(d) / "absent.json")
        self.assertIn("absent.json is missing", err)
        nc = [s for s in summary["shapes"] if s["shape"] == [4, 16, 4096, 4096, 128, False]][0]
        self.assertIsNone(nc["best_new"])

    def test_causal_flops_count_visible_pairs(self):
        self.assertEqual(tab.flops((1, 1, 4, 4, 1, True)), 4.0 * (1 + 2 + 3 + 4))
        self.assertEqual(tab.flops((1, 1, 6, 4, 1, True)), 4.0 * (1 + 2 + 3 + 4 + 4 + 4))
        self.assertEqual(tab.flops((2, 3, 5, 7, 8, False)), 4.0 * 2 * 3 * 8 * 5 * 7)


if __name__ == "__main__":
    unittest.main()
