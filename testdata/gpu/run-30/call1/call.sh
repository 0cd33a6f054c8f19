#!/usr/bin/env bash
# Main (.gpu/cuda, 8e26ff8+) against "combined" (.gpu/builds/combined: dsv3-graphs + x-one-part
# + fp8-row-handles, merged), prepared 2026-12-07 (session 7).
#   command: tar xJf .gpu/pack/builds.tar.xz && bash .gpu/next2.sh    carry: [".gpu/pack", ".gpu/next2.sh"]
set -u
G=$(cd "$(dirname "$0")" && pwd)
R=$OUT/r; mkdir -p $R
T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx-next
step() { echo "$1 rc=$2 s=$(( $(date +%s) - T ))" >> $R/calls.log; (cd $OUT && tar czf r.tgz r); }
C=$G/builds/combined/specdeck
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
timeout 150 $C cuda-check --out $R/checks-c --sections conformance,gemm,deepseek-logits,deepseek-logits-deterministic,bandwidth --deepseek-models $G/deepseek >$R/checks-c.out 2>$R/checks-c.err
step checks-c $?
# DeepSeek-V3 FP8 as stored at batch 1: main (eager) against combined (graph steps, row handles).
M=/tmp/specdeck-dsv3-fp8
[ -f "$M/config.json" ] || timeout 150 python3 $G/cuda/write_dsv3_fp8.py $M --layers 3 > $R/write-fp8.out 2>&1
step write-fp8 $?
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(4)]' > $R/prompts4.jsonl
for v in main c; do
  B=$G/cuda/specdeck; [ $v = c ] && B=$C
  timeout 100 $B bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json > $R/fp8-b1-$v.json 2> $R/fp8-b1-$v.err
  step fp8-b1-$v $?
done
timeout 100 $C bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json --cuda-graph-max-bs 0 > $R/fp8-b1-c-eager.json 2> $R/fp8-b1-c-eager.err
step fp8-b1-c-eager $?
# The 8B shape at batch 1: main against combined (one tf32 part).
OUT=$R/ab timeout 250 bash $G/cuda/ab.sh "" "SPECDECK_BIN=$C" > $R/ab.out 2>&1
step ab-8b $?
# Batch 1 at a 32K context: the tensor-core step attention (SPECDECK_STEP_MMA=1) against the CUDA-core one.
python3 -c 'import json, random; r = random.Random(0); print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 128000)}" for _ in range(32000))}))' > $R/prompts-32k.jsonl
for v in 1 0; do
  SPECDECK_STEP_MMA=$v timeout 90 $G/cuda/specdeck bench --device cuda --model-path /tmp/specdeck-llama8b --prompts $R/prompts-32k.jsonl --max-new-tokens 256 --json > $R/long-32k-mma$v.json 2> $R/long-32k-mma$v.err
  step long-32k-mma$v $?
done
rm -f $R/prompts-32k.jsonl
cat $R/calls.log; grep -h "FAIL\|graph\|ops vs\|GB/s\|dsv3\|kimi" $R/checks-*.out | head -40; tail -5 $R/ab.out
for f in $R/fp8-*.json $R/long-*.json; do echo "$f: $(head -c 3000 $f | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"output_tokens_per_s":[0-9.]*' | paste -sd' ')"; done
cd $OUT && tar czf r.tgz r && rm -rf r
