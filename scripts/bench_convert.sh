#!/usr/bin/env bash
# Time `specdeck convert gguf` on each fetched model, with two references measured in the
# same run: copying the GGUF (the input bytes) and copying the model.safetensors it wrote
# (the output bytes) with cat, each followed by an fsync as convert does before its rename.
#
#   scripts/bench_convert.sh            (after scripts/fetch_models.sh)
#
# MODELS_DIR as for fetch_models.sh; SPECDECK names the binary (default target/release/specdeck).
# Needs /usr/bin/time (GNU). Prints one Markdown table row per model.
set -euo pipefail
MODELS_DIR=${MODELS_DIR:-/work/models}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SPECDECK:-$REPO/target/release/specdeck}
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/bench_convert.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT

# The machine is shared, so wall time depends on the load; CPU time (user + sys) much less.
seconds() { # seconds CMD... -> "wall cpu" of CMD
  /usr/bin/time -f '%e %U %S' -o "$SCRATCH/time" "$@" >/dev/null 2>&1
  awk '{ printf "%.2f %.2f", $1, $2 + $3 }' "$SCRATCH/time"
}
# cat, not cp: cp may copy in the kernel (copy_file_range), while convert writes its bytes
# from user space as cat does.
copy_synced_timed() { seconds bash -c 'cat "$1" > "$2" && sync "$2"' copy "$@"; }

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| model | GGUF MB | safetensors MB | cat GGUF + fsync: wall / CPU s | convert: wall / CPU s | cat safetensors + fsync: wall / CPU s | convert / cat safetensors (wall) |"
echo "|---|---|---|---|---|---|---|"
for name in smollm2-135m-instruct qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct; do
  src="$MODELS_DIR/raw/$name.gguf"
  [ -f "$src" ] || { echo "bench_convert: $src is missing; run scripts/fetch_models.sh" >&2; exit 1; }
  cat "$src" > /dev/null # same page-cache state for every command below
  t_in=$(copy_synced_timed "$src" "$SCRATCH/in.gguf")
  rm -f "$SCRATCH/in.gguf"
  t_conv=$(seconds "$BIN" convert gguf "$src" "$SCRATCH/out")
  out="$SCRATCH/out/model.safetensors"
  [ -f "$out" ] || { echo "bench_convert: convert of $name failed" >&2; exit 1; }
  t_out=$(copy_synced_timed "$out" "$SCRATCH/copy.safetensors")
  read -r in_wall in_cpu <<< "$t_in"
  read -r conv_wall conv_cpu <<< "$t_conv"
  read -r out_wall out_cpu <<< "$t_out"
  printf '| %s | %.0f | %.0f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.2f |\n' "$name" \
    "$(echo "$(stat -c %s "$src") / 1000000" | bc -l)" "$(echo "$(stat -c %s "$out") / 1000000" | bc -l)" \
    "$in_wall" "$in_cpu" "$conv_wall" "$conv_cpu" "$out_wall" "$out_cpu" "$(echo "$conv_wall / $out_wall" | bc -l)"
  rm -rf "$SCRATCH/out" "$SCRATCH/copy.safetensors"
done
