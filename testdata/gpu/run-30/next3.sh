#!/usr/bin/env bash
# DeepSeek-V3 FP8 as stored (3 layers) on one GPU: main against combined (graph steps, row
# handles, one tf32 part), combined without graphs; batch 1, then concurrency 32.
#   command: bash .gpu/next3.sh    carry: [".gpu/p3.tar.xz", ".gpu/next3.sh", ".gpu/deepseek"]
set -u
G=$(cd "$(dirname "$0")" && pwd)
[ -d /tmp/p3 ] || (cd /tmp && tar xJf $G/p3.tar.xz)
P=/tmp/p3; R=$OUT/r; mkdir -p $R; T=$(date +%s)
export SPECDECK_PTX_CACHE=/tmp/ptx-next
step() { echo "$1 rc=$2 s=$(( $(date +%s) - T ))" >> $R/calls.log; (cd $OUT && tar czf r.tgz r); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
timeout 120 $P/builds/combined/specdeck cuda-check --out $R/checks-c --sections deepseek-logits --deepseek-models $G/deepseek > $R/checks-c.out 2> $R/checks-c.err
step checks-c $?
M=/tmp/specdeck-dsv3-fp8
[ -f "$M/config.json" ] || timeout 150 python3 $P/write_dsv3_fp8.py $M --layers 3 > $R/write-fp8.out 2>&1
step write-fp8 $?
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(32)]' > $R/prompts32.jsonl
head -4 $R/prompts32.jsonl > $R/prompts4.jsonl
b1() { timeout 100 $P/builds/$2/specdeck bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json "${@:3}" > $R/fp8-b1-$1.json 2> $R/fp8-b1-$1.err; step fp8-b1-$1 $?; }
b1 c combined
b1 main main
b1 c-eager combined --cuda-graph-max-bs 0
for v in combined main; do
  timeout 100 $P/builds/$v/specdeck bench --device cuda --model-path $M --prompts $R/prompts32.jsonl --max-new-tokens 32 --concurrency 32 --json > $R/fp8-c32-$v.json 2> $R/fp8-c32-$v.err
  step fp8-c32-$v $?
done
cat $R/calls.log; grep -h "FAIL\|graph" $R/checks-c.out; tail -3 $R/*.err | head -40
python3 - $R <<'PY'
import json, sys
def last(p):
    try: return json.loads([l for l in open(p) if l.startswith("{")][-1])
    except Exception: return None
r = sys.argv[1]; g, e, m = (last(f"{r}/fp8-b1-{v}.json") for v in ("c", "c-eager", "main"))
if g and e: print("graph tokens == eager tokens (combined):", g["token_ids"] == e["token_ids"])
if g and m: print("combined tokens == main tokens:", g["token_ids"] == m["token_ids"])
PY
for f in $R/fp8-*.json; do echo "$f: $(head -c 4000 $f | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"output_tokens_per_s":[0-9.]*\|"identical[a-z_]*":[^,]*' | paste -sd' ')"; done
cd $OUT && tar czf r.tgz r && rm -rf r
