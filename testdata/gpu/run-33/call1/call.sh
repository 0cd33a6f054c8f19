# Run 33, call 1 (H100; cut off by the session's device budget at 247 s, after the four batch-1
# runs). Builds: new = branch fp8-row-sharing (14b093f), base = 5e7ce85 (the same kernels as
# main's revert 19f3dde), both `cargo build --release`, stripped, packed into .gpu/p.tar.xz as
# p/builds/{new,base}/specdeck; .gpu/deepseek = a copy of testdata/deepseek; assets/ and
# testdata/ moved out of the tree.   carry: [".gpu/p.tar.xz", ".gpu/deepseek"]
(cd /tmp && tar xJf $OLDPWD/.gpu/p.tar.xz) && nvidia-smi --query-gpu=name --format=csv,noheader && \
    BUILDS=/tmp/p/builds NEW=new BASE=base DEEPSEEK=.gpu/deepseek bash scripts/gpu/dsv3_ab.sh
