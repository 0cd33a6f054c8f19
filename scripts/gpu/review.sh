#!/usr/bin/env bash
# A short check of the CUDA engine after a change outside the kernels (one device call, a few
# minutes): the cuda-check conformance and speculative-greedy sections; the continuous-batching
# scheduler on a random Qwen2.5-0.5B-shaped checkpoint at concurrency 8; and the embedded demo
# on a machine with a GPU (its DeepSeek-V3-family target must run on the CPU under
# --device auto). Raw outputs under $OUT; builds nothing (stage.sh).
#
# usage (GPU machine, repository root):  bash .gpu/cuda/review.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$HERE/specdeck"
OUT="${OUT:-/tmp/specdeck-gpu-out}"
export SPECDECK_PTX_CACHE="$OUT/ptx-cache"
mkdir -p "$OUT"
T0=$(date +%s)
BUDGET_S="${SPECDECK_GPU_BUDGET_S:-400}"
source "$HERE/step.sh"

step checks 240 "$BIN" cuda-check --sections conformance,speculative-greedy
MODEL=/tmp/specdeck-qwen0.5b
[ -f "$MODEL/config.json" ] || step write 120 python3 "$HERE/write_llama8b.py" "$MODEL" --shape qwen0.5b
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 128000)}" for _ in range(64))})) for _ in range(16)]' >"$OUT/prompts.jsonl"
step serve-c8 120 "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompts.jsonl" --max-new-tokens 64 --concurrency 8 --json
export HOME="$OUT/home"
mkdir -p "$HOME"
step demo 60 "$BIN" </dev/null
DEMO=$(ls -d "$HOME"/.cache/specdeck/demo-* | head -1)
step demo-generate 120 "$BIN" generate --model-path "$DEMO/target" --speculative-draft-model-path "$DEMO/draft" \
    --speculative-algorithm EAGLE3 --context-length 131072 --prompt "HAMLET." --max-new-tokens 32
echo "review: $(( $(date +%s) - T0 )) s"
