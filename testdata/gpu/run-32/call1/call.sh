# Run 32, call 1 (H100; 362 s). Builds: new = main 67973fd (fp8-pieces), base = 5e7ce85, both
# `cargo build --release`, stripped, packed into .gpu/p.tar.xz as p/builds/{new,base}/specdeck;
# .gpu/deepseek = a copy of testdata/deepseek; assets/ and testdata/ moved out of the tree.
#   carry: [".gpu/p.tar.xz", ".gpu/deepseek"]
(cd /tmp && tar xJf $OLDPWD/.gpu/p.tar.xz) && nvidia-smi --query-gpu=name --format=csv,noheader && \
    BUILDS=/tmp/p/builds NEW=new BASE=base DEEPSEEK=.gpu/deepseek bash scripts/gpu/dsv3_ab.sh
