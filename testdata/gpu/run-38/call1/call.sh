# Next session's first call (about 6 minutes, any GPU): branch fp8-cpasync (98fe2c8, rebased as 9bb8498 onto main 89237ce; built on main
# 44ba97a; w4) against main's FP8 kernels (w2 = d79e0db, whose FP8 kernels main still has) and
# the variant xpre (w4's kernels with each step's x loaded a step ahead; gemv_fp8_g2 spills
# 208 bytes there) on DeepSeek-V3 FP8: w4's checks (conformance, the DeepSeek logits in both
# modes: the first run of the cp.async rings on a GPU), batch 1, concurrency 32.
# carry [".gpu/w2.tar.xz", ".gpu/w4.tar.xz", ".gpu/xpre", ".gpu/deepseek", ".gpu/next-a.sh"]; move assets/ and testdata/ out first.
(cd /tmp && for t in w2 w4; do tar xJf $OLDPWD/.gpu/$t.tar.xz; done)
BIN=/tmp/w4/bin/specdeck DEEPSEEK=.gpu/deepseek VARIANTS="main=/tmp/w2/bin xpre=.gpu/xpre" DET_VARIANTS=0 NCU_LAUNCHES=0 C32="build main xpre" bash scripts/gpu/kernel_ab.sh
