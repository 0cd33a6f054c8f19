# Call 2: DeepSeek-V3 FP8, main 964b949 (.gpu/w/bin) with its checks (228 conformance), the
# occ3 variant (three blocks an SM), Nsight Compute over 8 FP8 launches in both modes, c32 of the build.
(cd /tmp && [ -x /tmp/w/bin/specdeck ] || tar xJf $OLDPWD/.gpu/w.tar.xz) && BIN=/tmp/w/bin/specdeck DEEPSEEK=.gpu/deepseek VARIANTS="occ3=/tmp/w/occ3" DET_VARIANTS=0 NCU_LAUNCHES=8 C32="build" bash scripts/gpu/kernel_ab.sh
