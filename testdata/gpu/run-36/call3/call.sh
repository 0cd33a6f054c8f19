# Run 36 call 3: w3 (fp8-ksplit 696838f: decode-kernels + narrow FP8 launches share K among
# blocks) with its checks, against w2 (decode-kernels d79e0db: FP8 loads run on across slices,
# MLA slots 32 at a time and keys 2 at a time, moe_combine over column blocks) and main 964b949
# (w/bin), on DeepSeek-V3 FP8 at batch 1 and concurrency 32.
(cd /tmp && for t in w w2 w3; do tar xJf $OLDPWD/.gpu/$t.tar.xz; done)
BIN=/tmp/w3/bin/specdeck DEEPSEEK=.gpu/deepseek VARIANTS="main=/tmp/w/bin dk=/tmp/w2/bin" DET_VARIANTS=0 NCU_LAUNCHES=0 C32="build main" bash scripts/gpu/kernel_ab.sh
