# Session 52, call A: batch-1 decode at a 32K context through each step attention: the window
# kernel (bench), the same with whole groups of contiguous keys visited without the queue
# (variant grp, bit-identical by construction), the paged CUDA-core kernel and the paged
# tensor-core kernel (--concurrency 1, SPECDECK_STEP_MMA=1); Nsight Compute over one window
# launch of the build, grp and pipe (grp's groups with each group's K loaded while the group
# before adds its V); pipe's conformance checks. w2 = main's kernels (d79e0db's build).
# carry [".gpu/w2.tar.xz", ".gpu/grp", ".gpu/pipe", ".gpu/a.sh"]; assets/ and testdata/ moved out.
(cd /tmp && tar xJf $OLDPWD/.gpu/w2.tar.xz)
set -u
BIN=/tmp/w2/bin/specdeck; VARIANTS="grp=.gpu/grp pipe=.gpu/pipe"
R=$OUT/r; mkdir -p $R; T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx-long-ab
source scripts/gpu/step.sh
step() { echo "$1 rc=$2 s=$(($(date +%s) - T))" >>"$R/calls.log"; (cd "$OUT" && tar czf r.tgz r); }
source scripts/gpu/variants.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$R/gpu.txt"
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || timeout 150 python3 scripts/gpu/write_llama8b.py $M >"$R/write8b.out" 2>&1
step write8b $?
prompts 1 32000 >"$R/p32k.jsonl"
b() { local tag=$1; shift; timeout -k 5 90 "$RUN_BIN" bench --device cuda --model-path $M --prompts $R/p32k.jsonl --json --max-new-tokens 256 "$@" >"$R/$tag.json" 2>"$R/$tag.err"; }
with build b window; step window $?
with grp b window-grp; step window-grp $?
with build b paged --concurrency 1; step paged $?
SPECDECK_STEP_MMA=1 with build b paged-mma --concurrency 1; step paged-mma $?
with pipe b window-pipe; step window-pipe $?
with grp b window-grp2; step window-grp2 $?
with pipe b window-pipe2; step window-pipe2 $?
with build b window2; step window2 $?
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
prof() {
    local tag=$1; shift
    timeout -k 5 100 "$NCU" --clock-control none --kernel-name regex:"^attention_f32" --launch-skip 40 --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
        --section ComputeWorkloadAnalysis --section InstructionStats \
        --csv --page raw "$RUN_BIN" bench --device cuda --model-path $M --prompts $R/p32k.jsonl --json --max-new-tokens 4 \
        --cuda-graph-max-bs 0 "$@" >"$R/ncu-$tag.csv" 2>"$R/ncu-$tag.err"
}
with build prof window; step ncu-window $?; free_gpu
with grp prof window-grp; step ncu-window-grp $?; free_gpu
with pipe prof window-pipe; step ncu-window-pipe $?; free_gpu
with pipe timeout 150 $BIN cuda-check --out $R/checks-pipe --sections conformance >$R/checks-pipe.out 2>$R/checks-pipe.err; step checks-pipe $?
tail -n 3 $R/checks-pipe.out
cat $R/calls.log
python3 - "$R" <<'PY'
import glob, json, os, sys
sys.path.insert(0, "scripts/gpu")
from summarize import last_json_line as last
for p in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    j = last(p)
    if j:
        keys = ("decode_tokens_per_s", "output_tokens_per_s", "itl_ms", "ttft_ms")
        print(os.path.basename(p), {k: j[k] for k in keys if k in j}, "tokens", hash(json.dumps(j.get("token_ids"))) % 10**8)
PY
for f in $R/ncu-*.csv; do python3 - "$f" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 100]
if len(rows) < 3: print(sys.argv[1], "no rows"); sys.exit()
h = rows[0]
for r in rows[2:]:
    g = lambda k: r[h.index(k)] if k in h else "?"
    print(sys.argv[1].split("/")[-1], g("Kernel Name"), g("Grid Size"), g("Block Size"), "us", g("gpu__time_duration.sum"),
          "dram%", g("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"), "warps%", g("sm__warps_active.avg.pct_of_peak_sustained_active"),
          "regs", g("launch__registers_per_thread"), "sm%", g("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
          "ipc", g("sm__inst_executed.avg.per_cycle_active"), "inst", g("smsp__inst_executed.sum"), "l2hit", g("lts__t_sector_hit_rate.pct"))
    st = []
    for i, k in enumerate(h):
        if "issue_stalled" in k and k.endswith("per_issue_active.ratio"):
            try: st.append((float(r[i].replace(",", "")), k.split("stalled_")[1].split("_per_issue")[0]))
            except ValueError: pass
    print("  stalls", sorted(st, reverse=True)[:8])
PY
done
cd "$OUT" && tar czf r.tgz r && rm -rf r
