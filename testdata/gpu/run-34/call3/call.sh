# .gpu/r.tar.xz: r/builds/new/specdeck (branch fp8-half: every FP8 step of up to 32 rows on
# the f16 tensor-core kernels) and r/builds/base/specdeck (run 33's build, main's kernels).
(cd /tmp && tar xJf $OLDPWD/.gpu/r.tar.xz) && BUILDS=/tmp/r/builds NEW=new BASE=base DEEPSEEK=.gpu/deepseek bash scripts/gpu/dsv3_ab.sh
