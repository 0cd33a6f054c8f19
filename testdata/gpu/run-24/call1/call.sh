#!/usr/bin/env bash
# One-off call 1 of run 24: where a c64 serving run spends its GPU time (prefill and decode
# steps), and the c64 bench at chunked-prefill sizes 512 (default), 2048, 4096 and 8192.
set -u
H=$(cd "$(dirname "$0")" && pwd)
R=$OUT/r; mkdir -p $R
export SPECDECK_PTX_CACHE=$R/ptx-cache
T=$(date +%s)
{ ls /usr/local/cuda/bin; command -v nsys; ls /opt/nvidia 2>/dev/null; ls /usr/local/cuda/ 2>/dev/null; nvidia-smi; } > $R/tools.txt 2>&1
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || python3 $H/write_llama8b.py $M > $R/write8b.log 2>&1
echo "write rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
source $H/step.sh
prompts 64 512 > $R/p64.jsonl
for c in 512 2048 4096 8192; do
  timeout 90 $H/specdeck bench --device cuda --model-path $M --prompts $R/p64.jsonl --max-new-tokens 256 --concurrency 64 --chunked-prefill-size $c --json > $R/c64-chunk$c.out 2> $R/c64-chunk$c.err
  echo "chunk$c rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
done
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  timeout 150 $NSYS profile -o $R/c64 --force-overwrite true -t cuda --cuda-graph-trace node $H/specdeck bench --device cuda --model-path $M --prompts $R/p64.jsonl --max-new-tokens 256 --concurrency 64 --json > $R/nsys-c64.out 2> $R/nsys-c64.err
  echo "nsys rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
  timeout 120 $NSYS stats --report cuda_gpu_kern_sum --format csv -o $R/kern $R/c64.nsys-rep > /dev/null 2>>$R/nsys-c64.err
  timeout 120 $NSYS stats --report cuda_gpu_trace --format csv -o $R/trace $R/c64.nsys-rep > /dev/null 2>>$R/nsys-c64.err
  gzip -f $R/trace*.csv; rm -f $R/c64.nsys-rep $R/c64.sqlite
  echo "stats s=$(( $(date +%s) - T ))" >> $R/calls.log
fi
rm -rf $R/ptx-cache
cat $R/calls.log
for f in $R/c64-chunk*.out $R/nsys-c64.out; do echo "$f: $(head -c 700 $f | grep -o '"seconds":[0-9.]*\|"output_tokens_per_s":[0-9.]*\|"itl_ms":{[^}]*}\|"ttft_ms":{[^}]*}\|"step_ms":{[^}]*}' | tr '\n' ' ')"; done
head -c 3000 $R/kern*.csv 2>/dev/null
grep -i nsys $R/tools.txt
ls -la $R
