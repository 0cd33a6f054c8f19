#!/usr/bin/env bash
# Stage SmolLM2 round 3 (warm start from the shipped drafter) for the lent GPU.
# At most 64 MiB travels per call and the repo itself is ~49 MiB, so everything the run needs
# beyond the repo (the xz-compressed GGUF, the prompt bundle, the earlier rounds' responses,
# the gguf wheel) goes as one tar in PIECE_MIB pieces, one per call, appended on the machine;
# the last piece's folder also holds the code and the scripts. The payload's sha256 is checked
# there before it is unpacked. INIT_DRAFTER (a drafter folder) travels too when given, and the
# run starts from it instead of the drafter tracked in the repo (to repeat a round after the
# tracked drafter has moved on).
#
#   tools/train/gpu/stage_round3.sh REPO PREV_DATA_NPZ [PIECE_MIB] [INIT_DRAFTER]
# writes REPO/.gpu/train/round3-p1 .. round3-pN (git-ignored); prints N.
set -euo pipefail
REPO="$1"; PREV="$2"; PIECE_MIB="${3:-12}"; INIT="${4:-}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
DATA="$HERE/data"
BUILD="$DATA/pieces/round3"
rm -rf "$BUILD/payload" "$BUILD"/payload.tar* "$REPO"/.gpu/train/round3-p*
mkdir -p "$BUILD/payload"
if [ ! -f "$BUILD/smollm2.gguf.xz" ]; then
    xz -9e -T2 -k -c "$DATA/SmolLM2-135M-Instruct.Q4_1.gguf" > "$BUILD/smollm2.gguf.xz"
fi
cp "$BUILD/smollm2.gguf.xz" "$DATA/downloads/gguf-0.19.0-py3-none-any.whl" "$BUILD/payload/"
cp "$PREV" "$BUILD/payload/prev_data.npz"
mkdir -p "$BUILD/payload/smollm2"
xz -9 -c "$REPO/.gpu/train/smollm2/prompts.npz" > "$BUILD/payload/smollm2/prompts.npz.xz"
xz -9 -c "$REPO/.gpu/train/smollm2/tokenizer.json" > "$BUILD/payload/smollm2/tokenizer.json.xz"
if [ -n "$INIT" ]; then
    mkdir -p "$BUILD/payload/init_drafter"
    cp "$INIT/config.json" "$BUILD/payload/init_drafter/"
    xz -9 -T2 -c "$INIT/model.safetensors" > "$BUILD/payload/init_drafter/model.safetensors.xz"
fi
tar cf "$BUILD/payload.tar" -C "$BUILD/payload" .
split -b "${PIECE_MIB}M" -d -a 1 "$BUILD/payload.tar" "$BUILD/payload.tar."
PIECES=$(ls "$BUILD"/payload.tar.? | wc -l)
for i in $(seq 1 "$PIECES"); do
    mkdir -p "$REPO/.gpu/train/round3-p$i/gpu"
    cp "$BUILD/payload.tar.$((i - 1))" "$REPO/.gpu/train/round3-p$i/"
    cp "$HERE/gpu/round3_piece.sh" "$REPO/.gpu/train/round3-p$i/gpu/"
done
LAST="$REPO/.gpu/train/round3-p$PIECES"
cp -r "$HERE/sdtrain" "$HERE/gpu" "$HERE/train_smollm2.py" "$HERE/verify_checkpoint.py" "$LAST/"
find "$LAST" -name __pycache__ -prune -exec rm -rf {} +
(cd "$BUILD" && sha256sum payload.tar | sed 's#payload.tar#/root/work/payload.tar#') > "$LAST/payload.sha256"
du -sh --apparent-size "$REPO"/.gpu/train/round3-p*
echo "$PIECES pieces"
