# Sourced by profile.sh and ablate.sh (after they set HERE and OUT): the random-weight
# checkpoint of SPECDECK_PROFILE_SHAPE (llama8b, qwen0.5b or qwen1.5b) in $MODEL, written by
# torch the first time, with $OUT made and the PTX cache kept under it.
SHAPE="${SPECDECK_PROFILE_SHAPE:-llama8b}"
MODEL="${SPECDECK_8B_DIR:-/tmp/specdeck-$SHAPE}"
export SPECDECK_PTX_CACHE="$OUT/ptx-cache"
mkdir -p "$OUT"
[ -f "$MODEL/model.safetensors.index.json" ] ||
    python3 "$HERE/write_llama8b.py" "$MODEL" --shape "$SHAPE" >"$OUT/write-$SHAPE.log" 2>&1
