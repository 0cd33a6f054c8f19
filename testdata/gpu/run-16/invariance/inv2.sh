set -u
BIN=.gpu/cuda/specdeck; O=/tmp/inv; mkdir -p $O; export SPECDECK_PTX_CACHE=$O/ptx
M=/tmp/specdeck-qwen0.5b
[ -f $M/config.json ] || python3 .gpu/cuda/write_llama8b.py $M --shape qwen0.5b > $O/write.log 2>&1
python3 -c 'import json, random; r = random.Random(1); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 128000)}" for _ in range(48 + 8 * i))})) for i in range(16)]' > $O/p.jsonl
D=--enable-deterministic-inference
timeout 100 $BIN bench --device cuda --model-path $M --prompts $O/p.jsonl --max-new-tokens 96 $D --json > $O/b1.json 2>/dev/null
timeout 100 $BIN bench --device cuda --model-path $M --prompts $O/p.jsonl --max-new-tokens 96 --concurrency 16 $D --json > $O/c16.json 2>/dev/null
timeout 100 $BIN bench --device cuda --model-path $M --prompts $O/p.jsonl --max-new-tokens 96 --concurrency 16 $D --chunked-prefill-size -1 --json > $O/c16-nochunk.json 2>/dev/null
timeout 100 $BIN bench --device cuda --model-path $M --prompts $O/p.jsonl --max-new-tokens 96 --concurrency 16 $D --chunked-prefill-size 64 --json > $O/c16-chunk64.json 2>/dev/null
timeout 100 $BIN bench --device cuda --model-path $M --prompts $O/p.jsonl --max-new-tokens 96 --concurrency 12 $D --json > $O/c12.json 2>/dev/null
python3 - <<'PY'
import json
b1 = json.load(open("/tmp/inv/b1.json"))["token_ids"]
for t in ["c16", "c16-nochunk", "c16-chunk64", "c12"]:
    c = json.load(open(f"/tmp/inv/{t}.json"))["token_ids"]
    div = [(i, next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)) for i, (a, b) in enumerate(zip(b1, c))]
    print(t, [d for d in div if d[1] is not None])
PY
