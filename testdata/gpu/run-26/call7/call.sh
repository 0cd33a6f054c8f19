#!/usr/bin/env bash
# Run 26, call 7: INT4 experts read in the kernel (one scale a chunk) against the same build
# with SPECDECK_STORED_EXPERTS=0 (dequantized at load) on the demo pair; a DeepSeek-V3-shaped
# checkpoint in Kimi-K2.5's layout (write_dsv3_fp8.py --int4: real per-layer sizes, routed
# experts pack-quantized INT4, the rest bf16), batch-1 decode against the copy bandwidth; and
# the DeepSeek family's logits check.
set -u
G=$(cd "$(dirname "$0")" && pwd)
H=$G/cuda
R=$OUT/r; mkdir -p $R
T=$(date +%s)
export SPECDECK_PTX_CACHE=$R/ptx
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
timeout 150 $H/specdeck cuda-check --out $R/checks --sections deepseek-logits,bandwidth --deepseek-models $G/deepseek >$R/checks.out 2>$R/checks.err
echo "checks rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
mkdir -p $R/home
HOME=$R/home timeout 60 $H/specdeck </dev/null > $R/demo-extract.out 2>&1
DEMO=$(ls -d $R/home/.cache/specdeck/demo-* | head -1)
for v in stored dequantized stored-again; do
  k=1; [ $v = dequantized ] && k=0
  SPECDECK_STORED_EXPERTS=$k timeout 150 $H/specdeck bench --device cuda --model-path "$DEMO/target" --speculative-draft-model-path "$DEMO/draft" \
    --speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
    --context-length 131072 --prompts $G/deepseek/heldout_prompts.jsonl --max-new-tokens 64 --compare-target-only --json > $R/demo-$v.json 2> $R/demo-$v.err
  echo "demo-$v rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
done
M=/tmp/specdeck-kimi-int4
[ -f "$M/config.json" ] || timeout 240 python3 $H/write_dsv3_fp8.py $M --layers 3 --int4 > $R/write-int4.out 2>&1
echo "write-int4 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(4)]' > $R/prompts4.jsonl
for v in stored; do
  k=1
  SPECDECK_STORED_EXPERTS=$k timeout 200 $H/specdeck bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json > $R/int4-b1-$v.json 2> $R/int4-b1-$v.err
  echo "int4-b1-$v rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
done
rm -rf $R/ptx $R/home
cd $OUT && tar czf r.tgz r
cat $R/calls.log; grep -h "FAIL\|fail\|kimi\|GB/s" $R/checks.out | head -20
for f in $R/demo-*.json $R/int4-b1-*.json; do echo "$f: $(head -c 3000 $f | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"mean_accept_length":[0-9.]*\|"identical":[a-z]*\|"verify_ms_per_cycle":[0-9.]*\|"prefill_ms_median":[0-9.]*' | tr '\n' ' ')"; done
python3 - $R <<'PY'
import json, sys
r = sys.argv[1]
try:
    a, b = (json.load(open(f"{r}/{n}.json"))["token_ids"] for n in ("demo-stored", "demo-dequantized"))
    print("demo: stored vs dequantized token ids equal:", sum(x == y for x, y in zip(a, b)), "of", len(a))
except Exception as e:
    print("compare failed", e)
PY
tail -3 $R/write-int4.out; tail -3 $R/int4-b1-stored.err
