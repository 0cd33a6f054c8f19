#!/usr/bin/env python3
"""Greedy batch-1 decode of a checkpoint through transformers, for the side-by-side figure:
decode tokens/s = 128 new tokens / (time to generate 129 - time to generate 1), after a
warm-up, for each cache setting (dynamic; static; static with torch.compile when time
allows). Prints one JSON object.

usage: hf_baseline.py MODEL_DIR [--new-tokens N] [--budget-s S]
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def timed(model, ids, n, **kw):
    torch.cuda.synchronize()
    t = time.time()
    out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, **kw)
    torch.cuda.synchronize()
    assert out.shape[1] == ids.shape[1] + n
    return time.time() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--budget-s", type=float, default=140.0)
    args = ap.parse_args()
    start = time.time()
    t = time.time()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, device_map="cuda")
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    load_s = time.time() - t
    ids = torch.tensor([[1000 + i * 37 for i in range(32)]], device="cuda")
    results = {"load_s": load_s, "versions": {"torch": torch.__version__}}
    try:
        import transformers
        results["versions"]["transformers"] = transformers.__version__
    except Exception:
        pass
    settings = [
        ("dynamic", {}),
        ("static", {"cache_implementation": "static", "disable_compile": True}),
        ("static+compile", {"cache_implementation": "static"}),
    ]
    n = args.new_tokens
    for name, kw in settings:
        if time.time() - start > args.budget_s * 0.5 and name == "static+compile":
            results[name] = {"skipped": "time budget"}
            continue
        try:
            timed(model, ids, 8, **kw)  # warm-up (and compilation)
            one = min(timed(model, ids, 1, **kw) for _ in range(2))
            full = min(timed(model, ids, n + 1, **kw) for _ in range(2))
            results[name] = {"decode_tokens_per_s": n / (full - one), "ms_per_token": 1e3 * (full - one) / n}
        except Exception as e:  # one setting failing must not hide the others
            results[name] = {"error": repr(e)[:300]}
        if time.time() - start > args.budget_s:
            break
    best = max((v["decode_tokens_per_s"] for v in results.values() if isinstance(v, dict) and "decode_tokens_per_s" in v), default=None)
    results["best_decode_tokens_per_s"] = best
    print(json.dumps(results))


if __name__ == "__main__":
    main()
