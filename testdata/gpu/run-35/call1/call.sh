# .gpu/w.tar.xz: w/bin/specdeck (branch fp8-heads: kv_b's per-head products on the f16 FP8
# kernels), w/main/specdeck (run 34 call 3's new build, main b69e379's kernels), and w/pf2,
# w/l2pf (two variants of the branch's kernels/gemv.cu: loads two steps ahead; each slice
# asked of L2 first). Cut at the call's 400 s during the third concurrency-32 run.
(cd /tmp && tar xJf $OLDPWD/.gpu/w.tar.xz) && BIN=/tmp/w/bin/specdeck DEEPSEEK=.gpu/deepseek VARIANTS="main=/tmp/w/main pf2=/tmp/w/pf2 l2pf=/tmp/w/l2pf" DET_VARIANTS=0 NCU_LAUNCHES=0 C32="build main pf2 l2pf" bash scripts/gpu/kernel_ab.sh
