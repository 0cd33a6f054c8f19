#!/usr/bin/env bash
# Two builds on the DeepSeek-V3 family in one call, on one GPU: the candidate's checks
# (conformance, the DeepSeek logits against the host reference by default and in
# deterministic mode), then the DeepSeek-V3 shape in FP8 as stored (3 layers, real per-layer
# sizes) at batch 1 for both builds (the candidate also with its routed experts on the CUDA
# cores, SPECDECK_EXPERT_MMA=0, and in deterministic mode), concurrency 32 for both, Nsight
# Compute over one eager step of the candidate, last Kimi-K2.5's layout (INT4 experts) at
# batch 1 for both. Each step's rc and time go to $OUT/r/calls.log and everything so far to
# $OUT/r.tgz, so a call cut short still brings back what ran; the most telling steps come first.
#
# usage (from the repository root on the GPU machine; testdata/ may be left out of the call):
#   BUILDS=dir NEW=name BASE=name DEEPSEEK=dir bash scripts/gpu/dsv3_ab.sh
# BUILDS holds NAME/specdeck for both builds (scripts/gpu/README.md, "Several builds");
# DEEPSEEK the fixtures of testdata/deepseek.
set -u
B=${BUILDS:?BUILDS must hold NAME/specdeck}; NEW=${NEW:?}; BASE=${BASE:?}; D=${DEEPSEEK:?}
R=${OUT:?}/r; mkdir -p "$R"; T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx-dsv3-ab
step() { echo "$1 rc=$2 s=$(( $(date +%s) - T ))" >> "$R/calls.log"; (cd "$OUT" && tar czf r.tgz r); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$R/gpu.txt"
timeout 150 "$B/$NEW/specdeck" cuda-check --out "$R/checks" --sections conformance,deepseek-logits,deepseek-logits-deterministic \
    --deepseek-models "$D" > "$R/checks.out" 2> "$R/checks.err"
step checks $?
M=/tmp/specdeck-dsv3-fp8 K=/tmp/specdeck-kimi-int4
[ -f "$M/config.json" ] || PYTHONPATH=$PWD/scripts/gpu timeout 150 python3 scripts/gpu/write_dsv3_fp8.py $M --layers 3 > "$R/write-fp8.out" 2>&1
step write-fp8 $?
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(32)]' > "$R/prompts32.jsonl"
head -4 "$R/prompts32.jsonl" > "$R/prompts4.jsonl"; head -1 "$R/prompts32.jsonl" > "$R/prompts1.jsonl"
b1() {
    local tag=$1 build=$2 model=$3; shift 3
    timeout 100 "$B/$build/specdeck" bench --device cuda --model-path "$model" --prompts "$R/prompts4.jsonl" --max-new-tokens 32 --json "$@" \
        > "$R/b1-$tag.json" 2> "$R/b1-$tag.err"
    step "b1-$tag" $?
}
c32() {
    timeout 100 "$B/$1/specdeck" bench --device cuda --model-path $M --prompts "$R/prompts32.jsonl" --max-new-tokens 32 --concurrency 32 --json \
        > "$R/c32-$1.json" 2> "$R/c32-$1.err"
    step "c32-$1" $?
}
b1 fp8-new "$NEW" $M
b1 fp8-base "$BASE" $M
SPECDECK_EXPERT_MMA=0 b1 fp8-new-cc "$NEW" $M
b1 fp8-new-det "$NEW" $M --enable-deterministic-inference
c32 "$NEW"
c32 "$BASE"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$NCU" ]; then
    timeout 100 "$NCU" --clock-control none --kernel-name-base demangled --kernel-name regex:"gemv_fp8|linear_fp8|moe_|head_matmul|gemv_t|mla_" \
        --launch-skip 60 --launch-count 80 --csv \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
        "$B/$NEW/specdeck" bench --device cuda --model-path $M --prompts "$R/prompts1.jsonl" --json --max-new-tokens 8 --cuda-graph-max-bs 0 \
        > "$R/ncu-new.csv" 2> "$R/ncu-new.err"
    step ncu-new $?
    python3 scripts/gpu/ncu_summary.py "$R/ncu-new.csv" > "$R/ncu-new-summary.txt" 2>&1
fi
[ -f "$K/config.json" ] || PYTHONPATH=$PWD/scripts/gpu timeout 150 python3 scripts/gpu/write_dsv3_fp8.py $K --layers 3 --int4 > "$R/write-int4.out" 2>&1
step write-int4 $?
b1 int4-new "$NEW" $K
b1 int4-base "$BASE" $K
cat "$R/calls.log"; grep -h "FAIL\|dsv3-fp8\|kimi-int4" "$R/checks.out" | head -20; tail -5 "$R/checks.out"
[ -f "$R/ncu-new-summary.txt" ] && head -24 "$R/ncu-new-summary.txt"
python3 - "$R" <<'PY'
import json, sys
sys.path.insert(0, "scripts/gpu")
from summarize import last_json_line as last
r = sys.argv[1]
for a, b in [("b1-fp8-new", "b1-fp8-base"), ("b1-fp8-new", "b1-fp8-new-cc"), ("b1-fp8-new", "b1-fp8-new-det"), ("b1-int4-new", "b1-int4-base")]:
    x, y = last(f"{r}/{a}.json"), last(f"{r}/{b}.json")
    if not (x and y):
        print(a, "or", b, ": no result")
    elif "token_ids" not in x or "token_ids" not in y:
        print(a, "or", b, ": no token_ids in the bench JSON")
    else:
        print(a, "tokens ==", b, ":", x["token_ids"] == y["token_ids"])
PY
for f in "$R"/b1-*.json "$R"/c32-*.json; do
    echo "$f: $(head -c 4000 "$f" | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"output_tokens_per_s":[0-9.]*\|"ttft_ms_p50":[0-9.]*\|"itl_ms_p50":[0-9.]*' | paste -sd' ')"
done
cd "$OUT" && tar czf r.tgz r && rm -rf r
