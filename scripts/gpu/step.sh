# Sourced by run.sh and serving.sh: `step`, which runs one timed step under $OUT within
# what is left of $BUDGET_S (counted from $T0), and `mem_used`, the GPUs' memory in use.
mem_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | paste -sd, -; }

# step NAME LIMIT_S CMD...: run CMD with stdout/stderr under $OUT/NAME.{out,err}, within
# both its own limit and what is left of the budget; log rc and seconds.
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET_S - ($(date +%s) - T0)))
    if ((left < 20)); then
        echo "$name skipped: out of time" | tee -a "$OUT/steps.log"
        return 0
    fi
    ((limit > left)) && limit=$left
    echo "== $name (limit ${limit}s)" >&2
    local s=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    local rc=$?
    echo "$name rc=$rc seconds=$(($(date +%s) - s))" | tee -a "$OUT/steps.log" >&2
    echo "after $name $(mem_used)" >>"$OUT/memory.log"
    tail -n 5 "$OUT/$name.err" >&2
    return 0
}
