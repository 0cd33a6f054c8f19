#!/usr/bin/env bash
# Run 27, call 1: FP8 dense weights (attention, dense and shared MLPs, kv_b_proj) kept as
# stored on CUDA, the skinny matmul's x split into two tf32 parts. Checks, the demo pair,
# the DeepSeek-V3 FP8 shape at batch 1 and 32, the 8B shape at batch 1.
set -u
G=$(cd "$(dirname "$0")" && pwd)
H=$G/cuda
R=$OUT/r; mkdir -p $R
T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
timeout 200 $H/specdeck cuda-check --out $R/checks --sections conformance,graphs,deepseek-logits,bandwidth --deepseek-models $G/deepseek >$R/checks.out 2>$R/checks.err
echo "checks rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
mkdir -p /tmp/home
HOME=/tmp/home timeout 60 $H/specdeck </dev/null > $R/demo-extract.out 2>&1
DEMO=$(ls -d /tmp/home/.cache/specdeck/demo-* | head -1)
timeout 120 $H/specdeck bench --device cuda --model-path "$DEMO/target" --speculative-draft-model-path "$DEMO/draft" \
  --speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
  --context-length 131072 --prompts $G/deepseek/heldout_prompts.jsonl --max-new-tokens 64 --compare-target-only --json > $R/demo.json 2> $R/demo.err
echo "demo rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
M=/tmp/specdeck-dsv3-fp8
[ -f "$M/config.json" ] || timeout 150 python3 $H/write_dsv3_fp8.py $M --layers 3 > $R/write-fp8.out 2>&1
echo "write-fp8 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(32)]' > $R/prompts32.jsonl
head -4 $R/prompts32.jsonl > $R/prompts4.jsonl
timeout 120 $H/specdeck bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json > $R/fp8-b1.json 2> $R/fp8-b1.err
echo "fp8-b1 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
timeout 90 $H/specdeck bench --device cuda --model-path $M --prompts $R/prompts32.jsonl --max-new-tokens 32 --concurrency 32 --json > $R/fp8-c32.json 2> $R/fp8-c32.err
echo "fp8-c32 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
M8=/tmp/specdeck-llama8b
[ -f "$M8/model.safetensors.index.json" ] || python3 $H/write_llama8b.py $M8 > $R/write8b.log 2>&1
echo "write8b s=$(( $(date +%s) - T ))" >> $R/calls.log
echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' > $R/p8.jsonl
timeout 60 $H/specdeck bench --device cuda --model-path $M8 --prompts $R/p8.jsonl --max-new-tokens 128 --json > $R/b1.out 2> $R/b1.err
echo "8b-b1 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
python3 - > $R/p32k.jsonl <<'PY'
import json, random
rng = random.Random(0)
print(json.dumps({"prompt": " ".join(f"w{rng.randrange(3, 128000)}" for _ in range(32000))}))
PY
timeout 120 $H/specdeck bench --device cuda --model-path $M8 --prompts $R/p32k.jsonl --max-new-tokens 256 --json > $R/long-32k.out 2> $R/long-32k.err
echo "8b-32k rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
python3 - > $R/p64.jsonl <<'PY'
import json, random
rng = random.Random(0)
for _ in range(64):
    print(json.dumps({"prompt": " ".join(f"w{rng.randrange(3, 128000)}" for _ in range(512))}))
PY
timeout 90 $H/specdeck bench --device cuda --model-path $M8 --prompts $R/p64.jsonl --max-new-tokens 256 --concurrency 64 --json > $R/c64.out 2> $R/c64.err
echo "8b-c64 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
rm -f $R/p32k.jsonl $R/p64.jsonl

cat $R/calls.log; grep -h "FAIL\|fail" $R/checks.out | head -20; grep -c PASS $R/checks.out; grep -h "dsv3\|kimi\|GB/s" $R/checks.out | head -24
for f in $R/b1.out $R/long-32k.out $R/c64.out; do echo "$f: $(head -c 1500 $f | tr -d '\n' | grep -o '"seconds":[0-9.]*\|"output_tokens_per_s":[0-9.]*\|"decode_tokens_per_s":[0-9.]*\|"itl_ms":{[^}]*}\|"prefill_ms_median":[0-9.]*' | tr '\n' ' ')"; done
for f in $R/demo.json $R/fp8-*.json; do echo "$f: $(head -c 4000 $f | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"mean_accept_length":[0-9.]*\|"identical[a-z_]*":[a-z0-9.]*\|"tokens_per_s":[0-9.]*\|"target_weight_bytes":[0-9]*\|"output_tokens_per_s":[0-9.]*' | tr '\n' ' ')"; done
tail -3 $R/write-fp8.out; tail -3 $R/fp8-b1.err; tail -3 $R/fp8-c32.err
