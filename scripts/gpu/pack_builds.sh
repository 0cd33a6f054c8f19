#!/usr/bin/env bash
# Several builds in one device call: the working tree's (staged by stage.sh into .gpu/cuda,
# with the GPU scripts) and one per git ref, each stripped binary at .gpu/builds/REF/specdeck,
# all packed with xz into .gpu/pack/builds.tar.xz. Three builds of 33 MB each do not fit the
# 64 MiB a call carries; packed they take about 18 MB each (run 29).
#
# usage (repository root, CPU machine):  bash scripts/gpu/pack_builds.sh [REF ...] [-- EXTRA_DIR ...]
#   EXTRA_DIRs (say .gpu/deepseek) go into the same archive.
# Then carry [".gpu/pack", ".gpu/callN.sh"] and run `tar xJf .gpu/pack/builds.tar.xz && bash
# .gpu/callN.sh`; a script compares e.g. .gpu/cuda/specdeck with SPECDECK_BIN=.gpu/builds/REF/specdeck
# (ab.sh on the 8B shape, ablate.sh with SPECDECK_PROFILE_SHAPE=dsv3-fp8).
set -euo pipefail
refs=() extra=()
while (($#)); do
    if [ "$1" = -- ]; then
        shift
        extra=("$@")
        break
    fi
    refs+=("$1")
    shift
done
bash scripts/gpu/stage.sh .gpu/cuda
rm -rf .gpu/builds
# One target directory for every ref's build, so only what differs recompiles.
target="${SPECDECK_PACK_TARGET:-/tmp/specdeck-pack-target}"
for ref in "${refs[@]}"; do
    name=$(echo "$ref" | tr '/' '-')
    tree=$(mktemp -d)
    git worktree add --detach "$tree" "$ref" >/dev/null
    (cd "$tree" && CARGO_TARGET_DIR="$target" cargo build --release --locked --bin specdeck)
    mkdir -p ".gpu/builds/$name"
    cp "$target/release/specdeck" ".gpu/builds/$name/specdeck"
    strip ".gpu/builds/$name/specdeck"
    git worktree remove --force "$tree"
done
mkdir -p .gpu/pack
tar cf - .gpu/cuda .gpu/builds "${extra[@]}" | xz -T2 -6 >.gpu/pack/builds.tar.xz
ls -la .gpu/pack/builds.tar.xz
