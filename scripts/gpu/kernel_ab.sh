#!/usr/bin/env bash
# One build against kernel variants of itself on the DeepSeek-V3 FP8 shape, in one call: the
# variants are folders of kernel files that stand in for the embedded ones
# (SPECDECK_KERNEL_DIR, src/knobs.rs), so they need no build of their own, or of another
# build's `specdeck` (a base to compare with). First the build's
# checks (conformance, the DeepSeek logits in both modes), then batch 1 by default and in
# deterministic mode for the build and each variant, Nsight Compute's sections (throughput,
# memory, warp stalls, occupancy) over 2 FP8 launches of an eager decode of the build in both
# modes, last concurrency 32 for the build and each variant. Each step's rc and time go to
# $OUT/r/calls.log and everything so far to $OUT/r.tgz, so a call cut short brings back
# what ran.
#
# usage (from the repository root on the GPU machine; testdata/ may be left out of the call):
#   BIN=path/to/specdeck DEEPSEEK=dir VARIANTS="name=dir ..." bash scripts/gpu/kernel_ab.sh
# DEEPSEEK: the fixtures of testdata/deepseek; CHECK_VARIANTS=1 also checks each variant;
# DET_VARIANTS=0 times the variants by default only; NCU_LAUNCHES=0 leaves the profile out;
# C32="build name ..." limits the concurrency-32 runs to those.
set -u
BIN=${BIN:?BIN must name the specdeck binary}; D=${DEEPSEEK:?}
R=${OUT:?}/r; mkdir -p "$R"; T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx-kernel-ab
step() { echo "$1 rc=$2 s=$(( $(date +%s) - T ))" >> "$R/calls.log"; (cd "$OUT" && tar czf r.tgz r); }
source scripts/gpu/variants.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$R/gpu.txt"
checks() {
    timeout 150 "$RUN_BIN" cuda-check --out "$R/checks-$1" --sections conformance,deepseek-logits,deepseek-logits-deterministic \
        --deepseek-models "$D" > "$R/checks-$1.out" 2> "$R/checks-$1.err"
}
with build checks build; step checks-build $?
M=/tmp/specdeck-dsv3-fp8
[ -f "$M/config.json" ] || PYTHONPATH=$PWD/scripts/gpu timeout 150 python3 scripts/gpu/write_dsv3_fp8.py $M --layers 3 > "$R/write-fp8.out" 2>&1
step write-fp8 $?
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(32)]' > "$R/prompts32.jsonl"
head -4 "$R/prompts32.jsonl" > "$R/prompts4.jsonl"; head -1 "$R/prompts32.jsonl" > "$R/prompts1.jsonl"
bench() {
    local tag=$1 prompts=$2; shift 2
    timeout 100 "$RUN_BIN" bench --device cuda --model-path $M --prompts "$R/$prompts" --max-new-tokens 32 --json "$@" \
        > "$R/$tag.json" 2> "$R/$tag.err"
}
for n in "${NAMES[@]}"; do
    with "$n" bench "b1-$n" prompts4.jsonl; step "b1-$n" $?
    if [ "$n" = build ] || [ "${DET_VARIANTS:-1}" = 1 ]; then
        with "$n" bench "b1-$n-det" prompts4.jsonl --enable-deterministic-inference; step "b1-$n-det" $?
    fi
done
if [ "${CHECK_VARIANTS:-0}" = 1 ]; then
    for n in "${NAMES[@]:1}"; do with "$n" checks "$n"; step "checks-$n" $?; done
fi
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$NCU" ] && [ "${NCU_LAUNCHES:-2}" != 0 ]; then
    # Launches from the middle of a 16-token decode (the warmup's and the prefill's FP8
    # launches come first and are more than run 34 counted: run 36's skip of 29 landed in the
    # prefill's experts). The raw page keeps every metric the sections collect, the
    # warp-stall reasons among them (the details page keeps only their sum), and takes about
    # 70 s a launch of these sizes: two fit the 150 s. A profile cut short leaves its target
    # holding the GPU: free_gpu clears it before the next step.
    for mode in default det; do
        extra=(); [ "$mode" = det ] && extra=(--enable-deterministic-inference)
        timeout -k 5 150 "$NCU" --clock-control none --kernel-name regex:"linear_fp8|gemv_fp8|moe_(gate_up|down)_fp8" \
            --launch-skip 150 --launch-count "${NCU_LAUNCHES:-2}" --section SpeedOfLight --section MemoryWorkloadAnalysis \
            --section WarpStateStats --section Occupancy --section LaunchStats --csv --page raw \
            "$BIN" bench --device cuda --model-path $M --prompts "$R/prompts1.jsonl" --json --max-new-tokens 16 \
            --cuda-graph-max-bs 0 "${extra[@]}" > "$R/ncu-$mode.csv" 2> "$R/ncu-$mode.err"
        step "ncu-$mode" $?
        free_gpu
    done
fi
for n in ${C32:-${NAMES[@]}}; do
    with "$n" bench "c32-$n" prompts32.jsonl --concurrency 32; step "c32-$n" $?
done
cat "$R/calls.log"; tail -3 "$R"/checks-*.out
python3 scripts/gpu/bench_lines.py "$R" '[bc]*.json'
cd "$OUT" && tar czf r.tgz r && rm -rf r
