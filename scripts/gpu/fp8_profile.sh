#!/usr/bin/env bash
# Why the stored FP8 kernels of a DeepSeek-V3 decode step read below the copy bandwidth
# (testdata/gpu/run-31/NOTES.md): Nsight Compute's sections (throughput, memory, warp stalls,
# occupancy, launch) over the FP8 kernels of one eager batch-1 step, the CUDA-core dense path
# (default mode) and the tensor-core one (`--enable-deterministic-inference`), then the whole
# step with CUDA graphs under Nsight Systems when it is there. Results under $OUT.
#
# usage (from the repository root on the GPU machine):
#   BIN=path/to/specdeck [MODEL=dir] bash scripts/gpu/fp8_profile.sh
set -u
BIN=${BIN:?BIN must name the specdeck binary}
OUT="${OUT:-/tmp/specdeck-fp8-profile}"
M="${MODEL:-/tmp/specdeck-dsv3-fp8}"
mkdir -p "$OUT"
[ -f "$M/config.json" ] || PYTHONPATH="$PWD/scripts/gpu" timeout 150 python3 scripts/gpu/write_dsv3_fp8.py "$M" --layers 3 >"$OUT/write.out" 2>&1
python3 -c 'import json, random; r = random.Random(0); print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))}))' >"$OUT/prompt.jsonl"
bench=("$BIN" bench --device cuda --model-path "$M" --prompts "$OUT/prompt.jsonl" --json)
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$NCU" ]; then
    # The prefill's 4 expert launches and the first step's 25 FP8 launches (12 attention
    # linears, the dense MLP's 3, 6 of the shared experts, 4 of the routed ones) are skipped;
    # the second step's 25 are profiled.
    for mode in default det; do
        extra=()
        [ "$mode" = det ] && extra=(--enable-deterministic-inference)
        timeout 240 "$NCU" --clock-control none --kernel-name regex:"linear_fp8|gemv_fp8|moe_(gate_up|down)_fp8" \
            --launch-skip 29 --launch-count 25 --section SpeedOfLight --section MemoryWorkloadAnalysis \
            --section WarpStateStats --section Occupancy --section LaunchStats --csv --page details \
            "${bench[@]}" --max-new-tokens 4 --cuda-graph-max-bs 0 "${extra[@]}" >"$OUT/ncu-$mode.csv" 2>"$OUT/ncu-$mode.err"
    done
fi
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n 1)
if [ -n "$NSYS" ]; then
    timeout 120 "$NSYS" profile --force-overwrite true -o "$OUT/step" --stats=true "${bench[@]}" --max-new-tokens 32 \
        >"$OUT/nsys.txt" 2>&1
fi
