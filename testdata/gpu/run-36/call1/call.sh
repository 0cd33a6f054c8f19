# Call 1: the paged attention's slots read 32 at a time (variant attn: common.cuh, attention.cu,
# latent.cu) against main 964b949's embedded kernels, on the 8B shape; checks of the variant.
(cd /tmp && tar xJf $OLDPWD/.gpu/w.tar.xz) && BIN=/tmp/w/bin/specdeck VARIANTS="attn=/tmp/w/attn" SERVE=attn bash scripts/gpu/long_ab.sh
