#!/usr/bin/env bash
# One-off call 3 of run 22: the tensor-core prefill attention under ncu, over a small KV pool
# (ncu backs up device memory between replays).
set -u
H=$(cd "$(dirname "$0")" && pwd)
R=$OUT/r; mkdir -p $R
export SPECDECK_PTX_CACHE=$R/ptx-cache
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || python3 $H/write_llama8b.py $M > $R/write8b.log 2>&1
source "$H/step.sh"
prompts 1 8000 > $R/p8k.jsonl
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
timeout -k 5 200 $NCU --clock-control none --kernel-name regex:prefill_attention_tf32 --launch-skip 300 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  $H/specdeck bench --device cuda --model-path $M --prompts $R/p8k.jsonl --max-new-tokens 2 --max-total-tokens 12000 --context-length 10000 --json > $R/ncu-prefill.out 2>&1
rm -rf $R/ptx-cache $R/p8k.jsonl
grep -v "^==PROF==" $R/ncu-prefill.out | grep -v "^ *-*$" | head -90
