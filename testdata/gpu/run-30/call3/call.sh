#!/usr/bin/env bash
# Call C of the SmolLM2 pair (after call A, next.sh, unpacked .gpu/cuda and .gpu/builds, and
# call B left the first piece of the xz'd GGUF in /tmp/g/part1):
#   B: command `mkdir -p /tmp/g && cp .gpu/smolB/part1 /tmp/g/`   carry [".gpu/smolB"]
#   C: command `bash .gpu/smolC/smol.sh`                          carry [".gpu/smolC"]
# SmolLM2 + EAGLE-3 in deterministic mode, x read in one tf32 part (the combined build: x-one-part, fp8-row-handles, dsv3-graphs) against
# main's two parts at c16, then x-one-part's c1 / c4 / c16; default mode c1 / c16.
set -u
C=$(cd "$(dirname "$0")" && pwd); G=$(dirname "$C")
S=$OUT/s; mkdir -p $S
X=$G/builds/combined/specdeck; M=$G/cuda/specdeck
for f in $X $M $G/cuda/smol_load.sh /tmp/g/part1; do [ -e $f ] || { echo "missing $f (the machine was not kept warm since calls A and B)" | tee $S/missing.txt; cd $OUT && tar czf s.tgz s; exit 1; }; done
[ -f /tmp/smol.gguf ] || cat /tmp/g/part1 $C/part2 | xz -d > /tmp/smol.gguf
D=/tmp/smol-drafter; mkdir -p $D; cp $C/config.json $C/heldout_prompts.jsonl $D/; [ -f $D/model.safetensors ] || xz -dc $C/drafter.safetensors.xz > $D/model.safetensors
sha256sum /tmp/smol.gguf $D/model.safetensors > $S/sha256.txt
run() { # NAME BIN CONCURRENCY FLAGS
  mkdir -p $S/$1
  OUT=$S/$1 BIN=$2 SMOL_CONCURRENCY="$3" SMOL_FLAGS="$4" timeout 200 bash $G/cuda/smol_load.sh /tmp/smol.gguf $D > $S/$1/run.out 2>&1
  rm -rf $S/$1/ptx-cache; (cd $OUT && tar czf s.tgz s)
}
run main-det $M "16" --enable-deterministic-inference
run x-det $X "1 4 16" --enable-deterministic-inference
run x-default $X "1 16" ""
for v in main-det x-det x-default; do echo "== $v"; cut -c1-200 $S/$v/smol_summary.txt; done
cd $OUT && tar czf s.tgz s && rm -rf s
