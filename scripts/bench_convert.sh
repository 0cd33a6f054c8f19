#!/usr/bin/env bash
# Time `specdeck convert gguf` on each fetched model, with two references measured in the
# same run: copying the GGUF (the input bytes) and copying the model.safetensors it wrote
# (the output bytes), each followed by an fsync as convert does before its rename.
#
#   scripts/bench_convert.sh            (after scripts/fetch_models.sh)
#
# MODELS_DIR as for fetch_models.sh; SPECDECK names the binary (default target/release/specdeck).
# Prints one Markdown table row per model.
set -euo pipefail
MODELS_DIR=${MODELS_DIR:-/work/models}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SPECDECK:-$REPO/target/release/specdeck}
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/bench_convert.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT

seconds() { # seconds CMD... -> wall time of CMD
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
copy_synced() { cp "$1" "$2" && sync "$2"; }

echo "| model | GGUF MB | safetensors MB | cp GGUF + fsync (s) | convert (s) | cp safetensors + fsync (s) | convert / cp safetensors |"
echo "|---|---|---|---|---|---|---|"
for name in smollm2-135m-instruct qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct; do
  src="$MODELS_DIR/raw/$name.gguf"
  [ -f "$src" ] || { echo "bench_convert: $src is missing; run scripts/fetch_models.sh" >&2; exit 1; }
  cat "$src" > /dev/null # same page-cache state for every command below
  t_in=$(seconds copy_synced "$src" "$SCRATCH/in.gguf")
  rm -f "$SCRATCH/in.gguf"
  t_conv=$(seconds "$BIN" convert gguf "$src" "$SCRATCH/out")
  out="$SCRATCH/out/model.safetensors"
  [ -f "$out" ] || { echo "bench_convert: convert of $name failed" >&2; exit 1; }
  t_out=$(seconds copy_synced "$out" "$SCRATCH/copy.safetensors")
  printf '| %s | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f |\n' "$name" \
    "$(echo "$(stat -c %s "$src") / 1000000" | bc -l)" "$(echo "$(stat -c %s "$out") / 1000000" | bc -l)" \
    "$t_in" "$t_conv" "$t_out" "$(echo "$t_conv / $t_out" | bc -l)"
  rm -rf "$SCRATCH/out" "$SCRATCH/copy.safetensors"
done
