# Run 38, the call after call 2 (any GPU, as long as the budget allows; what ran comes back if
# cut short). main = w5 (main 44ba97a's build); seg = w6 (branch fp8-segments: stored FP8
# weights of one x share a launch, up to 4: q_a_proj with kv_a_proj's two parts, a shared
# expert's or layer 0's gate with its up), and variants of main's kernels/gemv.cu that give
# the same bits (halfint, coopx, both; see .gpu/fx.sh). DeepSeek-V3 FP8 (3 layers): batch 1
# with tokens compared; seg's checks; concurrency 32; Nsight Compute's kernel durations.
# carry [".gpu/w5.tar.xz", ".gpu/w6.tar.xz", ".gpu/fx", ".gpu/deepseek", ".gpu/seg.sh"]; assets/ and testdata/ moved out.
(cd /tmp && for t in w5 w6; do tar xJf $OLDPWD/.gpu/$t.tar.xz; done)
set -u
MAIN=/tmp/w5/bin/specdeck; SEG=/tmp/w6/bin/specdeck; D=.gpu/deepseek
R=$OUT/r; mkdir -p $R; T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx-seg
step() { echo "$1 rc=$2 s=$(($(date +%s) - T))" >>"$R/calls.log"; (cd "$OUT" && tar czf r.tgz r); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$R/gpu.txt"
M=/tmp/specdeck-dsv3-fp8
PYTHONPATH=$PWD/scripts/gpu timeout 150 python3 scripts/gpu/write_dsv3_fp8.py $M --layers 3 >"$R/write-fp8.out" 2>&1; step write-fp8 $?
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(32)]' >"$R/prompts32.jsonl"
head -4 "$R/prompts32.jsonl" >"$R/prompts4.jsonl"; head -1 "$R/prompts32.jsonl" >"$R/prompts1.jsonl"
# bench TAG BIN KERNEL_DIR PROMPTS [ARGS...]
bench() {
    local tag=$1 bin=$2 dir=$3 p=$4; shift 4
    env ${dir:+SPECDECK_KERNEL_DIR=$dir} timeout -k 5 100 "$bin" bench --device cuda --model-path $M --prompts "$R/$p" --max-new-tokens 32 --json "$@" >"$R/$tag.json" 2>"$R/$tag.err"
    step "$tag" $?
}
bench b1-main $MAIN "" prompts4.jsonl
bench b1-seg $SEG "" prompts4.jsonl
timeout 150 $SEG cuda-check --out $R/checks-seg --sections conformance,deepseek-logits,deepseek-logits-deterministic --deepseek-models $D >$R/checks-seg.out 2>$R/checks-seg.err; step checks-seg $?
for v in halfint coopx both; do bench b1-$v $MAIN .gpu/fx/$v prompts4.jsonl; done
bench b1-seg-2 $SEG "" prompts4.jsonl
bench b1-main-2 $MAIN "" prompts4.jsonl
bench c32-main $MAIN "" prompts32.jsonl --concurrency 32
bench c32-seg $SEG "" prompts32.jsonl --concurrency 32
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
for b in seg main; do
    bin=$SEG; [ $b = main ] && bin=$MAIN
    timeout -k 5 60 "$NCU" --clock-control none --launch-skip 300 --launch-count 60 --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size --csv \
        "$bin" bench --device cuda --model-path $M --prompts "$R/prompts1.jsonl" --json --max-new-tokens 16 --cuda-graph-max-bs 0 >"$R/ncu-$b.csv" 2>"$R/ncu-$b.err"
    step ncu-$b $?
    nvidia-smi --query-compute-apps=pid --format=csv,noheader | xargs -r kill -9; sleep 2
done
cat "$R/calls.log"; tail -n 3 "$R"/checks-*.out
python3 scripts/gpu/bench_lines.py "$R"
cd "$OUT" && tar czf r.tgz r && rm -rf r
