#!/usr/bin/env bash
# The Kimi demo pair in one device call (run from REPO/.gpu/train/kimi, staged as
# tools/train/README.md says): compressed-tensors onto PYTHONPATH, an untrained smoke run of
# the whole pipeline, then the real training. What comes back must fit the device tool's
# per-file limit: the logs, the drafter, and the target's weights in 4 MB pieces
# (`cat target.part* > model.safetensors`, checked against target.sha256).
set -uo pipefail
mkdir -p /tmp/py
python3 -c "import zipfile,glob;[zipfile.ZipFile(w).extractall('/tmp/py') for w in glob.glob('wheels/*.whl')]"
export PYTHONPATH=/tmp/py PYTHONUNBUFFERED=1
R=/tmp/kimi; mkdir -p $R
timeout 120 python3 train_demo.py --family kimi --int4 --bundle demo --out $R/smoke --placeholder > $R/smoke.log 2>&1
echo "smoke rc=$?"; tail -25 $R/smoke.log
if [ -f $R/smoke/draft/config.json ]; then
  timeout ${KIMI_SECONDS:-480} python3 train_demo.py --family kimi --int4 --bundle demo --out $R/out $KIMI_ARGS > $R/train.log 2>&1
  echo "train rc=$?"; tail -40 $R/train.log
fi
cp $R/*.log $OUT/
if [ -f $R/out/summary.json ]; then
  cp $R/out/summary.json $R/out/samples.txt $R/out/metrics.jsonl $OUT/
  cp $R/out/draft/config.json $OUT/draft_config.json; cp $R/out/draft/model.safetensors $OUT/draft.safetensors
  cp $R/out/target/config.json $OUT/target_config.json; cp $R/out/target/tokenizer_config.json $OUT/
  (cd $R/out/target && split -b 4000000 -d -a 1 model.safetensors $OUT/target.part && sha256sum model.safetensors > $OUT/target.sha256)
fi
