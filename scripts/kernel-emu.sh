#!/usr/bin/env bash
# Run the CUDA kernels on the CPU (tools/kernel-emu): their index arithmetic and results
# against double-precision references, and the bit-for-bit properties speculative decoding
# relies on. Needs g++ with C++20 (<barrier>); no GPU, no CUDA.
# Usage: scripts/kernel-emu.sh [BUILD_DIR]   (default: ${TMPDIR:-/tmp}/specdeck-kernel-emu)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-${TMPDIR:-/tmp}/specdeck-kernel-emu}"
mkdir -p "$build"
python3 "$repo/tools/kernel-emu/prep.py" "$build/kernels.h" attention.cu rope.cu
g++ -std=c++20 -O1 -pthread -I "$repo/tools/kernel-emu" -I "$build" \
    "$repo/tools/kernel-emu/kernels_test.cpp" -o "$build/kernels_test"
exec "$build/kernels_test"
