#!/usr/bin/env bash
# Where a serving step of the 8B shape spends its GPU time: one bench at concurrency 64
# (512 random-token prompts, 256 out; the wall-clock ITL) and then the same under Nsight
# Compute, a whole decode step long after every sequence decodes (per-kernel duration and
# DRAM bytes; ncu_summary.py sums them by kernel), and one decode step at a 32K-token
# context.
# Comparing a step's summed kernel time with the ITL says whether the host or the GPU is
# the bound. Results under $OUT.
#
# usage (GPU machine, repository root):  bash .gpu/cuda/profile_serving.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$HERE/specdeck"
OUT="${OUT:-/tmp/specdeck-profile-serving}"
MODEL="${SPECDECK_8B_DIR:-/tmp/specdeck-llama8b}"
BUDGET_S="${SPECDECK_GPU_BUDGET_S:-560}"
export SPECDECK_PTX_CACHE="$OUT/ptx-cache"
mkdir -p "$OUT"
T0=$(date +%s)
source "$HERE/step.sh"
[ -f "$MODEL/model.safetensors.index.json" ] || step write8b 150 python3 "$HERE/write_llama8b.py" "$MODEL"
prompts 64 512 >"$OUT/prompts-c64.jsonl"
prompts 1 32000 >"$OUT/prompts-32k.jsonl"
step serve-c64 120 "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompts-c64.jsonl" \
    --max-new-tokens 256 --concurrency 64 --json
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
# 64 prefills of 512 tokens take about 70 steps of ~550 launches; then about 250 decode
# steps of about as many: 120000 is well into them.
step ncu-c64 200 "$NCU" --clock-control none --launch-skip 120000 --launch-count 600 --csv --metrics "$METRICS" \
    "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompts-c64.jsonl" \
    --max-new-tokens 256 --concurrency 64 --json
python3 "$HERE/ncu_summary.py" "$OUT/ncu-c64.out" >"$OUT/ncu-c64-summary.txt" 2>&1
# A 32000-token prompt prefills in 63 chunks of 512 (about 35000 launches).
step ncu-32k 200 "$NCU" --clock-control none --launch-skip 40000 --launch-count 600 --csv --metrics "$METRICS" \
    "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompts-32k.jsonl" --max-new-tokens 64 --json \
    --cuda-graph-max-bs 0
python3 "$HERE/ncu_summary.py" "$OUT/ncu-32k.out" >"$OUT/ncu-32k-summary.txt" 2>&1
head -n 30 "$OUT/ncu-c64-summary.txt" "$OUT/ncu-32k-summary.txt"
grep -o '"itl_ms":{[^}]*}' "$OUT/serve-c64.out"
cat "$OUT/steps.log"
