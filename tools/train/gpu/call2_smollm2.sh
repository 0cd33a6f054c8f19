#!/usr/bin/env bash
# GPU call 2 (run from REPO/.gpu/train): finish the GGUF with piece ab, check its sha256,
# train the SmolLM2 drafter, wait for the demo job started by call 1, and return both.
# Files back ($OUT, <= 8 files of <= 16 MiB): the demo target and drafter safetensors, the
# SmolLM2 drafter safetensors in 15 MiB pieces, the log, and a tarball of the rest.
set -uo pipefail
W=/root/work
START=$(date +%s)
cat piece_ab >> "$W/smollm2.gguf.part" && mv "$W/smollm2.gguf.part" "$W/smollm2.gguf"
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $W/smollm2.gguf" | sha256sum -c || exit 3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site gguf-0.19.0-py3-none-any.whl || exit 4
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout "${SMOL_TIMEOUT:-500}" python3 train_smollm2.py --gguf "$W/smollm2.gguf" --bundle smollm2 --out "$W/smol_out" \
    ${SMOL_ARGS:-} 2>&1 | tee "$W/smol.log"
# Wait for the demo job, but leave time to pack the results.
while [ ! -f "$W/demo.rc" ] && [ $(( $(date +%s) - START )) -lt "${DEMO_WAIT_UNTIL:-560}" ]; do sleep 5; done
echo "demo rc: $(cat "$W/demo.rc" 2>/dev/null || echo 'still running')"; tail -5 "$W/demo.log"
bash gpu/pack.sh
