#!/usr/bin/env bash
# Serving figures of the CUDA engine on the GPU machine (issue 24's "Must show"): output
# tokens/s of the 8B-shaped checkpoint through the continuous-batching scheduler at
# concurrency 1, 8, 32 and 64 (512 random-token prompts, 256 output tokens, EOS ignored),
# transformers' batched generate on the same weights at batch 64 as the reference, and
# batch-1 decode at a 32K-token context, and the c32 load again over HTTP (`bench --url`
# against `launch --port`). Raw JSON under $OUT; builds nothing (stage.sh).
# SPECDECK_SERVING_HF=0 skips the transformers step.
#
# usage (GPU machine, repository root):  bash .gpu/cuda/serving.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$HERE/specdeck"
OUT="${OUT:-/tmp/specdeck-gpu-out}"
MODEL="${SPECDECK_8B_DIR:-/tmp/specdeck-llama8b}"
BUDGET_S="${SPECDECK_GPU_BUDGET_S:-520}"
export SPECDECK_PTX_CACHE="$OUT/ptx-cache"
mkdir -p "$OUT"
T0=$(date +%s)

source "$HERE/step.sh"

[ -f "$MODEL/model.safetensors.index.json" ] || step write8b 150 python3 "$HERE/write_llama8b.py" "$MODEL"


for c in 1 8 32 64; do
    n=$((c < 4 ? 4 : c))
    prompts "$n" 512 >"$OUT/prompts-c$c.jsonl"
    step "serve-c$c" 120 "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompts-c$c.jsonl" \
        --max-new-tokens 256 --concurrency "$c" --json
done

# The same c32 load over HTTP: `specdeck launch --port` serving, `specdeck bench --url` as the
# load generator (streamed /v1/completions, TTFT and ITL on the wire).
"$BIN" --headless launch --device cuda --model-path "$MODEL" --port 30000 --max-running-requests 32 \
    >"$OUT/http-server.out" 2>"$OUT/http-server.err" &
SERVER=$!
for _ in $(seq 1 120); do
    grep -q "^ready in " "$OUT/http-server.out" 2>/dev/null && break
    kill -0 $SERVER 2>/dev/null || break
    sleep 1
done
step http-c32 120 "$BIN" bench --url http://127.0.0.1:30000 --prompts "$OUT/prompts-c32.jsonl" \
    --max-new-tokens 256 --concurrency 32 --json
kill -TERM $SERVER 2>/dev/null
wait $SERVER
echo "http server exit $?" >>"$OUT/steps.log"

# Batch-1 decode at a 32K-token context (one prompt of 32,000 tokens).
prompts 1 32000 >"$OUT/prompts-32k.jsonl"
step long-32k 150 "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompts-32k.jsonl" --max-new-tokens 256 --json

# SPECDECK_SERVING_HF=0 leaves the transformers reference out (a call that only checks specdeck).
[ "${SPECDECK_SERVING_HF:-1}" = 0 ] || step hf-batch64 240 python3 "$HERE/hf_batched.py" "$MODEL" --batch 64 --prompt-len 512 --new-tokens 256 --budget-s 220
tail -n 20 "$OUT/steps.log"
