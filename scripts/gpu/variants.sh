# Sourced by kernel_ab.sh and long_ab.sh: the build under test and its variants. $BIN is the
# build; VARIANTS="name=dir ..." names folders of kernel files that stand in for the embedded
# ones (SPECDECK_KERNEL_DIR, src/knobs.rs), or that hold another build's `specdeck`. Sets
# NAMES (build first) and `with NAME CMD...`, which runs CMD with RUN_BIN (and the kernel
# folder) of that variant.
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
