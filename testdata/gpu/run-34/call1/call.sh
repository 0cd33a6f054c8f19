# .gpu/q.tar.xz: q/bin/specdeck (branch fp8-half at its first commit: main 3dc0278 with the
# FP8 tensor-core kernels of kernels/gemv.cu on f16 mmas) and q/tf32/gemv.cu (main's file).
(cd /tmp && tar xJf $OLDPWD/.gpu/q.tar.xz) && BIN=/tmp/q/bin/specdeck DEEPSEEK=.gpu/deepseek VARIANTS="tf32=/tmp/q/tf32" C32="build tf32" bash scripts/gpu/kernel_ab.sh
