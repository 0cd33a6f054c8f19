#!/usr/bin/env python3
"""The closing table of run.sh: every check cuda-check recorded, then the figures that
combine runs (specdeck vs transformers, memory after quit and after Ctrl-C).

usage: summarize.py OUT_DIR
"""
import json
import os
import sys

MIB_SLACK = 64


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
            if r["check"].startswith("NVML") and run != "large":
                continue
            row(f"[{run}] {r['check']}", r["verdict"], r["value"])

    large = load(os.path.join(out, "large", "cuda-check.json")) or {}
    steps = (large.get("large-model-steps") or {}).get("result") or {}
    hf = last_json_line(os.path.join(out, "hf.out"))
    ours = max(steps.get("eager_tokens_per_s") or 0, steps.get("graph_tokens_per_s") or 0)
    if hf and hf.get("best_decode_tokens_per_s") and ours:
        ratio = ours / hf["best_decode_tokens_per_s"]
        settings = ", ".join(f"{k} {v['decode_tokens_per_s']:.1f}" for k, v in hf.items() if isinstance(v, dict) and "decode_tokens_per_s" in v)
        row("specdeck / transformers decode (target >= 2x)", "PASS" if ratio >= 2 else "FAIL",
            f"{ours:.1f} / {hf['best_decode_tokens_per_s']:.1f} tok/s = {ratio:.2f}x  ({settings})")
    elif os.path.exists(os.path.join(out, "hf.err")):
        row("transformers baseline", "FAIL", "no figure (see hf.err)")

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
