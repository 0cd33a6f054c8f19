# A call after next-a (about 3 minutes, any GPU): the paged CUDA-core step attention taking
# its slots as whole groups (variant pgrp of main 44ba97a's kernels/attention.cu, w5), on the
# 8B shape: batch-1 decode at 32K through the scheduler (--concurrency 1, which takes that
# kernel), c8 in deterministic mode (every batch on it), tokens compared; pgrp's conformance.
# carry [".gpu/w5.tar.xz", ".gpu/pgrp", ".gpu/next-b.sh"]; move assets/ and testdata/ out first.
(cd /tmp && tar xJf $OLDPWD/.gpu/w5.tar.xz)
set -u
BIN=/tmp/w5/bin/specdeck; VARIANTS="pgrp=.gpu/pgrp"
R=$OUT/r; mkdir -p $R; T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx-long-ab
source scripts/gpu/step.sh
step() { echo "$1 rc=$2 s=$(($(date +%s) - T))" >>"$R/calls.log"; (cd "$OUT" && tar czf r.tgz r); }
source scripts/gpu/variants.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$R/gpu.txt"
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || timeout 150 python3 scripts/gpu/write_llama8b.py $M >"$R/write8b.out" 2>&1
step write8b $?
prompts 1 32000 >"$R/p32k.jsonl"; prompts 8 512 >"$R/p8.jsonl"
b() { local tag=$1 p=$2; shift 2; timeout -k 5 90 "$RUN_BIN" bench --device cuda --model-path $M --prompts $R/$p --json --max-new-tokens 256 "$@" >"$R/$tag.json" 2>"$R/$tag.err"; }
i=0
for n in build pgrp build pgrp; do
    with $n b paged-$n-$((++i)) p32k.jsonl --concurrency 1; step paged-$n $?
done
for n in build pgrp; do
    with $n b det-c8-$n p8.jsonl --concurrency 8 --enable-deterministic-inference; step det-c8-$n $?
done
with pgrp timeout 150 $BIN cuda-check --out $R/checks-pgrp --sections conformance >$R/checks-pgrp.out 2>$R/checks-pgrp.err; step checks-pgrp $?
tail -n 3 $R/checks-pgrp.out
python3 - "$R" <<'PY'
import glob, json, os, sys
sys.path.insert(0, "scripts/gpu")
from summarize import last_json_line as last
for p in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    j = last(p)
    if j:
        keys = ("output_tokens_per_s", "itl_ms", "ttft_ms")
        print(os.path.basename(p), {k: j[k] for k in keys if k in j}, "tokens", hash(json.dumps(j.get("token_ids"))) % 10**8)
PY
cd "$OUT" && tar czf r.tgz r && rm -rf r
