#!/usr/bin/env python3
"""summarize.py against the outputs of a real GPU run (testdata/gpu/run-1) and against
copies of it changed the way a later run would change them; bench_lines.py against run 38's.

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


class CopyOfRun1(unittest.TestCase):
    """A copy of run 1's outputs that a test edits the way a later run would change them."""

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



class LaterRun(CopyOfRun1):
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


def bench_line(rate, token_ids, **extra):
    """One `specdeck bench --json` line, with the fields summarize.py reads."""
    return json.dumps(dict({"decode_tokens_per_s": rate, "tokens_per_s": rate * 0.9, "token_ids": token_ids,
                            "device": "cuda", "prompts": len(token_ids)}, **extra)) + "\n"


class EngineAndQwen(CopyOfRun1):
    def test_engine_graphs_against_the_floor_eager_and_tp2(self):
        self.edit_large("large-model-steps", {"floor_tokens_per_s": 280.0, "eager_tokens_per_s": 150.0})
        self.write("engine-graphs.out", bench_line(245.0, [[5, 6, 7], [8, 9]], tp_size=1))
        self.write("engine-eager.out", bench_line(150.0, [[5, 6, 7], [8, 9]], tp_size=1))
        self.write("engine-tp2.out", bench_line(400.0, [[5, 6, 7], [8, 9]], tp_size=2))
        rows, _ = table(self.out)
        self.assertEqual(rows["engine decode, CUDA graphs vs HBM floor (target >= 85%)"], ("PASS", "245.0 of 280.0 tok/s = 87.5%"))
        self.assertEqual(rows["engine tokens, CUDA graphs == eager"], ("PASS", "identical; eager 150.0 tok/s"))
        self.assertEqual(rows["engine tokens, TP 2 == TP 1"], ("PASS", "identical over 2 prompts; 400.0 / 245.0 tok/s"))
        self.assertEqual(rows["engine decode TP 2 / TP 1 (target >= 1.3x)"], ("PASS", "400.0 / 245.0 tok/s = 1.63x"))
        # The engine's graph figure is the best specdeck figure here.
        self.assertEqual(rows["specdeck / transformers decode (target >= 2x)"],
                         ("FAIL", "245.0 (engine bench, CUDA graphs) / 134.8 tok/s = 1.82x"))

    def test_different_tokens_a_slow_tp2_and_a_failed_bench_are_failures(self):
        self.edit_large("large-model-steps", {"floor_tokens_per_s": 280.0})
        self.write("engine-graphs.out", bench_line(200.0, [[5, 6, 7]]))
        self.write("engine-eager.out", bench_line(150.0, [[5, 6, 8]]))
        self.write("engine-tp2.out", bench_line(220.0, [[5, 6, 7]]))
        self.write("qwen.err", "specdeck: error [backend-error] in target-load: ...\n")
        rows, _ = table(self.out)
        self.assertEqual(rows["engine decode, CUDA graphs vs HBM floor (target >= 85%)"], ("FAIL", "200.0 of 280.0 tok/s = 71.4%"))
        self.assertEqual(rows["engine tokens, CUDA graphs == eager"], ("FAIL", "DIFFERENT; eager 150.0 tok/s"))
        self.assertEqual(rows["engine decode TP 2 / TP 1 (target >= 1.3x)"], ("FAIL", "220.0 / 200.0 tok/s = 1.10x"))
        self.assertEqual(rows["[qwen] specdeck bench"], ("FAIL", "no results (see qwen.err)"))

    def test_deterministic_runs_name_where_tp2_first_differs(self):
        self.write("engine-det.out", bench_line(200.0, [[5, 6, 7, 8], [1, 2]]))
        self.write("engine-det-tp2.out", bench_line(270.0, [[5, 6, 9, 8], [1, 2]]))
        self.write("qwen-det-tp1.out", bench_line(500.0, [[3], [4]]))
        self.write("qwen-det-tp2.out", bench_line(480.0, [[3], [4]]))
        rows, _ = table(self.out)
        self.assertEqual(rows["engine tokens, TP 2 == TP 1, --enable-deterministic-inference"],
                         ("FAIL", "DIFFERENT (prompt 0 from token 2); 270.0 / 200.0 tok/s"))
        self.assertEqual(rows["qwen target-only tokens, TP 2 == TP 1, --enable-deterministic-inference"],
                         ("PASS", "identical over 2 prompts; 480.0 / 500.0 tok/s"))

    def test_a_tp2_bench_without_output_fails(self):
        self.write("engine-graphs.out", bench_line(200.0, [[5]]))
        self.write("engine-tp2.err", "thread panicked\n")
        rows, _ = table(self.out)
        self.assertEqual(rows["[engine-tp2] specdeck bench"], ("FAIL", "no results (see engine-tp2.err)"))
        self.assertEqual(rows["engine decode tok/s, CUDA graphs"], ("-", "200.0 (no floor: large-model-steps did not run)"))
        self.assertNotIn("engine decode TP 2 / TP 1 (target >= 1.3x)", rows)

    def test_the_qwen_pair_reports_accept_length_and_speedup(self):
        self.write("qwen.out", json.dumps({"tokens_per_s": 330.0, "mean_accept_length": 3.4, "prompts": 20, "identical": True,
                                           "target_only": {"tokens_per_s": 150.0}}) + "\n")
        self.write("qwen-s3.out", json.dumps({"tokens_per_s": 140.0, "mean_accept_length": 2.9, "prompts": 20, "identical": False,
                                              "mismatched_prompts": [4], "draft_ms_per_cycle": 4.5, "verify_ms_per_cycle": 2.25,
                                              "prefill_ms_median": 7.5,
                                              "target_only": {"tokens_per_s": 150.0, "verify_ms_per_cycle": 2.0,
                                                              "prefill_ms_median": 3.25}}) + "\n")
        rows, _ = table(self.out)
        self.assertEqual(rows["qwen greedy speculative == target-only"], ("PASS", "identical"))
        self.assertEqual(rows["qwen speculative / target-only tok/s (target >= 1.5x)"],
                         ("PASS", "330.0 / 150.0 = 2.20x; mean accept 3.40 over 20 prompts"))
        self.assertNotIn("qwen ms per cycle: draft / verify (target-only: ms per token)", rows)
        self.assertEqual(rows["qwen steps 3 greedy speculative == target-only"], ("FAIL", "prompts [4] differ"))
        self.assertEqual(rows["qwen steps 3 speculative / target-only tok/s (target >= 1.5x)"],
                         ("FAIL", "140.0 / 150.0 = 0.93x; mean accept 2.90 over 20 prompts"))
        self.assertEqual(rows["qwen steps 3 ms per cycle: draft / verify (target-only: ms per token)"], ("-", "4.50 / 2.25 (2.00)"))
        self.assertEqual(rows["qwen steps 3 prefill ms per prompt, median: speculative / target-only"], ("-", "7.50 / 3.25"))
        self.assertNotIn("qwen prefill ms per prompt, median: speculative / target-only", rows)


class BenchLines(unittest.TestCase):
    """bench_lines.py against run 38's first call (testdata/gpu/run-38/call1)."""

    def lines(self, pattern):
        folder = os.path.join(HERE, "..", "..", "testdata", "gpu", "run-38", "call1")
        done = subprocess.run([sys.executable, os.path.join(HERE, "bench_lines.py"), folder, pattern], capture_output=True,
                              text=True, check=True)
        return {line.split()[0]: line for line in done.stdout.splitlines()}

    def test_equal_tokens_give_one_digest_from_call_to_call(self):
        digest = {name: line.rsplit(" ", 1)[1] for name, line in self.lines("b1-*.json").items()}
        self.assertEqual(sorted(digest), ["b1-build-det.json", "b1-build.json", "b1-main.json", "b1-xpre.json"])
        self.assertEqual(digest["b1-build.json"], "0779a0f0")
        self.assertEqual(digest["b1-main.json"], digest["b1-build.json"])
        self.assertEqual(digest["b1-xpre.json"], digest["b1-build.json"])
        self.assertNotEqual(digest["b1-build-det.json"], digest["b1-build.json"])
        self.assertEqual(self.lines("b1-build.json")["b1-build.json"].rsplit(" ", 1)[1], "0779a0f0")

    def test_each_line_holds_the_rates(self):
        line = self.lines("c32-main.json")["c32-main.json"]
        self.assertIn("'output_tokens_per_s': 1571.6132826904077", line)
        self.assertIn("'itl_ms': {'p50': 11.431030999999999", line)
        self.assertEqual(self.lines("*.err"), {})


if __name__ == "__main__":
    unittest.main()
