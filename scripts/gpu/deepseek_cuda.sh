#!/usr/bin/env bash
# The DeepSeek-V3 family on CUDA (one device call): the forward on the backend's ops against
# the CPU reference on testdata/deepseek's checkpoints (cuda-check's deepseek-logits, and
# deepseek-logits-deterministic with every matmul through the skinny kernels); the
# demo pair (Kimi-K2.5 architecture, INT4 experts, EAGLE-3) through the engine on CUDA, with
# speculative tokens against target-only; then a DeepSeek-V3-shaped FP8 checkpoint
# (write_dsv3_fp8.py) loaded and decoded at batch 1 and at concurrency 32. Raw outputs under
# $OUT; builds nothing (stage.sh).
#
# usage (GPU machine, repository root):  bash .gpu/cuda/deepseek_cuda.sh [FIXTURES]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$HERE/specdeck"
FIXTURES="${1:-.gpu/deepseek}"
OUT="${OUT:-/tmp/specdeck-gpu-out}"
export SPECDECK_PTX_CACHE="$OUT/ptx-cache"
mkdir -p "$OUT"
T0=$(date +%s)
BUDGET_S="${SPECDECK_GPU_BUDGET_S:-560}"
source "$HERE/step.sh"

step deepseek-logits 120 "$BIN" cuda-check --sections deepseek-logits,deepseek-logits-deterministic --deepseek-models "$FIXTURES" --out "$OUT"
export HOME="$OUT/home"
mkdir -p "$HOME"
step demo 60 "$BIN" </dev/null
DEMO=$(ls -d "$HOME"/.cache/specdeck/demo-* | head -1)
step demo-bench-cuda 150 "$BIN" bench --device cuda --model-path "$DEMO/target" --speculative-draft-model-path "$DEMO/draft" \
    --speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
    --context-length 131072 --prompts "$FIXTURES/heldout_prompts.jsonl" --max-new-tokens 64 --compare-target-only --json
MODEL=/tmp/specdeck-dsv3-fp8
[ -f "$MODEL/config.json" ] || step write-dsv3 200 python3 "$HERE/write_dsv3_fp8.py" "$MODEL" --layers "${DSV3_LAYERS:-4}"
python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(32)]' >"$OUT/prompts.jsonl"
head -4 "$OUT/prompts.jsonl" >"$OUT/prompts4.jsonl"
step dsv3-batch1 240 "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompts4.jsonl" --max-new-tokens 32 --json
step dsv3-c32 240 "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompts.jsonl" --max-new-tokens 32 --concurrency 32 --json
nvidia-smi --query-gpu=memory.used,memory.total --format=csv >"$OUT/nvidia-smi-after.txt" 2>&1
echo "deepseek_cuda: $(( $(date +%s) - T0 )) s"
