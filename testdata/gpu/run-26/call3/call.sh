#!/usr/bin/env bash
# Run 26, one call: the checks (ops vs the CPU with pick_ids / gather_ids; speculative greedy),
# speculation under load on the SmolLM2 pair (smol_load.sh: chains drafted on the device, read
# back with the verify), then the 8B shape: copy bandwidth, batch-1 decode, a 32K context
# (graph keys by context class) and the c1 / c64 loads.
set -u
H=$(cd "$(dirname "$0")" && pwd)/cuda
R=$OUT/r; mkdir -p $R
export SPECDECK_PTX_CACHE=$R/ptx-cache
T=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
timeout 150 $H/specdeck cuda-check --out $R/checks --sections conformance,graphs,speculative-greedy >$R/checks.out 2>$R/checks.err
echo "checks rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
OUT=$R/smol timeout 240 bash $H/smol_load.sh /tmp/smol.gguf "$1" > $R/smol.out 2>&1
echo "smol rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
M=/tmp/specdeck-llama8b
[ -f "$M/model.safetensors.index.json" ] || python3 $H/write_llama8b.py $M > $R/write8b.log 2>&1
echo "write8b s=$(( $(date +%s) - T ))" >> $R/calls.log
echo '{"prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}' > $R/p8.jsonl
timeout 60 $H/specdeck bench --device cuda --model-path $M --prompts $R/p8.jsonl --max-new-tokens 128 --json > $R/b1.out 2> $R/b1.err
echo "batch1 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
timeout 60 $H/specdeck cuda-check --out $R/bw --sections bandwidth > $R/bw.out 2>&1
echo "bw rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
python3 - > $R/p32k.jsonl <<'PY'
import json, random
rng = random.Random(0)
print(json.dumps({"prompt": " ".join(f"w{rng.randrange(3, 128000)}" for _ in range(32000))}))
PY
timeout 120 $H/specdeck bench --device cuda --model-path $M --prompts $R/p32k.jsonl --max-new-tokens 256 --json > $R/long-32k.out 2> $R/long-32k.err
echo "long-32k rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
python3 - > $R/p64.jsonl <<'PY'
import json, random
rng = random.Random(0)
for _ in range(64):
    print(json.dumps({"prompt": " ".join(f"w{rng.randrange(3, 128000)}" for _ in range(512))}))
PY
timeout 90 $H/specdeck bench --device cuda --model-path $M --prompts $R/p64.jsonl --max-new-tokens 256 --concurrency 64 --json > $R/c64.out 2> $R/c64.err
echo "c64 rc=$? s=$(( $(date +%s) - T ))" >> $R/calls.log
rm -rf $R/ptx-cache $R/smol/ptx-cache $R/p32k.jsonl $R/p64.jsonl
cd $OUT && tar czf r.tgz r
cat $R/calls.log; grep -h "FAIL\|fail" $R/checks.out | head -20; grep -c PASS $R/checks.out
cat $R/smol/smol-steps.log $R/smol/smol_summary.txt 2>/dev/null; tail -5 $R/smol.out
for f in $R/long-32k.out $R/b1.out $R/c64.out; do echo "$f: $(head -c 1500 $f | tr -d '\n' | grep -o '"seconds":[0-9.]*\|"output_tokens_per_s":[0-9.]*\|"decode_tokens_per_s":[0-9.]*\|"itl_ms":{[^}]*}\|"prefill_ms_median":[0-9.]*' | tr '\n' ' ')"; done
grep -h "GB/s" $R/bw.out | head -3
