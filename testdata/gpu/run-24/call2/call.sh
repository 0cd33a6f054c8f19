#!/usr/bin/env bash
# One-off call 2 of run 24: stacked q/k/v and gate/up weights (one cuBLAS launch each, split
# and RoPE in one kernel, bf16 operands written by the norm and the activation), the
# chunked-prefill default by GPU memory (8192 here): checks, batch-1, bandwidth, serving.sh
# with the transformers reference, and c64 again at the old 512 chunk.
set -u
H=$(cd "$(dirname "$0")" && pwd)
R=$OUT/r; mkdir -p $R
export SPECDECK_PTX_CACHE=$R/ptx-cache
T=$(date +%s)
timeout 150 $H/specdeck cuda-check --out $R/checks --sections conformance,graphs,model-logits,speculative-greedy >$R/checks.out 2>$R/checks.err
echo "checks rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || python3 $H/write_llama8b.py $M > $R/write8b.log 2>&1
echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' > $R/p8.jsonl
timeout 60 $H/specdeck bench --device cuda --model-path $M --prompts $R/p8.jsonl --max-new-tokens 128 --json > $R/b1-1.out 2> $R/b1-1.err
echo "batch1 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
timeout 60 $H/specdeck cuda-check --out $R/bw --sections bandwidth > $R/bw.out 2>&1
echo "bw rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
OUT=$R/serving SPECDECK_GPU_BUDGET_S=400 bash $H/serving.sh > $R/serving.log 2>&1
echo "serving s=$(( $(date +%s) - T ))" >> $R/calls.log
timeout 90 $H/specdeck bench --device cuda --model-path $M --prompts $R/serving/prompts-c64.jsonl --max-new-tokens 256 --concurrency 64 --chunked-prefill-size 512 --json > $R/c64-chunk512.out 2> $R/c64-chunk512.err
echo "c64-512 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
rm -rf $R/ptx-cache $R/serving/ptx-cache $R/serving/prompts*
cd $OUT && tar czf r.tgz r && rm -rf r/serving/hf-batch64.err
cat $R/calls.log; grep -h "PASS\|FAIL" $R/checks.out | cut -c1-110; grep -h "FAIL\|fail" $R/checks.out | head -20; cat $R/serving/steps.log
for f in $R/serving/serve-c*.out $R/serving/http-c32.out $R/serving/long-32k.out $R/b1-*.out $R/c64-chunk512.out; do echo "$f: $(head -c 1500 $f | tr -d '\n' | grep -o '"seconds":[0-9.]*\|"output_tokens_per_s":[0-9.]*\|"decode_tokens_per_s":[0-9.]*\|"itl_ms":{[^}]*}\|"ttft_ms":{[^}]*}\|"prefill_ms_median":[0-9.]*' | tr '\n' ' ')"; done
grep -h "GB/s" $R/bw.out | head -3
tail -c 1200 $R/serving/hf-batch64.out
