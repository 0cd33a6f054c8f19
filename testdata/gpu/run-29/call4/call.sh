#!/usr/bin/env bash
# Run 28, call 4: speculation under load in deterministic mode (8-row groups in one launch):
# SmolLM2-135M + its EAGLE-3 drafter, 64 held-out prompts x 320, c1 / c4 / c16, against
# target-only at the same concurrency, every bench with --enable-deterministic-inference.
# The GGUF came over in calls 2 and 3 (/tmp/smol.gguf).
set -u
G=$(cd "$(dirname "$0")" && pwd)
S=/tmp/smolout; rm -rf $S; mkdir -p $S
sha256sum /tmp/smol.gguf > $S/gguf.sha256
OUT=$S SMOL_FLAGS=--enable-deterministic-inference timeout 560 bash $G/cuda/smol_load.sh /tmp/smol.gguf $G/drafter > $S/run.out 2>&1
mkdir -p $OUT/s && cp $S/*.json $S/*.err $S/*.txt $S/*.log $S/gguf.sha256 $S/run.out $OUT/s/ 2>/dev/null
cat $S/smol-steps.log $S/smol_summary.txt
cd $OUT && tar czf s.tgz s && rm -rf s
