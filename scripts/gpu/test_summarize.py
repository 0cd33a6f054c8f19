#!/usr/bin/env python3
"""summarize.py against the outputs of a real GPU run (testdata/gpu/run-1) and against
copies of it changed the way a later run would change them.

usage: python3 -m unittest scripts/gpu/test_summarize.py   (from the repository root)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
RUN1 = os.path.join(HERE, "..", "..", "testdata", "gpu", "run-1")


def table(out_dir):
    done = subprocess.run([sys.executable, os.path.join(HERE, "summarize.py"), out_dir], capture_output=True, text=True, check=True)
    rows = {}
    for line in done.stdout.splitlines()[:-1]:
        check, verdict, value = re.match(r"^(.*?)\s{2,}(PASS|FAIL|-)\s{2,}(.*)$", line).groups()
        rows[check] = (verdict, value)
    return rows, done.stdout.splitlines()[-1]


class Run1(unittest.TestCase):
    def test_transformers_figure_is_reported_even_without_the_model_steps(self):
        rows, _ = table(RUN1)
        self.assertEqual(rows["transformers decode tok/s (best cache setting)"],
                         ("-", "134.8  (dynamic 39.7, static 33.9, static+compile 134.8)"))
        # Run 1's large-model-steps section failed; the engine's decode loop stands in.
        self.assertEqual(rows["specdeck / transformers decode (target >= 2x)"],
                         ("FAIL", "149.0 (engine decode loop) / 134.8 tok/s = 1.11x"))
        self.assertNotIn("transformers baseline", rows)

    def test_an_interrupt_that_did_not_stop_the_check_fails(self):
        rows, _ = table(RUN1)
        self.assertEqual(rows["Ctrl-C during load: exit status 130, load section named"],
                         ("FAIL", "exit status 1, message: (none)"))
        self.assertEqual(rows["Ctrl-C during load: memory back (MiB)"][0], "PASS")


class LaterRun(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.out = os.path.join(self.dir, "out")
        shutil.copytree(RUN1, self.out)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def edit_large(self, section, result):
        path = os.path.join(self.out, "large", "cuda-check.json")
        with open(path) as f:
            data = json.load(f)
        data[section] = {"seconds": 1.0, "result": result}
        with open(path, "w") as f:
            json.dump(data, f)

    def write(self, name, text):
        with open(os.path.join(self.out, name), "w") as f:
            f.write(text)

    def test_the_best_specdeck_figure_is_compared(self):
        self.edit_large("large-model-steps", {"eager_tokens_per_s": 180.0, "graph_tokens_per_s": 280.0})
        rows, _ = table(self.out)
        self.assertEqual(rows["specdeck / transformers decode (target >= 2x)"],
                         ("PASS", "280.0 (CUDA graphs) / 134.8 tok/s = 2.08x"))

    def test_a_missing_transformers_figure_is_a_failure(self):
        self.write("hf.out", '{"load_s": 3.0, "dynamic": {"error": "RuntimeError()"}, "best_decode_tokens_per_s": null}\n')
        rows, _ = table(self.out)
        self.assertEqual(rows["transformers baseline"], ("FAIL", "no figure in hf.out (see hf.err)"))
        self.assertNotIn("specdeck / transformers decode (target >= 2x)", rows)

    def test_an_interrupt_with_status_130_in_the_load_passes(self):
        self.write("ctrlc.out", json.dumps({
            "baseline_mib": 0, "during_load_mib": 2483, "after_mib": 0, "exit_status": 130,
            "interrupted_section": "large-model-engine",
            "message": "cuda-check: interrupted by SIGINT during section large-model-engine; exiting with status 130"}) + "\n")
        rows, summary = table(self.out)
        self.assertEqual(rows["Ctrl-C during load: exit status 130, load section named"][0], "PASS")
        self.assertTrue(summary.startswith("summary: "), summary)


if __name__ == "__main__":
    unittest.main()
