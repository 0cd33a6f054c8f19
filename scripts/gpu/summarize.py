#!/usr/bin/env python3
"""The closing table of run.sh: every check cuda-check recorded, then the figures that
combine runs (the engine's own decode with CUDA graphs vs the HBM floor, eager, and over 2
GPUs; specdeck vs transformers; the Qwen pair; memory after quit and after Ctrl-C).

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


def specdeck_decode(large, bench=None):
    """The best batch-1 decode rate of the large model and where it comes from: the model
    steps (eager or CUDA graphs), the engine's bench with CUDA graphs, else the engine's
    decode loop in cuda-check."""
    steps = (large.get("large-model-steps") or {}).get("result") or {}
    candidates = [(steps.get("graph_tokens_per_s"), "CUDA graphs"), (steps.get("eager_tokens_per_s"), "eager steps")]
    candidates.append(((bench or {}).get("decode_tokens_per_s"), "engine bench, CUDA graphs"))
    engine = (large.get("large-model-engine") or {}).get("result") or {}
    candidates.append((engine.get("engine_decode_tokens_per_s"), "engine decode loop"))
    best = max(((v, how) for v, how in candidates if v), default=(None, None))
    return best


def same_tokens(one, two):
    """Verdict and value of a TP 2 == TP 1 comparison of two bench runs."""
    a, b = one["token_ids"], two["token_ids"]
    first = [(i, next((j for j, (x, y) in enumerate(zip(p, q)) if x != y), min(len(p), len(q))))
             for i, (p, q) in enumerate(zip(a, b)) if p != q]
    speeds = f"{two['decode_tokens_per_s']:.1f} / {one['decode_tokens_per_s']:.1f} tok/s"
    if not first:
        return "PASS", f"identical over {len(a)} prompts; {speeds}"
    where = ", ".join(f"prompt {i} from token {j}" for i, j in first)
    return "FAIL", f"DIFFERENT ({where}); {speeds}"


TP_TARGET = 1.3
FLOOR_TARGET = 0.85
QWEN_TARGET = 1.5


def engine_rows(out, large, row):
    """`specdeck bench` on the 8B shape: CUDA graphs vs the floor, eager, TP 2."""
    graphs = last_json_line(os.path.join(out, "engine-graphs.out"))
    eager = last_json_line(os.path.join(out, "engine-eager.out"))
    tp2 = last_json_line(os.path.join(out, "engine-tp2.out"))
    for name, data in [("engine-graphs", graphs), ("engine-eager", eager), ("engine-tp2", tp2)]:
        if data is None and os.path.exists(os.path.join(out, f"{name}.err")):
            row(f"[{name}] specdeck bench", "FAIL", f"no results (see {name}.err)")
    floor = ((large.get("large-model-steps") or {}).get("result") or {}).get("floor_tokens_per_s")
    if graphs:
        rate = graphs["decode_tokens_per_s"]
        if floor:
            ratio = rate / floor
            row(f"engine decode, CUDA graphs vs HBM floor (target >= {FLOOR_TARGET:.0%})", "PASS" if ratio >= FLOOR_TARGET else "FAIL",
                f"{rate:.1f} of {floor:.1f} tok/s = {ratio:.1%}")
        else:
            row("engine decode tok/s, CUDA graphs", "-", f"{rate:.1f} (no floor: large-model-steps did not run)")
    if graphs and eager:
        same = graphs["token_ids"] == eager["token_ids"]
        row("engine tokens, CUDA graphs == eager", "PASS" if same else "FAIL",
            f"{'identical' if same else 'DIFFERENT'}; eager {eager['decode_tokens_per_s']:.1f} tok/s")
    # A/B runs of the same graphs: neither launch overlap, nor where the residual add runs,
    # nor which path sums the ranks changes the arithmetic, so the tokens must match.
    for name, base, what in [("engine-graphs-nopdl", graphs, "CUDA graphs with / without programmatic dependent launch"),
                             ("engine-graphs-unfused", graphs, "CUDA graphs with / without the residual adds fused into the o and down matmuls"),
                             ("engine-tp2-nccl", tp2, "TP 2, all-reduce through peer memory / NCCL only")]:
        other = last_json_line(os.path.join(out, f"{name}.out"))
        if base and other:
            same = base["token_ids"] == other["token_ids"]
            row(f"engine decode, {what}", "PASS" if same else "FAIL",
                f"{base['decode_tokens_per_s']:.1f} / {other['decode_tokens_per_s']:.1f} tok/s; tokens {'identical' if same else 'DIFFERENT'}")
    det = last_json_line(os.path.join(out, "engine-det.out"))
    det_tp2 = last_json_line(os.path.join(out, "engine-det-tp2.out"))
    if det and det_tp2:
        row("engine tokens, TP 2 == TP 1, --enable-deterministic-inference", *same_tokens(det, det_tp2))
    if graphs and tp2:
        row("engine tokens, TP 2 == TP 1", *same_tokens(graphs, tp2))
        ratio = tp2["decode_tokens_per_s"] / graphs["decode_tokens_per_s"]
        row(f"engine decode TP 2 / TP 1 (target >= {TP_TARGET}x)", "PASS" if ratio >= TP_TARGET else "FAIL",
            f"{tp2['decode_tokens_per_s']:.1f} / {graphs['decode_tokens_per_s']:.1f} tok/s = {ratio:.2f}x")
    return graphs


def qwen_pair_rows(out, row, name, label):
    """One `specdeck bench --compare-target-only` of the Qwen pair: identity, speedup, and
    where a cycle's time goes."""
    data = last_json_line(os.path.join(out, f"{name}.out"))
    if data is None:
        if os.path.exists(os.path.join(out, f"{name}.err")):
            row(f"[{name}] specdeck bench", "FAIL", f"no results (see {name}.err)")
        return
    base = data.get("target_only") or {}
    row(f"{label} greedy speculative == target-only", "PASS" if data.get("identical") else "FAIL",
        "identical" if data.get("identical") else f"prompts {data.get('mismatched_prompts')} differ")
    spec, alone = data["tokens_per_s"], base.get("tokens_per_s")
    if alone:
        speedup = spec / alone
        row(f"{label} speculative / target-only tok/s (target >= {QWEN_TARGET}x)", "PASS" if speedup >= QWEN_TARGET else "FAIL",
            f"{spec:.1f} / {alone:.1f} = {speedup:.2f}x; mean accept {data['mean_accept_length']:.2f} over {data['prompts']} prompts")
    if "draft_ms_per_cycle" in data and "verify_ms_per_cycle" in base:
        row(f"{label} ms per cycle: draft / verify (target-only: ms per token)", "-",
            f"{data['draft_ms_per_cycle']:.2f} / {data['verify_ms_per_cycle']:.2f} ({base['verify_ms_per_cycle']:.2f})")
    if "prefill_ms_median" in data and "prefill_ms_median" in base:
        row(f"{label} prefill ms per prompt, median: speculative / target-only", "-",
            f"{data['prefill_ms_median']:.2f} / {base['prefill_ms_median']:.2f}")


def qwen_rows(out, row):
    """Qwen2.5-Coder 1.5B with the 0.5B STANDALONE draft on HumanEval, when it ran."""
    det1 = last_json_line(os.path.join(out, "qwen-det-tp1.out"))
    det2 = last_json_line(os.path.join(out, "qwen-det-tp2.out"))
    if det1 and det2:
        row("qwen target-only tokens, TP 2 == TP 1, --enable-deterministic-inference", *same_tokens(det1, det2))
    qwen_pair_rows(out, row, "qwen", "qwen")
    qwen_pair_rows(out, row, "qwen-s3", "qwen steps 3")
    tp1 = last_json_line(os.path.join(out, "qwen-tp1.out"))
    tp2 = last_json_line(os.path.join(out, "qwen-tp2.out"))
    if tp1 and tp2:
        row("qwen target-only tokens, TP 2 == TP 1", *same_tokens(tp1, tp2))


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
    bench = engine_rows(out, large, row)
    qwen_rows(out, row)
    ours, how = specdeck_decode(large, bench)
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
