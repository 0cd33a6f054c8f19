#!/usr/bin/env bash
# One-off call 2 of run 21: checks, serving figures (no transformers), the 32K prefill A/B and its attention kernel under ncu.
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
P=$R/serving/prompts-32k.jsonl
SPECDECK_SKIP_KERNELS=prefill_attention timeout 60 $H/specdeck bench --device cuda --model-path $M --prompts $P --max-new-tokens 4 --json > $R/p32k-noattn.out 2>&1
timeout 60 $H/specdeck bench --device cuda --model-path $M --prompts $P --max-new-tokens 4 --json > $R/p32k.out 2>&1
echo "ab s=$(( $(date +%s) - T ))" >> $R/calls.log
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
timeout 150 $NCU --clock-control none --kernel-name regex:prefill_attention --launch-skip 1500 --launch-count 3 --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,smsp__inst_executed.sum $H/specdeck bench --device cuda --model-path $M --prompts $P --max-new-tokens 2 --json > $R/ncu-prefill.out 2>&1
echo "ncu s=$(( $(date +%s) - T ))" >> $R/calls.log
echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' > $R/p8.jsonl
timeout 60 $H/specdeck bench --device cuda --model-path $M --prompts $R/p8.jsonl --max-new-tokens 128 --json > $R/b1-1.out 2> $R/b1-1.err
echo "batch1 s=$(( $(date +%s) - T ))" >> $R/calls.log
rm -rf $R/ptx-cache $R/serving/ptx-cache $R/serving/prompts*
cd $OUT && tar czf r.tgz r
cat $R/calls.log; grep -h "PASS\|FAIL" $R/checks.out | cut -c1-110; cat $R/serving/steps.log
for f in $R/serving/serve-c*.out $R/serving/http-c32.out $R/serving/long-32k.out $R/b1-*.out; do echo "$f: $(head -c 1200 $f | tr -d '\n' | grep -o '"output_tokens_per_s":[0-9.]*\|"decode_tokens_per_s":[0-9.]*\|"itl_ms":{[^}]*}\|"ttft_ms":{[^}]*}\|"step_ms":{[^}]*}\|"prefill_ms_median":[0-9.]*' | tr '\n' ' ')"; done
for f in $R/p32k-noattn.out $R/p32k.out; do echo "$f: $(grep -o '"prefill_ms_median":[0-9.]*' $f)"; done
grep -v "^==PROF==" $R/ncu-prefill.out | grep "prefill_attention" | cut -c1-400 | head -20; tail -3 $R/ncu-prefill.out
