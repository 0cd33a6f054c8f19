#!/usr/bin/env bash
# Run 25: speculation under load, and the c16 pair under --enable-deterministic-inference.
set -u
R=/tmp/o; mkdir -p $R
HERE=$(cd "$(dirname "$0")" && pwd)
export SPECDECK_PTX_CACHE=$R/ptx-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
OUT=$R bash "$HERE/smol_load.sh" /tmp/smol.gguf "$1" > $R/smol.out 2>&1
for a in "EAGLE3 --speculative-draft-model-path $1 --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" ""; do
  n=$([ -n "$a" ] && echo eagle3 || echo target)
  s=$(date +%s)
  timeout -k 5 120 "$HERE/specdeck" bench --device cuda --model-path /tmp/specdeck-smol --prompts "$1/heldout_prompts.jsonl" --chat \
    --max-new-tokens 320 --json --concurrency 16 --enable-deterministic-inference ${a:+--speculative-algorithm $a} > $R/smol-det-$n-c16.json 2> $R/smol-det-$n-c16.err
  echo "smol-det-$n-c16 rc=$? seconds=$(($(date +%s) - s))" >> $R/steps.log
done
python3 - $R <<'PY' >> $R/smol_summary.txt
import json, sys
r = sys.argv[1]
def load(n):
    try:
        return json.load(open(f"{r}/{n}.json"))
    except Exception as err:
        print(f"{n}: missing ({err})")
e, t = load("smol-det-eagle3-c16"), load("smol-det-target-c16")
if e and t:
    same = sum(a == b for a, b in zip(e["token_ids"], t["token_ids"]))
    print(f"deterministic c16: eagle3 {e['output_tokens_per_s']:.1f}, target-only {t['output_tokens_per_s']:.1f}: "
          f"{e['output_tokens_per_s'] / t['output_tokens_per_s']:.3f}x; accept {e['mean_accept_length']:.3f}; identical {same}/{len(e['token_ids'])}")
PY
rm -rf $R/ptx-cache
tar czf "$OUT/run.tgz" -C $R .
cat $R/steps.log $R/smol-steps.log $R/smol_summary.txt
