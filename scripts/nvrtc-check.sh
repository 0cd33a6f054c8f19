#!/usr/bin/env bash
# Compile every kernels/*.cu with the real NVRTC 13.0 (the GPU machine's version) on a
# machine without CUDA: fetch the NVRTC and CUDA header wheels from PyPI into a scratch
# folder outside the repo, point the loader and the include path at them, and run the
# NVRTC tests that `cargo test` leaves ignored.
# Usage: scripts/nvrtc-check.sh [SCRATCH_DIR]   (default: ${TMPDIR:-/tmp}/specdeck-nvrtc)
set -euo pipefail
scratch="${1:-${TMPDIR:-/tmp}/specdeck-nvrtc}"
mkdir -p "$scratch"
if [ ! -f "$scratch/x/nvidia/cu13/lib/libnvrtc.so.13" ]; then
    python3 -m pip download --quiet --no-deps -d "$scratch" \
        "nvidia-cuda-nvrtc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*"
    for w in "$scratch"/*.whl; do python3 -m zipfile -e "$w" "$scratch/x"; done
fi
cuda="$scratch/x/nvidia/cu13"
export LD_LIBRARY_PATH="$cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SPECDECK_CUDA_INCLUDE="$cuda/include"
cd "$(dirname "$0")/.."
exec cargo test --lib backend::cuda::compile -- --ignored --nocapture
