#!/usr/bin/env bash
# Last GPU call of SmolLM2 round 3 (run from REPO/.gpu/train/round3-pN, after round3_piece.sh
# for pieces 1..N-1 on the same warm machine): finish and check the payload, unpack it, check
# the GGUF, then continue training the shipped drafter on the earlier rounds' responses plus new
# greedy (and sampled) answers, and pack the results for $OUT.
#   R3_SECONDS: the wall-clock seconds this script may take in all (default 520)
#   R3_ARGS: extra arguments for train_smollm2.py
set -uo pipefail
START=$(date +%s)
W=/root/work
REPO="$(cd ../../.. && pwd)"
bash gpu/round3_piece.sh || exit 2
sha256sum -c payload.sha256 || exit 3
tar xf "$W/payload.tar" -C "$W" && rm "$W/payload.tar"
xz -d -T0 "$W/smollm2.gguf.xz" "$W/smollm2/prompts.npz.xz" "$W/smollm2/tokenizer.json.xz" || exit 4
INIT="$REPO/assets/drafters/smollm2-135m-eagle3"
if [ -d "$W/init_drafter" ]; then
    xz -d "$W/init_drafter/model.safetensors.xz" || exit 4
    INIT="$W/init_drafter"
fi
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $W/smollm2.gguf" | sha256sum -c || exit 5
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$W"/gguf-0.19.0-py3-none-any.whl || exit 6
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
BUDGET="${R3_SECONDS:-520}"
FINISH_BY=$(( START + BUDGET - 15 ))   # 15 s to pack
timeout $(( FINISH_BY + 10 - $(date +%s) )) python3 train_smollm2.py --gguf "$W/smollm2.gguf" --bundle "$W/smollm2" \
    --out "$W/smol_out" --reuse-data "$W/prev_data.npz" --init-from "$INIT" \
    --finish-by "$FINISH_BY" ${R3_ARGS:-} 2>&1 | tee "$W/smol.log"
bash gpu/pack.sh
echo "round 3 call: $(( $(date +%s) - START )) s"
