#!/usr/bin/env bash
# GPU call (run from REPO/.gpu/train/round3-pI): append this piece of the round-3 payload.
set -euo pipefail
mkdir -p /root/work
cat payload.tar.? >> /root/work/payload.tar
ls -la /root/work/payload.tar
