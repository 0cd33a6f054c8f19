#!/usr/bin/env bash
# GPU call 1 (run from REPO/.gpu/train): keep GGUF piece aa, then start the demo training in
# its own session so it runs on while call 2 trains the SmolLM2 drafter on the same GPU.
set -euo pipefail
W=/root/work
bash gpu/piece1.sh
mkdir -p "$W/code"
cp -r sdtrain train_demo.py verify_checkpoint.py demo "$W/code/"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
python3 -c "import torch, tokenizers, safetensors; print('torch', torch.__version__, torch.cuda.get_device_name())"
cd "$W/code"
rm -f "$W/demo.rc"
setsid nohup bash -c "PYTHONUNBUFFERED=1 python3 train_demo.py --bundle demo --out $W/demo_out > $W/demo.log 2>&1; echo \$? > $W/demo.rc" \
    > /dev/null 2>&1 < /dev/null &
sleep 25
cat "$W/demo.log"
cp "$W/demo.log" "$OUT/demo_start.log"
