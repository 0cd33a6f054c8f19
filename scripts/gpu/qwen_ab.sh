#!/usr/bin/env bash
# The Qwen pair (Qwen2.5-Coder-1.5B-Instruct target, 0.5B STANDALONE draft, 20 HumanEval
# prompts, steps 4) through two builds in one device call, alternating REF, NEW, REF, NEW:
# per run the speedup over target-only (with and without prefill), the accept length, the
# draft / verify ms of a cycle, the prefill per prompt (mean and median) and the warmup.
# Needs the GGUF pieces sent first (qwen_join.sh); converts them once.
#
# usage (from the repository root on the GPU machine):
#   bash .gpu/cuda/qwen_ab.sh REF_BIN [NEW_BIN]   (NEW_BIN defaults to .gpu/cuda/specdeck)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REF=$1 NEW=${2:-$HERE/specdeck}
OUT="${OUT:-/tmp/specdeck-qwen-ab}"
mkdir -p "$OUT"
QWEN=$(bash "$HERE/qwen_join.sh" 2>"$OUT/join.err") || { echo "qwen_join: $(tail -n 1 "$OUT/join.err")"; exit 1; }
read -r QT QD <<<"$QWEN"
for pair in "$QT /tmp/specdeck-qwen-1.5b" "$QD /tmp/specdeck-qwen-0.5b"; do
    read -r gguf dir <<<"$pair"
    [ -f "$dir/config.json" ] || "$NEW" convert gguf "$gguf" "$dir" >>"$OUT/convert.log" 2>&1
done
bench() {
    local name=$1 bin=$2
    SPECDECK_PTX_CACHE="$OUT/ptx-$name" timeout 120 "$bin" bench --device cuda --model-path /tmp/specdeck-qwen-1.5b \
        --prompts "$HERE/prompts-20.jsonl" --max-new-tokens 128 --json --speculative-algorithm STANDALONE \
        --speculative-draft-model-path /tmp/specdeck-qwen-0.5b --speculative-num-steps 4 --speculative-eagle-topk 1 \
        --speculative-num-draft-tokens 5 --compare-target-only >"$OUT/$name.out" 2>"$OUT/$name.err"
    python3 - "$OUT/$name.out" "$name" <<'PY'
import json, sys
try:
    d = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
except (OSError, IndexError, ValueError) as e:
    print(sys.argv[2], "no result:", e)
    sys.exit()
t = d["target_only"]
prefill = lambda x: (x["seconds"] - x["tokens"] / x["decode_tokens_per_s"]) / d["prompts"] * 1e3
warmup = [p["seconds"] for p in d["phases"] if p["phase"] == "warmup"]
print(f"{sys.argv[2]}: {d['tokens_per_s']:.1f} / {t['tokens_per_s']:.1f} = {d['tokens_per_s'] / t['tokens_per_s']:.3f}x; "
      f"decode only {d['decode_tokens_per_s'] / t['decode_tokens_per_s']:.3f}x; accept {d['mean_accept_length']:.2f}; "
      f"draft / verify {d['draft_ms_per_cycle']:.3f} / {d['verify_ms_per_cycle']:.3f} ms (target {t['verify_ms_per_cycle']:.3f}); "
      f"prefill ms mean {prefill(d):.2f} / {prefill(t):.2f}, median {d.get('prefill_ms_median', float('nan')):.2f} / "
      f"{t.get('prefill_ms_median', float('nan')):.2f}; warmup {warmup}; identical {d['identical']}")
PY
}
bench ref1 "$REF"; bench new1 "$NEW"; bench ref2 "$REF"; bench new2 "$NEW"
python3 - "$OUT" <<'PY'
import json, sys
ids = [json.loads([l for l in open(f"{sys.argv[1]}/{n}.out") if l.startswith("{")][-1])["token_ids"] for n in ("ref1", "new1")]
print("tokens of NEW == REF:", ids[0] == ids[1])
PY
