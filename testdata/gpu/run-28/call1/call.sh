#!/usr/bin/env bash
# Run 28, call 1: the stored-weight kernels with four chunks of a row in flight a lane (the
# experts' gate and up rows too, two rows a warp together) and one
# output row a warp (7dd9adb); the MoE router's product with x's f32 values kept whole at
# prefill sizes (matmul_f32_inputs); deterministic mode's skinny launches in groups of 8 rows
# (the gemm section's grouped bits and its timings at 16 and 64 rows; invariance.sh). Then the
# demo pair, the DeepSeek-V3 FP8 shape at batch 1 (as stored and dequantized at load) and 32. The results are re-archived after each
# step, so that a call cut off by its limit still brings back what it finished.
set -u
G=$(cd "$(dirname "$0")" && pwd)
H=$G/cuda
R=$OUT/r; mkdir -p $R
T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx
step() { echo "$1 rc=$2 s=$(( $(date +%s) - T ))" >> $R/calls.log; (cd $OUT && tar czf r.tgz r); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
timeout 240 $H/specdeck cuda-check --out $R/checks --sections conformance,graphs,gemm,deepseek-logits,bandwidth --deepseek-models $G/deepseek >$R/checks.out 2>$R/checks.err
step checks $?
mkdir -p /tmp/home
HOME=/tmp/home timeout 60 $H/specdeck </dev/null > $R/demo-extract.out 2>&1
DEMO=$(ls -d /tmp/home/.cache/specdeck/demo-* | head -1)
timeout 120 $H/specdeck bench --device cuda --model-path "$DEMO/target" --speculative-draft-model-path "$DEMO/draft" \
  --speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
  --context-length 131072 --prompts $G/deepseek/heldout_prompts.jsonl --max-new-tokens 64 --compare-target-only --json > $R/demo.json 2> $R/demo.err
step demo $?
M=/tmp/specdeck-dsv3-fp8
[ -f "$M/config.json" ] || timeout 150 python3 $H/write_dsv3_fp8.py $M --layers 3 > $R/write-fp8.out 2>&1
step write-fp8 $?
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(32)]' > $R/prompts32.jsonl
head -4 $R/prompts32.jsonl > $R/prompts4.jsonl
timeout 120 $H/specdeck bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json > $R/fp8-b1.json 2> $R/fp8-b1.err
step fp8-b1 $?
SPECDECK_STORED_EXPERTS=0 timeout 120 $H/specdeck bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json > $R/fp8-b1-dequant.json 2> $R/fp8-b1-dequant.err
step fp8-b1-dequant $?
timeout 90 $H/specdeck bench --device cuda --model-path $M --prompts $R/prompts32.jsonl --max-new-tokens 32 --concurrency 32 --json > $R/fp8-c32.json 2> $R/fp8-c32.err
step fp8-c32 $?
rm -rf $M
timeout 200 bash $H/invariance.sh > $R/invariance.out 2>&1
rc=$?; mkdir -p $R/inv && cp /tmp/inv/*.json /tmp/inv/*.err /tmp/inv/summary.txt $R/inv/ 2>/dev/null
step invariance $rc

cat $R/calls.log; cat $R/inv/summary.txt; grep -h "FAIL" $R/checks.out | head -20; grep -c PASS $R/checks.out
grep -h " 16 row(s)\| 64 row(s)\|bits\|dsv3\|kimi\|GB/s" $R/checks.out | head -50
for f in $R/inv/c16-det.json; do echo "$f: $(head -c 1500 $f | tr -d '\n' | grep -o '"seconds":[0-9.]*\|"output_tokens_per_s":[0-9.]*\|"decode_tokens_per_s":[0-9.]*\|"itl_ms":{[^}]*}\|"prefill_ms_median":[0-9.]*' | tr '\n' ' ')"; done
for f in $R/demo.json $R/fp8-*.json; do echo "$f: $(head -c 4000 $f | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"mean_accept_length":[0-9.]*\|"identical[a-z_]*":[a-z0-9.]*\|"tokens_per_s":[0-9.]*\|"target_weight_bytes":[0-9]*\|"output_tokens_per_s":[0-9.]*' | tr '\n' ' ')"; done
tail -3 $R/fp8-b1.err
cd $OUT && tar czf r.tgz r && rm -rf r
