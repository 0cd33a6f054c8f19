#!/usr/bin/env bash
# Run 25 call 3 (first H100 lease): cuda-check's speculative-greedy section, then speculation under load.
set -u
R=/tmp/o; mkdir -p $R
HERE=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
( time timeout -k 5 200 "$HERE/specdeck" cuda-check --sections speculative-greedy --out $R ) > $R/cuda-check.out 2>&1
echo "cuda-check rc=$?" >> $R/steps.log
OUT=$R bash "$HERE/smol_load.sh" /tmp/smol.gguf "$1" > $R/smol.out 2>&1
s=$(date +%s)
timeout -k 5 120 "$HERE/specdeck" bench --device cuda --model-path /tmp/specdeck-smol --prompts "$1/heldout_prompts.jsonl" --chat \
  --max-new-tokens 320 --json --concurrency 16 --speculative-algorithm STANDALONE --speculative-draft-model-path /tmp/specdeck-smol \
  --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 > $R/smol-self-c16.json 2> $R/smol-self-c16.err
echo "smol-self-c16 rc=$? seconds=$(($(date +%s) - s))" >> $R/steps.log
rm -rf $R/ptx-cache
tar czf "$OUT/run.tgz" -C $R .
cat $R/steps.log $R/smol-steps.log $R/smol_summary.txt
tail -5 $R/cuda-check.out
