#!/usr/bin/env bash
# Run 29, call 1: the stored-weight kernels' weight loads streamed past L1 (ld_stream, so x
# keeps L1) and the dense FP8 linears' rows asked of L2 before the PDL wait; deterministic
# mode's skinny launches in bundles of 8 groups a block (W read once per 64 rows). Checks
# (conformance, gemm bits and timings, both DeepSeek logits sections), the demo pair,
# DeepSeek-V3 FP8 as stored at batch 1 and 32, invariance (deterministic vs default), then
# one eager batch-1 run under Nsight Compute (per-kernel time and DRAM rate). Results
# re-archived after each step.
set -u
G=$(cd "$(dirname "$0")" && pwd)
H=$G/cuda
R=$OUT/r; mkdir -p $R
T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx
step() { echo "$1 rc=$2 s=$(( $(date +%s) - T ))" >> $R/calls.log; (cd $OUT && tar czf r.tgz r); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
timeout 200 $H/specdeck cuda-check --out $R/checks --sections conformance,gemm,deepseek-logits,deepseek-logits-deterministic,bandwidth --deepseek-models $G/deepseek >$R/checks.out 2>$R/checks.err
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
head -1 $R/prompts32.jsonl > $R/prompts1.jsonl
timeout 120 $H/specdeck bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json > $R/fp8-b1.json 2> $R/fp8-b1.err
step fp8-b1 $?
timeout 90 $H/specdeck bench --device cuda --model-path $M --prompts $R/prompts32.jsonl --max-new-tokens 32 --concurrency 32 --json > $R/fp8-c32.json 2> $R/fp8-c32.err
step fp8-c32 $?
timeout 200 bash $H/invariance.sh > $R/invariance.out 2>&1
rc=$?; mkdir -p $R/inv && cp /tmp/inv/*.json /tmp/inv/*.err /tmp/inv/summary.txt $R/inv/ 2>/dev/null
step invariance $rc
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
timeout 170 $NCU --clock-control none --csv \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
  $H/specdeck bench --device cuda --model-path $M --prompts $R/prompts1.jsonl --max-new-tokens 3 --cuda-graph-max-bs 0 --json > $R/ncu.csv 2> $R/ncu.err
step ncu $?
python3 $H/ncu_summary.py $R/ncu.csv > $R/ncu-summary.txt 2>&1
gzip -f $R/ncu.csv
step summary 0
cat $R/calls.log; grep -h "FAIL" $R/checks.out | head -20; grep -c PASS $R/checks.out
grep -h " 16 row(s)\| 64 row(s)\|bits\|dsv3\|kimi\|GB/s" $R/checks.out | head -50
cat $R/inv/summary.txt
for f in $R/demo.json $R/fp8-*.json; do echo "$f: $(head -c 4000 $f | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"mean_accept_length":[0-9.]*\|"identical[a-z_]*":[a-z0-9.]*\|"tokens_per_s":[0-9.]*\|"target_weight_bytes":[0-9]*\|"output_tokens_per_s":[0-9.]*\|"ttft_ms":{[^}]*}\|"itl_ms":{[^}]*}' | tr '\n' ' ')"; done
head -40 $R/ncu-summary.txt
cd $OUT && tar czf r.tgz r && rm -rf r
