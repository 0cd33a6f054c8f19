#!/usr/bin/env python3
"""Batched greedy generate through transformers, the reference for specdeck's serving
figure: BATCH random-token prompts of PROMPT_LEN tokens, NEW_TOKENS new tokens each, EOS
ignored, end to end (prefill included, as a server's output tokens/s is), for each cache
setting while the budget lasts (dynamic, static, static with torch.compile). Prints one
JSON object with the best setting.

usage: hf_batched.py MODEL_DIR [--batch 64] [--prompt-len 512] [--new-tokens 256] [--budget-s 220]
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM

# Beside this file (scripts/gpu/stage.sh stages both): the same timing as the batch-1 figure.
from hf_baseline import timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--budget-s", type=float, default=220.0)
    args = ap.parse_args()
    start = time.time()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, device_map="cuda")
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (args.batch, args.prompt_len), generator=gen).cuda()
    mask = torch.ones_like(ids)
    import transformers
    results = {"batch": args.batch, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
               "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    settings = [
        ("static", {"cache_implementation": "static", "disable_compile": True}),
        ("static+compile", {"cache_implementation": "static"}),
        ("dynamic", {}),
    ]
    for name, kw in settings:
        if time.time() - start > args.budget_s * 0.6:
            results[name] = {"skipped": "time budget"}
            continue
        try:
            timed(model, ids, 4, attention_mask=mask, **kw)  # warm-up (and compilation)
            s = timed(model, ids, args.new_tokens, attention_mask=mask, **kw)
            results[name] = {"seconds": s, "output_tokens_per_s": args.batch * args.new_tokens / s}
        except Exception as e:  # one setting failing must not hide the others
            results[name] = {"error": repr(e)[:300]}
    best = max((v["output_tokens_per_s"] for v in results.values() if isinstance(v, dict) and "output_tokens_per_s" in v), default=None)
    results["best_output_tokens_per_s"] = best
    print(json.dumps(results))


if __name__ == "__main__":
    main()
