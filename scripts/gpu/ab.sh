#!/usr/bin/env bash
# Engine decode A/B on the 8B shape, in one device call: the HBM floor (cuda-check
# large-model-steps), then the same `specdeck bench` once per variant. A variant is a string
# of environment settings (NAME=VALUE) and bench flags (--tp-size 2 ...); "" is the default;
# SPECDECK_BIN=PATH runs another build (an earlier commit's, as the reference of the run).
# Prints one line per variant: decode tok/s, its share of the floor, and whether its tokens
# equal the first variant's.
#
# usage (from the repository root on the GPU machine):
#   bash .gpu/cuda/ab.sh "" "SPECDECK_FUSED_NORMS=0" "SPECDECK_GEMV=t1_u2 --tp-size 2"
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$HERE/specdeck"
OUT="${OUT:-/tmp/specdeck-ab}"
MODEL="${SPECDECK_8B_DIR:-/tmp/specdeck-llama8b}"
export NCCL_NVLS_ENABLE=0 SPECDECK_PTX_CACHE="$OUT/ptx-cache"
mkdir -p "$OUT"
[ -f "$MODEL/model.safetensors.index.json" ] || python3 "$HERE/write_llama8b.py" "$MODEL" >"$OUT/write8b.log" 2>&1
timeout 120 "$BIN" cuda-check --out "$OUT/large" --large-model "$MODEL" --sections bandwidth,large-model-steps >"$OUT/large.out" 2>&1
floor=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['large-model-steps']['result']['floor_tokens_per_s'])" \
    "$OUT/large/cuda-check.json" 2>/dev/null || echo 0)
for i in 0 1; do
    echo "{\"prompt\": \"$(seq $((1000 + i)) 37 $((1000 + i + 37 * 31)) | sed 's/^/w/' | paste -sd' ')\"}"
done >"$OUT/prompts.jsonl"
n=0
for variant in "$@"; do
    n=$((n + 1))
    settings=() flags=() bin=$BIN
    for word in $variant; do
        if [[ $word == --* || ${#flags[@]} -gt 0 ]]; then flags+=("$word"); else settings+=("$word"); fi
        [[ $word == SPECDECK_BIN=* ]] && bin=${word#SPECDECK_BIN=}
    done
    timeout 120 env "${settings[@]}" "$bin" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompts.jsonl" \
        --max-new-tokens 128 --json "${flags[@]}" >"$OUT/ab-$n.out" 2>"$OUT/ab-$n.err"
    python3 - "$OUT/ab-$n.out" "$OUT/ab-1.out" "$floor" "${variant:-default}" <<'PY'
import json, sys
def last(path):
    try:
        return json.loads([l for l in open(path) if l.startswith("{")][-1])
    except (OSError, IndexError, ValueError):
        return None
run, first, floor, name = last(sys.argv[1]), last(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
if run is None:
    print(f"{name}: no result")
else:
    rate = run["decode_tokens_per_s"]
    share = f"{rate / floor:.1%} of floor {floor:.1f}" if floor else "no floor"
    same = "tokens as variant 1" if first and run["token_ids"] == first["token_ids"] else "tokens DIFFER from variant 1"
    print(f"{name}: {rate:.1f} tok/s, {share}; {same}")
PY
done
grep -E "decode vs HBM floor|verify\(4 drafts\) / decode|step ms" "$OUT/large.out"
