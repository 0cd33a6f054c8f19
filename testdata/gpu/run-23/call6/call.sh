#!/usr/bin/env bash
# One-off call 6 of run 23 (the tensor-core kernels sharing MmaRows, the split merge shared):
# checks, c64, the 32K prompt and batch-1, to see the review kept the bits' rules and the figures.
set -u
H=$(cd "$(dirname "$0")" && pwd)
R=$OUT/r; mkdir -p $R
export SPECDECK_PTX_CACHE=$R/ptx-cache
T=$(date +%s)
timeout 100 $H/specdeck cuda-check --out $R/checks --sections conformance,graphs,model-logits,speculative-greedy >$R/checks.out 2>$R/checks.err
echo "checks rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || python3 $H/write_llama8b.py $M > $R/write8b.log 2>&1
source "$H/step.sh"
prompts 64 512 > $R/p64.jsonl; prompts 1 32000 > $R/p32k.jsonl
echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' > $R/p8.jsonl
timeout 40 $H/specdeck bench --device cuda --model-path $M --prompts $R/p64.jsonl --max-new-tokens 256 --concurrency 64 --json > $R/serve-c64.out 2> $R/serve-c64.err
timeout 40 $H/specdeck bench --device cuda --model-path $M --prompts $R/p32k.jsonl --max-new-tokens 64 --json > $R/long-32k.out 2> $R/long-32k.err
timeout 40 $H/specdeck bench --device cuda --model-path $M --prompts $R/p8.jsonl --max-new-tokens 128 --json > $R/b1-1.out 2> $R/b1-1.err
echo "benches s=$(( $(date +%s) - T ))" >> $R/calls.log
rm -rf $R/ptx-cache $R/p64.jsonl $R/p32k.jsonl
cd $OUT && tar czf r.tgz r
cat $R/calls.log; grep -h "PASS\|FAIL" $R/checks.out | cut -c1-110
for f in $R/serve-c64.out $R/long-32k.out $R/b1-1.out; do echo "$f: $(head -c 1500 $f | tr -d '\n' | grep -o '"output_tokens_per_s":[0-9.]*\|"decode_tokens_per_s":[0-9.]*\|"itl_ms":{[^}]*}\|"prefill_ms_median":[0-9.]*' | tr '\n' ' ')"; done
