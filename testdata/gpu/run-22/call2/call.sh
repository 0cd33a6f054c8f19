#!/usr/bin/env bash
# One-off call 2 of run 22: the tensor-core prefill attention under Nsight Compute (an 8K prompt:
# sections for occupancy, stalls and memory), a c64 decode window eager under ncu (per-kernel
# time), and batch-1 decode.
set -u
H=$(cd "$(dirname "$0")" && pwd)
R=$OUT/r; mkdir -p $R
export SPECDECK_PTX_CACHE=$R/ptx-cache
T=$(date +%s)
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || python3 $H/write_llama8b.py $M > $R/write8b.log 2>&1
echo "write s=$(( $(date +%s) - T ))" >> $R/calls.log
source "$H/step.sh"
prompts 1 8000 > $R/p8k.jsonl
prompts 64 512 > $R/p64.jsonl
echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' > $R/p8.jsonl
timeout 60 $H/specdeck cuda-check --out $R/bw --sections bandwidth > $R/bw.out 2>&1
timeout 60 $H/specdeck bench --device cuda --model-path $M --prompts $R/p8.jsonl --max-new-tokens 128 --json > $R/b1-1.out 2> $R/b1-1.err
timeout 90 $H/specdeck bench --device cuda --model-path $M --prompts $R/p64.jsonl --max-new-tokens 256 --concurrency 64 --json > $R/serve-c64.out 2> $R/serve-c64.err
timeout 60 $H/specdeck bench --device cuda --model-path $M --prompts $R/p8k.jsonl --max-new-tokens 4 --json > $R/p8k.out 2>&1
echo "b1 s=$(( $(date +%s) - T ))" >> $R/calls.log
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
timeout -k 5 120 $NCU --clock-control none --kernel-name regex:prefill_attention_tf32 --launch-skip 300 --launch-count 2 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  $H/specdeck bench --device cuda --model-path $M --prompts $R/p8k.jsonl --max-new-tokens 2 --json > $R/ncu-prefill.out 2>&1
pkill -9 -f "specdeck bench" ; sleep 2
echo "ncu-prefill s=$(( $(date +%s) - T ))" >> $R/calls.log
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
timeout -k 5 200 $NCU --clock-control none --launch-skip 120000 --launch-count 600 --csv --metrics "$METRICS" \
    $H/specdeck bench --device cuda --model-path $M --prompts $R/p64.jsonl --max-new-tokens 256 --concurrency 64 --cuda-graph-max-bs 0 --json > $R/ncu-c64.out 2>&1
pkill -9 -f "specdeck bench" ; sleep 2
python3 $H/ncu_summary.py $R/ncu-c64.out > $R/ncu-c64-summary.txt 2>&1
echo "ncu-c64 s=$(( $(date +%s) - T ))" >> $R/calls.log
rm -rf $R/ptx-cache $R/p64.jsonl $R/p8k.jsonl
cd $OUT && tar czf r.tgz r
cat $R/calls.log
grep "bandwidth" $R/bw.out
for f in $R/b1-1.out $R/p8k.out $R/serve-c64.out; do echo "$f: $(head -c 1500 $f | grep -o '"decode_tokens_per_s":[0-9.]*\|"prefill_ms_median":[0-9.]*\|"output_tokens_per_s":[0-9.]*\|"itl_ms":{[^}]*}\|"step_ms":{[^}]*}' | tr '\n' ' ')"; done
grep -v "^==PROF==" $R/ncu-prefill.out | grep -i "duration\|registers\|occupancy\|achieved\|stall\|throughput\|Block Limit\|Warp Cycles" | head -60
head -40 $R/ncu-c64-summary.txt
