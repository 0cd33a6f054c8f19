#!/usr/bin/env bash
# DeepSeek-V3 FP8 as stored (3 layers) on one GPU: main (9219d9b's kernels) against "all" =
# dsv3-graphs + fp8-mma (stored FP8 linears on the tensor cores) merged on main; "all" with
# graphs and with --cuda-graph-max-bs 0; batch 1, then concurrency 32. First the checks:
# conformance (the FP8 linears against the CPU) and the DeepSeek logits with graph equality.
# "all" also with SPECDECK_EXPERT_MMA=0 (its FP8 experts on the CUDA cores, as main's).
#   command: bash .gpu/next4.sh    carry: [".gpu/p4.tar.xz", ".gpu/next4.sh", ".gpu/deepseek"]
set -u
G=$(cd "$(dirname "$0")" && pwd)
[ -d /tmp/p4 ] || (cd /tmp && tar xJf $G/p4.tar.xz)
P=/tmp/p4; R=$OUT/r; mkdir -p $R; T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx-next
step() { echo "$1 rc=$2 s=$(( $(date +%s) - T ))" >> $R/calls.log; (cd $OUT && tar czf r.tgz r); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
[ -n "${SKIP_CHECKS:-}" ] || timeout 150 $P/builds/all/specdeck cuda-check --out $R/checks-a --sections conformance,deepseek-logits,deepseek-logits-deterministic --deepseek-models $G/deepseek > $R/checks-a.out 2> $R/checks-a.err
step checks-a $?
M=/tmp/specdeck-dsv3-fp8
[ -f "$M/config.json" ] || PYTHONPATH=$PWD/scripts/gpu timeout 150 python3 scripts/gpu/write_dsv3_fp8.py $M --layers 3 > $R/write-fp8.out 2>&1
step write-fp8 $?
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(32)]' > $R/prompts32.jsonl
head -4 $R/prompts32.jsonl > $R/prompts4.jsonl
b1() { timeout 100 $P/builds/$2/specdeck bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json "${@:3}" > $R/fp8-b1-$1.json 2> $R/fp8-b1-$1.err; step fp8-b1-$1 $?; }
b1 a all
b1 main main
b1 a-eager all --cuda-graph-max-bs 0
SPECDECK_EXPERT_MMA=0 b1 a-cc all
for v in all main; do
  timeout 100 $P/builds/$v/specdeck bench --device cuda --model-path $M --prompts $R/prompts32.jsonl --max-new-tokens 32 --concurrency 32 --json > $R/fp8-c32-$v.json 2> $R/fp8-c32-$v.err
  step fp8-c32-$v $?
done
cat $R/calls.log; grep -h "FAIL\|graph\|stored fp8" $R/checks-a.out | head -40; tail -3 $R/*.err | head -40
python3 - $R <<'PY'
import json, sys
def last(p):
    try: return json.loads([l for l in open(p) if l.startswith("{")][-1])
    except Exception: return None
r = sys.argv[1]; g, e, m = (last(f"{r}/fp8-b1-{v}.json") for v in ("a", "a-eager", "main"))
if g and e: print("graph tokens == eager tokens (all):", g["token_ids"] == e["token_ids"])
if g and m: print("all tokens == main tokens:", g["token_ids"] == m["token_ids"])
PY
for f in $R/fp8-*.json; do echo "$f: $(head -c 4000 $f | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"output_tokens_per_s":[0-9.]*\|"identical[a-z_]*":[^,]*' | paste -sd' ')"; done
cd $OUT && tar czf r.tgz r && rm -rf r
