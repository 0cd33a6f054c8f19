# Next session's second call (about 6 minutes): what each kernel family costs a DeepSeek-V3
# FP8 decode step run from CUDA graphs (ablate.sh: the step without each family's launches;
# Nsight Systems is not on the machine, and Nsight Compute times kernels alone with cold
# caches). w2 is main 0c2b20b's build.
# carry [".gpu/w2.tar.xz", ".gpu/next2.sh"]; move assets/ and testdata/ out first.
(cd /tmp && tar xJf $OLDPWD/.gpu/w2.tar.xz) && SPECDECK_PROFILE_SHAPE=dsv3-fp8 SPECDECK_BIN=/tmp/w2/bin/specdeck bash scripts/gpu/ablate.sh | tee $OUT/ablate.txt
