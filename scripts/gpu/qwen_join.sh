#!/usr/bin/env bash
# Rebuild the Qwen2.5-Coder GGUF pair on the GPU machine from the pieces sent one call at a
# time (each call copies one piece into $PARTS; the pieces are the two files back to back,
# cut by `split -b 64348834 -d -a 2`), check both sha256 sums, and print the two paths.
#
# usage:  bash qwen_join.sh [PARTS_DIR] [DEST_DIR]   (defaults /root/models/parts, /root/models)
set -euo pipefail
parts="${1:-/root/models/parts}"
dest="${2:-/root/models}"
target="$dest/qwen2.5-coder-1.5b-instruct.gguf"
draft="$dest/qwen2.5-coder-0.5b-instruct.gguf"
target_bytes=1117320768
draft_bytes=491400064
target_sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
draft_sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
if [ ! -f "$target" ] || [ ! -f "$draft" ]; then
    n=$(ls "$parts"/part_* 2>/dev/null | wc -l)
    have=$(cat "$parts"/part_* 2>/dev/null | wc -c)
    if ((have != target_bytes + draft_bytes)); then
        echo "qwen_join: $n pieces in $parts hold $have bytes, not $((target_bytes + draft_bytes))" >&2
        exit 1
    fi
    # Through one joined file, not pipes: head closing a pipe early would fail the pipeline.
    cat $(ls "$parts"/part_* | sort) >"$dest/qwen-pair.bin"
    head -c "$target_bytes" "$dest/qwen-pair.bin" >"$target"
    tail -c "$draft_bytes" "$dest/qwen-pair.bin" >"$draft"
    rm -f "$dest/qwen-pair.bin"
fi
echo "$target_sha  $target" | sha256sum -c --quiet - >&2
echo "$draft_sha  $draft" | sha256sum -c --quiet - >&2
echo "$target $draft"
