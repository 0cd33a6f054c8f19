#!/usr/bin/env bash
# Idle CPU of the running console, measured from /proc/<pid>/stat in tmux.
#
#   scripts/console_idle_cpu.sh [SECONDS] [-- COMMAND...]
#
# Starts COMMAND (default: target/release/specdeck, the demo) in a private tmux server at
# 120x40, waits until it is ready and has generated (pressing 1 at the demo's diagnosis),
# then samples utime+stime of the process over SECONDS (default 20). As a
# reference measured in the same run, `top -d 1` (a terminal monitor redrawing once a
# second) is measured the same way. Prints both as a percentage of one core.
set -euo pipefail
seconds=${1:-20}
shift || true
[[ "${1:-}" == "--" ]] && shift
cmd=("$@")
if [[ ${#cmd[@]} -eq 0 ]]; then
  cmd=("$(dirname "$0")/../target/release/specdeck")
fi
sock="specdeck-idle-$$"
home=$(mktemp -d)
trap 'tmux -L "$sock" kill-server 2>/dev/null || true; rm -rf "$home"' EXIT
hz=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure WINDOW PID: percent of one core over $seconds
measure() {
  local pid=$1 t0 t1 w0 w1
  t0=$(cpu_ticks "$pid"); w0=$(date +%s.%N)
  sleep "$seconds"
  t1=$(cpu_ticks "$pid"); w1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" -v s="$w0" -v e="$w1" -v hz="$hz" 'BEGIN { printf "%.3f", 100 * (b - a) / hz / (e - s) }'
}

start() { # NAME COMMAND...: run in its own window with `exec`, print its pid
  local name=$1; shift
  local line
  printf -v line '%q ' "$@"
  tmux -L "$sock" new-window -d -n "$name" \
    "env HOME=$home TERM=screen-256color bash --norc --noprofile -c 'exec $line'"
  sleep 0.5
  tmux -L "$sock" display-message -p -t "$name" '#{pane_pid}'
}

tmux -L "$sock" new-session -d -s idle -x 120 -y 40 "sleep 100000"
pid=$(start console "${cmd[@]}")
# The demo stops at its diagnosis: press 1 (the remedy) once, then wait for the generation.
fixed=no
for _ in $(seq 1 1200); do
  screen=$(tmux -L "$sock" capture-pane -p -t console)
  if grep -q "tok/s .* done" <<<"$screen"; then break; fi
  if [[ $fixed == no ]] && grep -q "press 1 to fix" <<<"$screen"; then
    tmux -L "$sock" send-keys -t console 1
    fixed=yes
  fi
  sleep 0.1
done
grep -q "tok/s .* done" <<<"$screen" || { echo "the console never finished generating:"; echo "$screen"; exit 1; }
sleep 2 # let the last frame and the telemetry settle
console=$(measure "$pid")
ref=$(start reference top -d 1)
sleep 2
reference=$(measure "$ref")
echo "console idle: ${console}% of one core over ${seconds}s (pid $pid)"
echo "reference top -d 1: ${reference}% of one core over ${seconds}s"
awk -v c="$console" -v r="$reference" 'BEGIN { if (r > 0) printf "ratio console/top: %.2f\n", c / r }'
