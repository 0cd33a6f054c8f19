(cd /tmp && tar xJf $OLDPWD/.gpu/w2.tar.xz) && BIN=/tmp/w2/bin/specdeck VARIANTS="grp=.gpu/grp" CHECK_VARIANTS=1 HF=0 SERVE=grp bash scripts/gpu/long_ab.sh
