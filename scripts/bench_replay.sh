#!/usr/bin/env bash
# Replay throughput and peak memory on a synthetic SGLang log, with `wc -l` on the same file
# in the same run as the reference. The log is deleted afterwards.
#
#   scripts/bench_replay.sh [SIZE_MB=1024] [RUNS=3]
#
# Needs target/release/specdeck (cargo build --release --bin specdeck) and GNU time.
set -euo pipefail
SIZE_MB=${1:-1024}
RUNS=${2:-3}
BIN=target/release/specdeck
LOG=$(mktemp --tmpdir "specdeck-sglang-${SIZE_MB}m.XXXXXX.log")
trap 'rm -f "$LOG"' EXIT

python3 scripts/gen_sglang_log.py --size-mb "$SIZE_MB" --out "$LOG"
LINES=$(wc -l < "$LOG")
cat "$LOG" > /dev/null # page cache warm for both tools

measure() { # result variable, label, command...: best wall and CPU over RUNS, largest max RSS
  local var=$1 label=$2; shift 2
  local best_wall=999999 best_user=999999 rss=0
  for _ in $(seq "$RUNS"); do
    local out
    # replay exits 1 for a failed launch: that status is not the benchmark's
    out=$( { /usr/bin/time -f '%e %U %S %M' "$@" > /dev/null || true; } 2>&1 | tail -1 )
    read -r wall user sys kib <<< "$out"
    best_wall=$(python3 -c "print(min($best_wall, $wall))")
    best_user=$(python3 -c "print(min($best_user, $user + $sys))")
    rss=$(( kib > rss ? kib : rss ))
  done
  # /usr/bin/time counts in 10 ms steps: below that a rate means nothing
  printf '%-22s wall %7.2f s  cpu %7.2f s  %8s M lines/s (cpu)  max RSS %6.1f MiB\n' \
    "$label" "$best_wall" "$best_user" \
    "$(python3 -c "print('%.2f' % ($LINES / $best_user / 1e6) if $best_user >= 0.01 else '<10 ms')")" \
    "$(python3 -c "print($rss / 1024)")"
  printf -v "$var" '%s' "$best_user"
}

echo "$LOG: $(stat -c %s "$LOG") bytes, $LINES lines, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
measure WC_CPU "wc -l" wc -l "$LOG"
measure REPLAY_CPU "specdeck replay --json" "$BIN" replay --json "$LOG"
{ "$BIN" replay --json "$LOG" || true; } | python3 -c 'import json,sys; r=json.load(sys.stdin); print("report:", r["final"], r["lines"], "lines, accept_len", r["accept_len"], [f["id"] for f in r["findings"]])'
python3 -c "print('replay cpu / wc -l cpu: %.1fx' % ($REPLAY_CPU / $WC_CPU) if $WC_CPU >= 0.01 else 'wc -l took under 10 ms: no ratio')"
