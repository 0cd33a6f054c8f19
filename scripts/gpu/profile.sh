#!/usr/bin/env bash
# Where a batch-1 decode step of the 8B shape spends its time, on the GPU machine: the
# skinny-matmul configurations timed (cuda-check gemm), decode and verify steps, then one
# eager decode run under Nsight Compute (per-kernel duration, DRAM bytes and throughput,
# occupancy) and, when nsys is there, a CUDA-graph run under Nsight Systems (the step's
# timeline, gaps between kernels included). Results under $OUT.
#
# SPECDECK_PROFILE_SHAPE=qwen0.5b (or qwen1.5b) profiles a random checkpoint of that shape
# instead (a 160-token prompt, so attention reads a HumanEval-sized cache), without the
# cuda-check part.
#
# usage (from the repository root on the GPU machine):  bash .gpu/cuda/profile.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$HERE/specdeck"
OUT="${OUT:-/tmp/specdeck-profile}"
. "$HERE/random_model.sh"
if [ "$SHAPE" = llama8b ]; then
    timeout 120 "$BIN" cuda-check --out "$OUT/gemm" --large-model "$MODEL" --sections bandwidth,gemm,large-model-steps \
        >"$OUT/gemm.out" 2>"$OUT/gemm.err"
    echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' >"$OUT/prompt.jsonl"
else
    echo "{\"prompt\": \"$(seq 3 162 | sed 's/^/w/' | paste -sd' ')\"}" >"$OUT/prompt.jsonl"
fi
# The engine's own decode rate, with CUDA graphs, with and without programmatic dependent launch.
for pdl in 1 0; do
    SPECDECK_PDL=$pdl timeout 60 "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompt.jsonl" --json \
        --max-new-tokens 128 >"$OUT/engine-pdl$pdl.out" 2>"$OUT/engine-pdl$pdl.err"
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$NCU" ]; then
    # Skip the warm-up and the first tokens; take one whole decode step (about 300 kernels).
    timeout 240 "$NCU" --clock-control none --launch-skip 3000 --launch-count 300 --csv \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__occupancy_limit_registers,sm__warps_active.avg.pct_of_peak_sustained_active \
        "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompt.jsonl" --json --max-new-tokens 24 \
        --cuda-graph-max-bs 0 >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
    python3 "$HERE/ncu_summary.py" "$OUT/ncu.csv" >"$OUT/ncu-summary.txt" 2>&1
fi
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n 1)
if [ -n "$NSYS" ]; then
    timeout 120 "$NSYS" profile -t cuda --cuda-graph-trace=node -o "$OUT/decode" -f true \
        "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompt.jsonl" --json --max-new-tokens 64 \
        >"$OUT/nsys.out" 2>"$OUT/nsys.err"
    timeout 60 "$NSYS" stats --report cuda_gpu_trace --format csv -o "$OUT/trace" "$OUT/decode.nsys-rep" >/dev/null 2>&1
    rm -f "$OUT/decode.nsys-rep" "$OUT/decode.sqlite"
fi
echo "ncu: ${NCU:-absent}; nsys: ${NSYS:-absent}"
for pdl in 1 0; do echo "engine decode tok/s, pdl $pdl: $(grep -o '"decode_tokens_per_s":[0-9.]*' "$OUT/engine-pdl$pdl.out")"; done
[ -f "$OUT/gemm.out" ] && grep -E "matmul|decode|verify|floor" "$OUT/gemm.out"
