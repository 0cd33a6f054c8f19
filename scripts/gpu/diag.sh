#!/usr/bin/env bash
# Where does a tensor-parallel run hang? Thread names, wait channels and kernel stacks of
# the live process after it should have finished.
# usage (repository root on the GPU machine, after scripts/gpu/stage.sh): bash .gpu/cuda/diag.sh OUT_DIR
B=.gpu/cuda/specdeck; D=$1; export NCCL_NVLS_ENABLE=0 SPECDECK_PTX_CACHE=/tmp/ptx
dump() { local pid=$1; for t in /proc/$pid/task/*; do echo "== $(cat $t/comm) wchan=$(cat $t/wchan) state=$(awk '{print $3}' $t/stat)"; head -6 $t/stack 2>/dev/null; done; }
probe() { local name=$1 wait=$2; shift 2; "$@" > $D/$name.out 2> $D/$name.err & local p=$!; local s=$(date +%s%N)
  for i in $(seq 1 $((wait*10))); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
  if kill -0 $p 2>/dev/null; then echo "alive after ${wait}s" > $D/$name.dump; dump $p >> $D/$name.dump; kill -9 $p; else wait $p; echo "exited rc=$? in $(( ($(date +%s%N)-s)/1000000 )) ms" > $D/$name.dump; fi; }
P="HAMLET.
To be, or not to be"
probe tp2 25 $B generate --device cuda --tp-size 2 --model-path testdata/demo/target --speculative-algorithm NONE --prompt "$P" --max-new-tokens 24 --json
probe tp2eagle 25 $B generate --device cuda --tp-size 2 --model-path testdata/demo/target --speculative-algorithm EAGLE3 --speculative-draft-model-path testdata/demo/draft --context-length 131072 --prompt "$P" --max-new-tokens 24 --json
probe tpm 60 $B cuda-check --out $D/tpm --sections tensor-parallel,tensor-parallel-model
for f in $D/*.dump; do echo "#### $f"; head -60 $f; done
for f in $D/*.err; do echo "#### $f"; tail -4 $f; done
for f in $D/tp*.out; do echo "#### $f"; head -c 300 $f; echo; done
