#!/usr/bin/env bash
# Run 29, call 6: the stored-weight kernels with a row handle (scales found once a row, a
# shift a chunk) and the input rows found once a row of weights (B, .gpu/cuda), against the
# build of call 1 (A, .gpu/a: per-chunk divisions and loads of the pair). Checks (B:
# conformance, both DeepSeek logits sections), the demo pair and DeepSeek-V3 FP8 as stored
# at batch 1 and 32 (A and B, same machine).
set -u
G=$(cd "$(dirname "$0")" && pwd)
R=$OUT/r; mkdir -p $R
T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx6
step() { echo "$1 rc=$2 s=$(( $(date +%s) - T ))" >> $R/calls.log; (cd $OUT && tar czf r.tgz r); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
timeout 150 $G/cuda/specdeck cuda-check --out $R/checks --sections conformance,deepseek-logits,deepseek-logits-deterministic,bandwidth --deepseek-models $G/deepseek >$R/checks.out 2>$R/checks.err
step checks $?
M=/tmp/specdeck-dsv3-fp8
[ -f "$M/config.json" ] || timeout 150 python3 $G/cuda/write_dsv3_fp8.py $M --layers 3 > $R/write-fp8.out 2>&1
step write-fp8 $?
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(32)]' > $R/prompts32.jsonl
head -4 $R/prompts32.jsonl > $R/prompts4.jsonl
mkdir -p /tmp/home
HOME=/tmp/home timeout 60 $G/cuda/specdeck </dev/null > $R/demo-extract.out 2>&1
DEMO=$(ls -d /tmp/home/.cache/specdeck/demo-* | head -1)
for v in b a; do
  B=$G/cuda/specdeck; [ $v = a ] && B=$G/a/specdeck
  timeout 100 $B bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json > $R/fp8-b1-$v.json 2> $R/fp8-b1-$v.err
  step fp8-b1-$v $?
done
B=$G/cuda/specdeck
timeout 120 $B bench --device cuda --model-path "$DEMO/target" --speculative-draft-model-path "$DEMO/draft" \
  --speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
  --context-length 131072 --prompts $G/deepseek/heldout_prompts.jsonl --max-new-tokens 64 --compare-target-only --json > $R/demo-b.json 2> $R/demo-b.err
step demo-b $?
timeout 100 $B bench --device cuda --model-path $M --prompts $R/prompts32.jsonl --max-new-tokens 32 --concurrency 32 --json > $R/fp8-c32-b.json 2> $R/fp8-c32-b.err
step fp8-c32-b $?
# The 8B shape at batch 1 (no regression; run 24's H200: 82.9 % of its floor).
M8=/tmp/specdeck-llama8b
[ -f "$M8/model.safetensors.index.json" ] || timeout 120 python3 $G/cuda/write_llama8b.py $M8 > $R/write8b.out 2>&1
echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' > $R/prompt8.jsonl
timeout 90 $G/cuda/specdeck bench --device cuda --model-path $M8 --prompts $R/prompt8.jsonl --max-new-tokens 128 --json > $R/b1-8b.json 2> $R/b1-8b.err
step b1-8b $?
cat $R/calls.log; grep -h "FAIL\|ops vs\|GB/s\|dsv3\|kimi" $R/checks.out | head -40
for f in $R/demo-*.json $R/fp8-*.json $R/b1-8b.json; do echo "$f: $(head -c 4000 $f | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"mean_accept_length":[0-9.]*\|"identical[a-z_]*":[a-z0-9.]*\|"tokens_per_s":[0-9.]*\|"output_tokens_per_s":[0-9.]*\|"ttft_ms":{[^}]*}\|"itl_ms":{[^}]*}' | tr '\n' ' ')"; done
python3 - <<PY
import json
for v in ["b", "a"]:
    try:
        print(v, "b1 token_ids", json.load(open("$R/fp8-b1-%s.json" % v))["token_ids"][0][:12])
    except Exception as e:
        print(v, "no tokens", e)
PY
cd $OUT && tar czf r.tgz r && rm -rf r
