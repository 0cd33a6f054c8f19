#!/usr/bin/env bash
# One-off call 3 of run 23 (tensor-core step attention): checks, serving figures, batch-1, bandwidth; the
# rewritten prefill attention under ncu over a small pool.
set -u
H=$(cd "$(dirname "$0")" && pwd)
R=$OUT/r; mkdir -p $R
export SPECDECK_PTX_CACHE=$R/ptx-cache
T=$(date +%s)
timeout 150 $H/specdeck cuda-check --out $R/checks --sections conformance,graphs,model-logits,speculative-greedy >$R/checks.out 2>$R/checks.err
echo "checks rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
OUT=$R/serving SPECDECK_SERVING_HF=0 SPECDECK_GPU_BUDGET_S=300 bash $H/serving.sh > $R/serving.log 2>&1
echo "serving s=$(( $(date +%s) - T ))" >> $R/calls.log
M=/tmp/specdeck-llama8b
echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' > $R/p8.jsonl
timeout 60 $H/specdeck bench --device cuda --model-path $M --prompts $R/p8.jsonl --max-new-tokens 128 --json > $R/b1-1.out 2> $R/b1-1.err
echo "batch1 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
timeout 60 $H/specdeck cuda-check --out $R/bw --sections bandwidth > $R/bw.out 2>&1
echo "bw rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
source "$H/step.sh"
prompts 64 512 > $R/p64.jsonl
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
timeout -k 5 120 $NCU --clock-control none --kernel-name regex:paged_attention_tf32 --launch-skip 3000 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  $H/specdeck bench --device cuda --model-path $M --prompts $R/p64.jsonl --max-new-tokens 64 --concurrency 64 --cuda-graph-max-bs 0 \
  --max-total-tokens 51200 --context-length 1024 --json > $R/ncu-paged.out 2>&1
echo "ncu rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
pkill -9 -f "specdeck bench" 2>/dev/null
rm -rf $R/ptx-cache $R/serving/ptx-cache $R/serving/prompts* $R/p64.jsonl
cd $OUT && tar czf r.tgz r
cat $R/calls.log; grep -h "PASS\|FAIL" $R/checks.out | cut -c1-110; cat $R/serving/steps.log
for f in $R/serving/serve-c*.out $R/serving/http-c32.out $R/serving/long-32k.out $R/b1-*.out; do echo "$f: $(head -c 1500 $f | tr -d '\n' | grep -o '"output_tokens_per_s":[0-9.]*\|"decode_tokens_per_s":[0-9.]*\|"itl_ms":{[^}]*}\|"ttft_ms":{[^}]*}\|"step_ms":{[^}]*}\|"prefill_ms_median":[0-9.]*' | tr '\n' ' ')"; done
grep -h "GB/s" $R/bw.out | head -3
grep -v "^==PROF==" $R/ncu-paged.out | grep -i "duration\|registers\|achieved occupancy\|theoretical occ\|stall\|issued\|throughput" | head -30
