# Sourced by profile.sh and ablate.sh (after they set HERE and OUT): the random-weight
# checkpoint of SPECDECK_PROFILE_SHAPE (llama8b, qwen0.5b, qwen1.5b, or dsv3-fp8: DeepSeek-V3's
# per-layer sizes in FP8 as shipped, DSV3_LAYERS layers, default 3) in $MODEL, written by torch
# the first time, with $OUT made and the PTX cache kept under it.
SHAPE="${SPECDECK_PROFILE_SHAPE:-llama8b}"
MODEL="${SPECDECK_8B_DIR:-/tmp/specdeck-$SHAPE}"
export SPECDECK_PTX_CACHE="$OUT/ptx-cache"
mkdir -p "$OUT"
if [ "$SHAPE" = dsv3-fp8 ]; then
    [ -f "$MODEL/config.json" ] ||
        python3 "$HERE/write_dsv3_fp8.py" "$MODEL" --layers "${DSV3_LAYERS:-3}" >"$OUT/write-$SHAPE.log" 2>&1
else
    [ -f "$MODEL/model.safetensors.index.json" ] ||
        python3 "$HERE/write_llama8b.py" "$MODEL" --shape "$SHAPE" >"$OUT/write-$SHAPE.log" 2>&1
fi
