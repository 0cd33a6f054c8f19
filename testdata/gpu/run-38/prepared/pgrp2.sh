# pgrp2 (about 3 minutes, any GPU): the paged CUDA-core step attention takes a query's slots
# KG at a time; whole groups go straight to `visit`, the short last one waits for the
# region's keys (no extra `visit` inlined: attention.cu compiles in about main's time, where
# run 38's pgrp doubled it). Branch pgrp2 holds it as a commit. w5 = main 44ba97a's build.
# 32K through --concurrency 1 (the paged kernel) ×2 each, deterministic c8, tokens compared;
# pgrp2's conformance.
# carry [".gpu/w5.tar.xz", ".gpu/pgrp2", ".gpu/pgrp2.sh"]; assets/ and testdata/ moved out.
(cd /tmp && tar xJf $OLDPWD/.gpu/w5.tar.xz)
set -u
BIN=/tmp/w5/bin/specdeck; VARIANTS="pgrp2=.gpu/pgrp2"
R=$OUT/r; mkdir -p $R; T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx-pgrp2
source scripts/gpu/step.sh
step() { echo "$1 rc=$2 s=$(($(date +%s) - T))" >>"$R/calls.log"; (cd "$OUT" && tar czf r.tgz r); }
source scripts/gpu/variants.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$R/gpu.txt"
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || timeout 150 python3 scripts/gpu/write_llama8b.py $M >"$R/write8b.out" 2>&1
step write8b $?
prompts 1 32000 >"$R/p32k.jsonl"; prompts 8 512 >"$R/p8.jsonl"
b() { local tag=$1 p=$2; shift 2; timeout -k 5 150 "$RUN_BIN" bench --device cuda --model-path $M --prompts $R/$p --json --max-new-tokens 256 "$@" >"$R/$tag.json" 2>"$R/$tag.err"; }
i=0
for n in build pgrp2 build pgrp2; do
    with $n b paged-$n-$((++i)) p32k.jsonl --concurrency 1; step paged-$n $?
done
for n in build pgrp2; do
    with $n b det-c8-$n p8.jsonl --concurrency 8 --enable-deterministic-inference; step det-c8-$n $?
done
with pgrp2 timeout 150 $BIN cuda-check --out $R/checks-pgrp2 --sections conformance >$R/checks-pgrp2.out 2>$R/checks-pgrp2.err; step checks-pgrp2 $?
tail -n 3 $R/checks-pgrp2.out
python3 scripts/gpu/bench_lines.py "$R"
cd "$OUT" && tar czf r.tgz r && rm -rf r
