#!/usr/bin/env bash
# Run 31, call 3: "all" (e7efcc1: dsv3-graphs + fp8-mma, kv_b's key half FP8 again, the
# CUDA-core linear_fp8 for steps of up to 8 rows outside deterministic mode) : the DeepSeek
# logits against the CPU, then DeepSeek-V3 FP8 (3 layers) batch 1 in default mode (dense
# linears on the CUDA cores) and deterministic mode (on the tensor cores) against main, and
# concurrency 32; last Nsight Compute over the FP8 kernels of a few eager batch-1 steps.
#   command: bash .gpu/next6.sh    carry: [".gpu/p4.tar.xz", ".gpu/next6.sh", ".gpu/deepseek"]
set -u
G=$(cd "$(dirname "$0")" && pwd)
[ -d /tmp/p4 ] || (cd /tmp && tar xJf $G/p4.tar.xz)
P=/tmp/p4; R=$OUT/r; mkdir -p $R; T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx-next
step() { echo "$1 rc=$2 s=$(( $(date +%s) - T ))" >> $R/calls.log; (cd $OUT && tar czf r.tgz r); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
timeout 100 $P/builds/all/specdeck cuda-check --out $R/checks-a --sections deepseek-logits --deepseek-models $G/deepseek > $R/checks-a.out 2> $R/checks-a.err
step checks-a $?
M=/tmp/specdeck-dsv3-fp8
[ -f "$M/config.json" ] || PYTHONPATH=$PWD/scripts/gpu timeout 150 python3 scripts/gpu/write_dsv3_fp8.py $M --layers 3 > $R/write-fp8.out 2>&1
step write-fp8 $?
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(32)]' > $R/prompts32.jsonl
head -4 $R/prompts32.jsonl > $R/prompts4.jsonl; head -1 $R/prompts32.jsonl > $R/prompts1.jsonl
b1() { timeout 100 $P/builds/$2/specdeck bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json "${@:3}" > $R/fp8-b1-$1.json 2> $R/fp8-b1-$1.err; step fp8-b1-$1 $?; }
b1 a all
b1 main main
b1 a-det all --enable-deterministic-inference
timeout 100 $P/builds/all/specdeck bench --device cuda --model-path $M --prompts $R/prompts32.jsonl --max-new-tokens 32 --concurrency 32 --json > $R/fp8-c32-all.json 2> $R/fp8-c32-all.err
step fp8-c32-all $?
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
for mode in default; do
  extra=(); [ $mode = det ] && extra=(--enable-deterministic-inference)
  timeout 100 "$NCU" --clock-control none --kernel-name-base demangled --kernel-name regex:"gemv_fp8|linear_fp8|moe_|head_matmul|gemv_t" --launch-skip 60 --launch-count 80 --csv \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    $P/builds/all/specdeck bench --device cuda --model-path $M --prompts $R/prompts1.jsonl --json --max-new-tokens 8 --cuda-graph-max-bs 0 "${extra[@]}" > $R/ncu-$mode.csv 2> $R/ncu-$mode.err
  step ncu-$mode $?
  python3 scripts/gpu/ncu_summary.py $R/ncu-$mode.csv > $R/ncu-$mode-summary.txt 2>&1
done
cat $R/calls.log; grep -h "dsv3-fp8\|FAIL" $R/checks-a.out; head -24 $R/ncu-default-summary.txt
python3 - $R <<'PY'
import json, sys
def last(p):
    try: return json.loads([l for l in open(p) if l.startswith("{")][-1])
    except Exception: return None
r = sys.argv[1]; a, m = last(f"{r}/fp8-b1-a.json"), last(f"{r}/fp8-b1-main.json")
if a and m: print("all tokens == main tokens:", a.get("outputs") == m.get("outputs"))
PY
for f in $R/fp8-*.json; do echo "$f: $(head -c 4000 $f | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"output_tokens_per_s":[0-9.]*' | paste -sd' ')"; done
cd $OUT && tar czf r.tgz r && rm -rf r
