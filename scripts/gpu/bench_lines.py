#!/usr/bin/env python3
"""A GPU call's bench results, a line each (kernel_ab.sh, long_ab.sh and the calls of
testdata/gpu/run-*/): the rates, and a digest of the token ids that is the same for the same
tokens in every call (Python's hash() of a string is salted per process, so the figures the
scripts printed before compared only within one table).

usage: python3 scripts/gpu/bench_lines.py DIR [GLOB]   (which *.json files; default all)
"""
import glob
import hashlib
import json
import os
import sys

from summarize import last_json_line

KEYS = ("decode_tokens_per_s", "output_tokens_per_s", "ttft_ms", "itl_ms", "best_output_tokens_per_s")


def tokens_digest(result):
    ids = result.get("token_ids")
    return "none" if ids is None else hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:8]


def lines(folder, pattern="*.json"):
    for path in sorted(glob.glob(os.path.join(folder, pattern))):
        result = last_json_line(path)
        if result:
            rates = {k: result[k] for k in KEYS if k in result}
            yield f"{os.path.basename(path)} {rates} tokens {tokens_digest(result)}"


if __name__ == "__main__":
    for line in lines(*sys.argv[1:3]):
        print(line)
