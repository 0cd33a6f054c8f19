#!/usr/bin/env bash
# GPU call: keep GGUF piece aa on the machine for the next call (run from REPO/.gpu/train/callN).
set -euo pipefail
mkdir -p /root/work
cp piece_aa /root/work/smollm2.gguf.part
ls -la /root/work
