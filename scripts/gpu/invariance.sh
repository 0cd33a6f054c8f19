#!/usr/bin/env bash
# Batched greedy against batch-1 greedy on the H200, with and without deterministic mode.
set -u
HERE=$(cd "$(dirname "$0")" && pwd); BIN="$HERE/specdeck"; O=/tmp/inv; mkdir -p $O
export SPECDECK_PTX_CACHE=$O/ptx
M=/tmp/specdeck-qwen0.5b
[ -f $M/config.json ] || python3 "$HERE/write_llama8b.py" $M --shape qwen0.5b > $O/write.log 2>&1
python3 -c 'import json, random; r = random.Random(1); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 128000)}" for _ in range(48 + 8 * i))})) for i in range(16)]' > $O/p.jsonl
for det in "" "--enable-deterministic-inference"; do
  tag=${det:+det}; tag=${tag:-default}
  timeout 120 $BIN bench --device cuda --model-path $M --prompts $O/p.jsonl --max-new-tokens 96 $det --json > $O/b1-$tag.json 2> $O/b1-$tag.err
  timeout 120 $BIN bench --device cuda --model-path $M --prompts $O/p.jsonl --max-new-tokens 96 --concurrency 8 $det --json > $O/c8-$tag.json 2> $O/c8-$tag.err
  timeout 120 $BIN bench --device cuda --model-path $M --prompts $O/p.jsonl --max-new-tokens 96 --concurrency 16 $det --json > $O/c16-$tag.json 2> $O/c16-$tag.err
done
python3 - <<'PY' | tee $O/summary.txt
import json
for tag in ["default", "det"]:
    b1 = json.load(open(f"/tmp/inv/b1-{tag}.json"))
    for c in ["c8", "c16"]:
        cb = json.load(open(f"/tmp/inv/{c}-{tag}.json"))
        same = sum(a[:min(len(a), len(b))] == b[:min(len(a), len(b))] for a, b in zip(b1["token_ids"], cb["token_ids"]))
        first = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a)) for a, b in zip(b1["token_ids"], cb["token_ids"])]
        print(f"{tag:8} {c}: {same}/16 prompts identical to batch-1 (common length); first divergence {sorted(first)[:4]}; "
              f"batch-1 {b1.get('tokens_per_s', 0):.1f} tok/s, {c} {cb['output_tokens_per_s']:.1f} tok/s")
PY
