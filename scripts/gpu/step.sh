# Sourced by run.sh, serving.sh and profile_serving.sh: `step`, which runs one timed step
# under $OUT within what is left of $BUDGET_S (counted from $T0), `mem_used`, the GPUs'
# memory in use, and `prompts`, random-token prompts for the 8B shape.
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

# prompts N LEN: N prompts of LEN random words of the 8B checkpoint's word-level vocabulary
# (one token each), as JSON lines, the same for every N (a fixed seed).
prompts() {
    python3 - "$1" "$2" <<'PY'
import json, random, sys
n, length = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(0)
for _ in range(n):
    print(json.dumps({"prompt": " ".join(f"w{rng.randrange(3, 128000)}" for _ in range(length))}))
PY
}
