#!/usr/bin/env bash
# What each kernel family costs inside a decode step run from CUDA graphs, on the GPU
# machine. Nsight Systems is not installed there and Nsight Compute times kernels one at a
# time, outside the step; so `specdeck bench` runs once as it is and once per family with
# that family's launches left out (SPECDECK_SKIP_KERNELS: the tokens are then wrong, the
# step time is what counts). The difference is what the family costs the step, overlap with
# its neighbours included.
#
# SPECDECK_PROFILE_SHAPE picks the random checkpoint: llama8b (default), qwen0.5b, qwen1.5b,
# dsv3-fp8 (DeepSeek-V3's layers in FP8 as stored; run 29's call 5b by hand).
# usage (from the repository root on the GPU machine):
#   bash .gpu/cuda/ablate.sh [FAMILY ...]   (kernel-name prefixes; default: the layer's)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="${SPECDECK_BIN:-$HERE/specdeck}"
OUT="${OUT:-/tmp/specdeck-ablate}"
. "$HERE/random_model.sh"
# A HumanEval-sized prompt (160 tokens), so attention reads a cache of that size.
echo "{\"prompt\": \"$(seq 3 162 | sed 's/^/w/' | paste -sd' ')\"}" >"$OUT/prompt.jsonl"
families=("$@")
if ((${#families[@]} == 0)); then
    if [ "$SHAPE" = dsv3-fp8 ]; then
        # gemv_fp8: the dense FP8 steps and kv_b's per-head products (runs 34-35); gemv_t: the
        # bf16 router and lm_head. moe_route's and moe_plan's figures are not their own cost:
        # without the router every token keeps expert 0 (one expert's weights read, not 8),
        # and without the plan no expert runs (run 37).
        families=(gemv_fp8 moe_gate_up moe_down mla_attention gemv_t moe_route moe_plan moe_combine rmsnorm)
    else
        families=(rmsnorm gemv_rope attention gemv_t gemv_gate_up topk embedding)
    fi
fi
ms_per_token() {
    SPECDECK_SKIP_KERNELS="$1" timeout 90 "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$OUT/prompt.jsonl" \
        --json --max-new-tokens 128 2>"$OUT/ablate-$SHAPE-${1:-none}.err" |
        python3 -c "import json,sys; r=json.loads([l for l in sys.stdin if l.startswith('{')][-1]); print(f\"{1e3 / r['decode_tokens_per_s']:.4f}\")" \
            2>/dev/null || echo nan
}
base=$(ms_per_token "")
echo "$SHAPE: decode step $base ms with every kernel"
for f in "${families[@]}"; do
    ms=$(ms_per_token "$f")
    python3 -c "import sys; b, m = float(sys.argv[1]), float(sys.argv[2]); print(f'  without {sys.argv[3]:<14} {m:.4f} ms: it costs {b - m:.4f} ms a step')" \
        "$base" "$ms" "$f"
done
