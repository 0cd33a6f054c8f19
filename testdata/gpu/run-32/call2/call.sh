# Run 32, call 2 (same warm H100, 32 s): call 1's Nsight Compute step over the base build, so
# both builds' kernels are timed on one machine.   carry: [".gpu/deepseek"]
R=$OUT; M=/tmp/specdeck-dsv3-fp8
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(1)]' > $R/p1.jsonl
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu); export SPECDECK_PTX_CACHE=/tmp/ptx-dsv3-ab
timeout 100 $NCU --clock-control none --kernel-name-base demangled --kernel-name regex:"gemv_fp8|linear_fp8|moe_|head_matmul|gemv_t|mla_" \
    --launch-skip 60 --launch-count 80 --csv \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    /tmp/p/builds/base/specdeck bench --device cuda --model-path $M --prompts $R/p1.jsonl --json --max-new-tokens 8 --cuda-graph-max-bs 0 \
    > $R/ncu-base.csv 2> $R/ncu-base.err
python3 scripts/gpu/ncu_summary.py $R/ncu-base.csv > $R/ncu-base-summary.txt 2>&1
