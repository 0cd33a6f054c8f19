#!/usr/bin/env bash
# One-off call 4 of run 22: c64 serving beside transformers' batched generate (batch 64), one call.
set -u
H=$(cd "$(dirname "$0")" && pwd)
R=$OUT/r; mkdir -p $R
export SPECDECK_PTX_CACHE=$R/ptx-cache
M=/tmp/specdeck-llama8b
T=$(date +%s)
[ -f "$M/model.safetensors.index.json" ] || python3 $H/write_llama8b.py $M > $R/write8b.log 2>&1
source "$H/step.sh"
prompts 64 512 > $R/p64.jsonl
timeout 90 $H/specdeck bench --device cuda --model-path $M --prompts $R/p64.jsonl --max-new-tokens 256 --concurrency 64 --json > $R/serve-c64.out 2> $R/serve-c64.err
echo "c64 s=$(( $(date +%s) - T ))" >> $R/calls.log
timeout 170 python3 $H/hf_batched.py $M --batch 64 --prompt-len 512 --new-tokens 256 --budget-s 150 > $R/hf-batch64.out 2> $R/hf-batch64.err
echo "hf s=$(( $(date +%s) - T ))" >> $R/calls.log
rm -rf $R/ptx-cache $R/p64.jsonl
cat $R/calls.log
echo "c64: $(head -c 1500 $R/serve-c64.out | grep -o '"output_tokens_per_s":[0-9.]*\|"itl_ms":{[^}]*}' | tr '\n' ' ')"
tail -5 $R/hf-batch64.out; tail -3 $R/hf-batch64.err
