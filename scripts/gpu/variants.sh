# Sourced by kernel_ab.sh and long_ab.sh: the build under test and its variants, and
# free_gpu between their runs. $BIN is the build; VARIANTS="name=dir ..." names folders of
# kernel files that stand in for the embedded ones (SPECDECK_KERNEL_DIR, src/knobs.rs), or
# that hold another build's `specdeck`. Sets NAMES (build first) and `with NAME CMD...`, which
# runs CMD with RUN_BIN (and the kernel folder) of that variant.
declare -A DIRS
NAMES=(build)
for v in ${VARIANTS:-}; do
    DIRS[${v%%=*}]=$(realpath "${v#*=}")
    NAMES+=("${v%%=*}")
done
with() {
    local name=$1
    shift
    if [ "$name" = build ]; then
        RUN_BIN=$BIN "$@"
    elif [ -x "${DIRS[$name]}/specdeck" ]; then
        RUN_BIN=${DIRS[$name]}/specdeck "$@"
    else
        RUN_BIN=$BIN SPECDECK_KERNEL_DIR="${DIRS[$name]}" "$@"
    fi
}
# Kills what still holds the GPU (a profile's target cut short) and waits until its memory is
# free: the next run otherwise fails to open the GPU (run 36 call 2).
free_gpu() {
    nvidia-smi --query-compute-apps=pid --format=csv,noheader | xargs -r kill -9
    for _ in $(seq 1 30); do
        [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && return 0
        sleep 1
    done
}
