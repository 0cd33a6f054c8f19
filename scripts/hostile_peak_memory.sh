#!/usr/bin/env bash
# Peak memory (max RSS, GNU time) and wall time of `replay`, `check` and `convert` on the
# largest hostile inputs of tests/hostile.rs and tests/hostile_cli.rs, scaled up. Logs are
# streamed through standard input where they would be gigabytes; files go in a temporary
# folder that is deleted afterwards. (issue 23: the BENCHMARKS.md rows.)
#
#   scripts/hostile_peak_memory.sh [BIN=target/release/specdeck]
set -euo pipefail
BIN=${1:-target/release/specdeck}
DIR=$(mktemp -d --tmpdir specdeck-hostile.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
export SPECDECK_NVML=off

report() { # label: the figures GNU time wrote to $DIR/time
  read -r wall kib < <(tail -1 "$DIR/time")
  printf '%-60s max RSS %7.1f MiB  wall %6.2f s\n' "$1" "$(python3 -c "print($kib / 1024)")" "$wall"
}

peak() { # label, command...: max RSS and wall time; the exit status is not the figure
  local label=$1; shift
  /usr/bin/time -o "$DIR/time" -f '%e %M' "$@" > /dev/null 2>&1 || true
  report "$label"
}

# Each generator writes to stdout; the replay reads it as `replay -`, timed alone.
piped() { # label, generator (a shell snippet)
  bash -c "$2" | { /usr/bin/time -o "$DIR/time" -f '%e %M' "$BIN" replay --json - > /dev/null 2>&1 || true; }
  report "$1"
}

echo "$BIN, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
peak "replay: the demo recording (reference)" "$BIN" replay --json testdata/demo/recorded-run.jsonl
piped "replay -: one 1 GiB line of 'x' (no newline)" "head -c 1G /dev/zero | tr '\\0' x"
piped "replay -: 1 GiB of NUL bytes (/dev/zero through a pipe)" "head -c 1G /dev/zero"
piped "replay -: one line of 64 Mi '[' (JSON nesting)" "python3 -c 'import sys; sys.stdout.write(\"{\\\"t\\\":0,\\\"x\\\":\" + \"[\" * (64 << 20))'"
piped "replay -: 10^5 lines of 5000-deep JSON nesting (1 GB)" "python3 -c '
import sys
line = \"{\\\"t\\\":0,\\\"type\\\":\\\"log\\\",\\\"x\\\":\" + \"[\" * 5000 + \"]\" * 5000 + \"}\\n\"
for _ in range(10**5): sys.stdout.write(line)'"
piped "replay -: 5*10^6 finding events (JSONL, over the findings cap)" "python3 -c '
import sys
for i in range(5 * 10**6): sys.stdout.write(\"{\\\"t\\\":%d,\\\"type\\\":\\\"finding\\\",\\\"id\\\":\\\"f%d\\\",\\\"severity\\\":\\\"warning\\\",\\\"phase\\\":\\\"preflight\\\",\\\"message\\\":\\\"m\\\",\\\"evidence\\\":[],\\\"remedies\\\":[]}\\n\" % (i, i))'"
piped "replay -: 5*10^6 tracebacks of distinct ranks (vLLM headers)" "python3 -c '
import sys
for i in range(5 * 10**6): sys.stdout.write(\"(Worker pid=%d) Traceback (most recent call last):\\n(Worker pid=%d)   File \\\"/v/vllm/worker.py\\\", line 1, in f\\n\" % (i, i))'"
piped "replay -: 5*10^6 weight loads of distinct ranks (SGLang)" "python3 -c '
import sys
for i in range(5 * 10**6): sys.stdout.write(\"[2025-09-05 20:48:29 TP%d] Load weight begin. avail mem=70.00 GB\\n\" % i)'"

# check and convert: the largest inputs of tests/hostile.rs.
M="$DIR/model"
mkdir -p "$M"
python3 - "$M" <<'EOF'
import json, sys
cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
       "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 4, "max_position_embeddings": 64,
       "pad": "x" * (63 << 20)}
open(sys.argv[1] + "/config.json", "w").write(json.dumps(cfg))
EOF
peak "check: a 63 MiB config.json (read, under the 64 MiB cap)" "$BIN" check --json --model-path "$M"
truncate -s 65M "$M/config.json"
peak "check: a 65 MiB config.json (refused by its size)" "$BIN" check --json --model-path "$M"
python3 -c "import json; print(json.dumps({'model_type': 'llama', 'num_attention_heads': 4294967291 * 4294967279}))" > "$M/config.json"
peak "check: --tp-size 4294967295 (divisor search)" "$BIN" check --json --model-path "$M" --tp-size 4294967295
python3 - "$DIR" <<'EOF'
import struct, sys
def kv_u32(k, v): return struct.pack("<Q", len(k)) + k.encode() + struct.pack("<I", 4) + struct.pack("<I", v)
def kv_str(k, v): return struct.pack("<Q", len(k)) + k.encode() + struct.pack("<I", 8) + struct.pack("<Q", len(v)) + v.encode()
kvs = [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 0xFFFFFFFF), kv_u32("llama.embedding_length", 8),
       kv_u32("llama.attention.head_count", 2), kv_u32("llama.feed_forward_length", 16), kv_u32("llama.context_length", 64)]
open(sys.argv[1] + "/blocks.gguf", "wb").write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))
# One u8 array of 2^30 elements claimed, 32 MiB present.
arr = struct.pack("<Q", 7) + b"a.array" + struct.pack("<I", 9) + struct.pack("<I", 0) + struct.pack("<Q", 1 << 30)
open(sys.argv[1] + "/array.gguf", "wb").write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + arr + b"\1" * (32 << 20))
# A tensor count of 2^40 in a 1 KiB file.
open(sys.argv[1] + "/tensors.gguf", "wb").write(b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0) + b"\0" * 1024)
EOF
for g in blocks array tensors; do
  peak "convert gguf: $g.gguf" "$BIN" convert gguf "$DIR/$g.gguf" "$DIR/out-$g"
done
