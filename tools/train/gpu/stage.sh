#!/usr/bin/env bash
# Stage what GPU call N needs into REPO/.gpu/train/callN (git-ignored in the lead's checkout,
# sent with `carry: [".gpu/train/callN"]`). At most 64 MiB travels per call, so the SmolLM2
# GGUF goes in two pieces: call 1 carries piece aa, call 2 piece ab. Both can be staged
# ahead, so that call 2 follows call 1 while the machine is still warm.
#
#   tools/train/gpu/stage.sh /work/main 1|2 [CALL_NAME]     (default CALL_NAME: call1 / call2)
set -euo pipefail
REPO="$1"; PIECE="$2"; CALL="${3:-call$PIECE}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
DATA="$HERE/data"
DEST="$REPO/.gpu/train/$CALL"
mkdir -p "$DEST" "$DATA/pieces"
rm -rf "$DEST/sdtrain" "$DEST/gpu" "$DEST"/piece_* "$DEST"/*.whl
cp -r "$HERE/sdtrain" "$HERE/gpu" "$DEST/"
cp -r "$REPO/.gpu/train/demo" "$REPO/.gpu/train/smollm2" "$DEST/"
cp "$HERE/train_demo.py" "$HERE/train_smollm2.py" "$HERE/verify_checkpoint.py" "$DEST/"
find "$DEST" -name __pycache__ -prune -exec rm -rf {} +
if [ ! -f "$DATA/pieces/piece_ab" ]; then
    split -b 49M "$DATA/SmolLM2-135M-Instruct.Q4_1.gguf" "$DATA/pieces/piece_"
fi
case "$PIECE" in
    1) cp "$DATA/pieces/piece_aa" "$DEST/" ;;
    2) cp "$DATA/pieces/piece_ab" "$DEST/"; cp "$DATA"/downloads/gguf-0.19.0-py3-none-any.whl "$DEST/" ;;
    *) echo "piece must be 1 or 2" >&2; exit 2 ;;
esac
du -sh "$DEST"
