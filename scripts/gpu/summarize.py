#!/usr/bin/env python3
"""The closing table of run.sh: every check cuda-check recorded, then the figures that
combine runs (specdeck vs transformers, memory after quit and after Ctrl-C).

usage: summarize.py OUT_DIR
"""
import json
import os
import sys

MIB_SLACK = 64
# cuda-check's status when SIGINT ends it (128 + 2).
INTERRUPTED = 130


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_json_line(path):
    try:
        with open(path) as f:
            lines = [l for l in f.read().splitlines() if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def specdeck_decode(large):
    """The best batch-1 decode rate of the large model and where it comes from: the model
    steps (eager or CUDA graphs) when that section ran, else the engine's own decode loop."""
    steps = (large.get("large-model-steps") or {}).get("result") or {}
    candidates = [(steps.get("graph_tokens_per_s"), "CUDA graphs"), (steps.get("eager_tokens_per_s"), "eager steps")]
    engine = (large.get("large-model-engine") or {}).get("result") or {}
    candidates.append((engine.get("engine_decode_tokens_per_s"), "engine decode loop"))
    best = max(((v, how) for v, how in candidates if v), default=(None, None))
    return best


def main():
    out = sys.argv[1]
    rows = []

    def row(check, verdict, value):
        rows.append((check, verdict, value))

    for run in ["checks", "tp", "large"]:
        data = load(os.path.join(out, run, "cuda-check.json"))
        if data is None:
            if os.path.exists(os.path.join(out, f"{run}.err")):
                row(f"[{run}] cuda-check", "FAIL", "no results (see %s.err)" % run)
            continue
        for r in data.get("table", []):
            row(f"[{run}] {r['check']}", r["verdict"], r["value"])

    large = load(os.path.join(out, "large", "cuda-check.json")) or {}
    ours, how = specdeck_decode(large)
    hf = last_json_line(os.path.join(out, "hf.out"))
    theirs = (hf or {}).get("best_decode_tokens_per_s")
    if theirs:
        settings = ", ".join(f"{k} {v['decode_tokens_per_s']:.1f}" for k, v in hf.items() if isinstance(v, dict) and "decode_tokens_per_s" in v)
        row("transformers decode tok/s (best cache setting)", "-", f"{theirs:.1f}  ({settings})")
    elif os.path.exists(os.path.join(out, "hf.err")):
        row("transformers baseline", "FAIL", "no figure in hf.out (see hf.err)")
    if theirs and ours:
        ratio = ours / theirs
        row("specdeck / transformers decode (target >= 2x)", "PASS" if ratio >= 2 else "FAIL",
            f"{ours:.1f} ({how}) / {theirs:.1f} tok/s = {ratio:.2f}x")
    elif theirs:
        row("specdeck / transformers decode (target >= 2x)", "FAIL", "no specdeck decode figure in large/cuda-check.json")

    try:
        with open(os.path.join(out, "memory.log")) as f:
            mem = [l.split() for l in f.read().splitlines()]
        base = [int(x) for x in mem[0][1].split(",")]
        for entry in mem[1:]:
            used = [int(x) for x in entry[-1].split(",")]
            ok = all(abs(a - b) <= MIB_SLACK for a, b in zip(used, base))
            row(f"GPU memory {' '.join(entry[:-1])} (MiB, baseline {base})", "PASS" if ok else "FAIL", str(used))
    except (OSError, IndexError, ValueError):
        row("GPU memory log", "FAIL", "missing")

    ctrlc = last_json_line(os.path.join(out, "ctrlc.out"))
    if ctrlc:
        ok = abs(ctrlc["after_mib"] - ctrlc["baseline_mib"]) <= MIB_SLACK and ctrlc["during_load_mib"] > ctrlc["baseline_mib"]
        row("Ctrl-C during load: memory back (MiB)", "PASS" if ok else "FAIL",
            f"baseline {ctrlc['baseline_mib']}, during load {ctrlc['during_load_mib']}, after {ctrlc['after_mib']}")
        interrupted = ctrlc.get("exit_status") == INTERRUPTED and ctrlc.get("interrupted_section") == "large-model-engine"
        row(f"Ctrl-C during load: exit status {INTERRUPTED}, load section named", "PASS" if interrupted else "FAIL",
            f"exit status {ctrlc.get('exit_status')}, message: {ctrlc.get('message') or '(none)'}")

    try:
        with open(os.path.join(out, "steps.log")) as f:
            for line in f.read().splitlines():
                if "rc=124" in line or "rc=137" in line or "skipped" in line:
                    row("step " + line.split()[0], "FAIL", line)
    except OSError:
        pass

    w = max((len(r[0]) for r in rows), default=10)
    failed = sum(1 for r in rows if r[1] == "FAIL")
    for check, verdict, value in rows:
        print(f"{check:<{w}}  {verdict:<4}  {value}")
    print(f"summary: {sum(1 for r in rows if r[1] != '-')} checks, {failed} failed")


if __name__ == "__main__":
    main()
