#!/usr/bin/env bash
# One build against kernel variants of itself on the 8B shape's serving figures, in one call
# (issue 24): batch-1 decode (8-word prompt × 128), batch-1 decode at a 32K-token context,
# and concurrency 64 (512 random-token prompts × 256, EOS ignored) for the build and each
# variant, each with its tokens; then Nsight Compute over two attention launches of the 32K
# decode for each, concurrency 1 / 8 / 32 for the variant named by SERVE (the figures'
# build), and transformers' batched generate at batch 64 as the reference (HF=0 leaves it
# out). Each step's rc and time go to $OUT/r/calls.log and everything so far to $OUT/r.tgz, so
# a call cut short brings back what ran.
#
# usage (from the repository root on the GPU machine; testdata/ may be left out of the call):
#   BIN=path/to/specdeck VARIANTS="name=dir ..." [SERVE=name] [CHECK_VARIANTS=1 [DEEPSEEK=dir]] bash scripts/gpu/long_ab.sh
set -u
BIN=${BIN:?BIN must name the specdeck binary}
R=${OUT:?}/r
mkdir -p "$R"
T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx-long-ab
# step.sh for `prompts`; its `step` gives way to this script's.
source scripts/gpu/step.sh
step() { echo "$1 rc=$2 s=$(($(date +%s) - T))" >>"$R/calls.log"; (cd "$OUT" && tar czf r.tgz r); }
source scripts/gpu/variants.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$R/gpu.txt"
# CHECK_VARIANTS=1: each variant's conformance first, and the DeepSeek logits where DEEPSEEK
# names a copy of testdata/deepseek.
if [ "${CHECK_VARIANTS:-0}" = 1 ]; then
    checks() {
        local sections=conformance extra=()
        [ -n "${DEEPSEEK:-}" ] && sections=conformance,deepseek-logits && extra=(--deepseek-models "$DEEPSEEK")
        timeout 150 "$RUN_BIN" cuda-check --out "$R/checks-$1" --sections $sections "${extra[@]}" >"$R/checks-$1.out" 2>"$R/checks-$1.err"
    }
    for n in "${NAMES[@]:1}"; do
        with "$n" checks "$n"
        step "checks-$n" $?
    done
fi
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || timeout 150 python3 scripts/gpu/write_llama8b.py $M >"$R/write8b.out" 2>&1
step write8b $?
echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' >"$R/prompt8.jsonl"
prompts 1 32000 >"$R/prompts-32k.jsonl"
for c in 1 8 32 64; do prompts $((c < 4 ? 4 : c)) 512 >"$R/prompts-c$c.jsonl"; done
bench() {
    local tag=$1 limit=$2
    shift 2
    timeout -k 5 "$limit" "$RUN_BIN" bench --device cuda --model-path $M --json "$@" >"$R/$tag.json" 2>"$R/$tag.err"
}
for n in "${NAMES[@]}"; do
    with "$n" bench "b1-$n" 60 --prompts "$R/prompt8.jsonl" --max-new-tokens 128
    step "b1-$n" $?
    with "$n" bench "32k-$n" 90 --prompts "$R/prompts-32k.jsonl" --max-new-tokens 256
    step "32k-$n" $?
    with "$n" bench "c64-$n" 90 --prompts "$R/prompts-c64.jsonl" --max-new-tokens 256 --concurrency 64
    step "c64-$n" $?
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$NCU" ]; then
    # The 32K prompt's prefill uses the tiled kernels; batch 1 then decodes one sequence at
    # contiguous slots through the window kernel in blocks of two heads (attention_f32_p4_g2,
    # not a paged one: run 36), whose launches after the first step's 32 are profiled, from
    # eager steps (graphs off). The one-head kernel (attention_f32_p4) is the start-up's short
    # decode, which a profile of every attention_f32 launch caught instead (run 37).
    profile() {
        timeout -k 5 120 "$NCU" --clock-control none --kernel-name regex:"^attention_f32_p4_g2" --launch-skip 32 \
            --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
            --section Occupancy --section LaunchStats --csv --page raw \
            "$RUN_BIN" bench --device cuda --model-path $M --prompts "$R/prompts-32k.jsonl" --json --max-new-tokens 4 \
            --cuda-graph-max-bs 0 >"$R/ncu-32k-$1.csv" 2>"$R/ncu-32k-$1.err"
    }
    for n in "${NAMES[@]}"; do
        with "$n" profile "$n"
        step "ncu-32k-$n" $?
        free_gpu
    done
fi
SERVE=${SERVE:-build}
for c in 1 8 32; do
    with "$SERVE" bench "c$c-$SERVE" 90 --prompts "$R/prompts-c$c.jsonl" --max-new-tokens 256 --concurrency $c
    step "c$c-$SERVE" $?
done
if [ "${HF:-1}" = 1 ]; then
    (cd scripts/gpu && timeout -k 5 240 python3 hf_batched.py $M --batch 64 --prompt-len 512 --new-tokens 256 --budget-s 220) \
        >"$R/hf-batch64.json" 2>"$R/hf-batch64.err"
    step hf-batch64 $?
fi
cat "$R/calls.log"
tail -n 3 "$R"/checks-*.out 2>/dev/null
python3 scripts/gpu/bench_lines.py "$R"
cd "$OUT" && tar czf r.tgz r && rm -rf r
