#!/usr/bin/env bash
# One-off call 5 of run 23 (the shared-memory allowance set at a kernel's first large launch):
# checks, serving.sh with the transformers reference at batch 64, batch-1 decode, bandwidth.
set -u
H=$(cd "$(dirname "$0")" && pwd)
R=$OUT/r; mkdir -p $R
export SPECDECK_PTX_CACHE=$R/ptx-cache
T=$(date +%s)
timeout 120 $H/specdeck cuda-check --out $R/checks --sections conformance,graphs,model-logits,speculative-greedy >$R/checks.out 2>$R/checks.err
echo "checks rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || python3 $H/write_llama8b.py $M > $R/write8b.log 2>&1
echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' > $R/p8.jsonl
timeout 60 $H/specdeck bench --device cuda --model-path $M --prompts $R/p8.jsonl --max-new-tokens 128 --json > $R/b1-1.out 2> $R/b1-1.err
echo "batch1 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
timeout 60 $H/specdeck cuda-check --out $R/bw --sections bandwidth > $R/bw.out 2>&1
echo "bw rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
OUT=$R/serving SPECDECK_GPU_BUDGET_S=380 bash $H/serving.sh > $R/serving.log 2>&1
echo "serving s=$(( $(date +%s) - T ))" >> $R/calls.log
rm -rf $R/ptx-cache $R/serving/ptx-cache $R/serving/prompts*
cd $OUT && tar czf r.tgz r
cat $R/calls.log; grep -h "PASS\|FAIL" $R/checks.out | cut -c1-110; cat $R/serving/steps.log
for f in $R/serving/serve-c*.out $R/serving/http-c32.out $R/serving/long-32k.out $R/b1-*.out; do echo "$f: $(head -c 1500 $f | tr -d '\n' | grep -o '"output_tokens_per_s":[0-9.]*\|"decode_tokens_per_s":[0-9.]*\|"itl_ms":{[^}]*}\|"ttft_ms":{[^}]*}\|"prefill_ms_median":[0-9.]*' | tr '\n' ' ')"; done
grep -h "GB/s" $R/bw.out | head -3
tail -c 1500 $R/serving/hf-batch64.out
