#!/usr/bin/env bash
# Run 26, call 5: the checks (ops vs the CPU; graphs; the DeepSeek family's logits vs the CPU,
# kimi-int4's INT4 experts now read in the kernel), then this build against main before it
# (e90c4f6, carried in the call before) on the same machine: the demo pair on CUDA (INT4
# experts in the kernel vs dequantized at load), and the 8B shape's batch-1 decode at 8 words
# and at a 32K context (graph keys by context class vs one graph for every length).
set -u
G=$(cd "$(dirname "$0")" && pwd)
H=$G/cuda
R=$OUT/r; mkdir -p $R
T=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
SPECDECK_PTX_CACHE=$R/ptx-new timeout 200 $H/specdeck cuda-check --out $R/checks --sections conformance,graphs,deepseek-logits --deepseek-models $G/deepseek >$R/checks.out 2>$R/checks.err
echo "checks rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
for v in new old; do
  BIN=$H/specdeck; [ $v = old ] && BIN=/tmp/specdeck-old
  export SPECDECK_PTX_CACHE=$R/ptx-$v
  mkdir -p $R/home-$v
  HOME=$R/home-$v timeout 60 $BIN </dev/null > $R/demo-extract-$v.out 2>&1
  DEMO=$(ls -d $R/home-$v/.cache/specdeck/demo-* | head -1)
  timeout 150 $BIN bench --device cuda --model-path "$DEMO/target" --speculative-draft-model-path "$DEMO/draft" \
    --speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
    --context-length 131072 --prompts $G/deepseek/heldout_prompts.jsonl --max-new-tokens 64 --compare-target-only --json > $R/demo-$v.json 2> $R/demo-$v.err
  echo "demo-$v rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
done
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || python3 $H/write_llama8b.py $M > $R/write8b.log 2>&1
echo "write8b s=$(( $(date +%s) - T ))" >> $R/calls.log
echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' > $R/p8.jsonl
python3 - > $R/p32k.jsonl <<'PY'
import json, random
rng = random.Random(0)
print(json.dumps({"prompt": " ".join(f"w{rng.randrange(3, 128000)}" for _ in range(32000))}))
PY
timeout 60 $H/specdeck cuda-check --out $R/bw --sections bandwidth > $R/bw.out 2>&1
for v in new old new; do
  BIN=$H/specdeck; [ $v = old ] && BIN=/tmp/specdeck-old
  export SPECDECK_PTX_CACHE=$R/ptx-$v
  n=$v; [ -f $R/b1-$v.out ] && n=$v-again
  timeout 60 $BIN bench --device cuda --model-path $M --prompts $R/p8.jsonl --max-new-tokens 128 --json > $R/b1-$n.out 2> $R/b1-$n.err
  timeout 120 $BIN bench --device cuda --model-path $M --prompts $R/p32k.jsonl --max-new-tokens 256 --json > $R/long-32k-$n.out 2> $R/long-32k-$n.err
  echo "8b-$n rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
done
rm -rf $R/ptx-* $R/home-* $R/p32k.jsonl
cd $OUT && tar czf r.tgz r
cat $R/calls.log; grep -h "FAIL\|fail" $R/checks.out | head -20; grep -c PASS $R/checks.out; grep -h "deepseek\|kimi\|logits" $R/checks.out | head -20
for f in $R/demo-*.json; do echo "$f: $(head -c 3000 $f | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"mean_accept_length":[0-9.]*\|"identical[a-z_]*":[a-z0-9.]*\|"speedup[a-z_]*":[0-9.]*\|"tokens_per_s":[0-9.]*' | tr '\n' ' ')"; done
for f in $R/b1-*.out $R/long-32k-*.out; do echo "$f: $(head -c 1500 $f | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"prefill_ms_median":[0-9.]*' | tr '\n' ' ')"; done
grep -h "GB/s" $R/bw.out | head -3
