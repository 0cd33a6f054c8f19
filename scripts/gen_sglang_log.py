#!/usr/bin/env python3
"""Write a large synthetic SGLang server log for `specdeck replay` benchmarks.

The log is a real-shaped run: the 4-rank classic-wording start-up of
testdata/logs/sglang-classic/success.tp4.log, then hours of serving (`Decode batch` lines with
accept lengths, `Prefill batch` lines, uvicorn access lines, an occasional warning), then a
scheduler crash with a traceback, so the diagnosis comes from the very end of the file.

    python3 scripts/gen_sglang_log.py --size-mb 1024 --out /tmp/sglang-1g.log

Deterministic for a given size. Do not commit the output.
"""

import argparse
import datetime
import os

STARTUP = "testdata/logs/sglang-classic/success.tp4.log"


def serving_second(ts, i):
    """The lines of one second of serving, as SGLang prints them (rank 0, classic wording)."""
    out = []
    for k in range(6):
        n = i * 6 + k
        accept = 1.6 + (n * 37 % 180) / 100
        out.append(
            f"[{ts} TP0] Decode batch. #running-req: {8 + n % 40}, #token: {10000 + n * 13 % 90000}, "
            f"token usage: {(n % 97) / 100:.2f}, accept len: {accept:.2f}, cuda graph: True, "
            f"gen throughput (token/s): {600 + n * 7 % 900:.2f}, #queue-req: {n % 3}, "
        )
    out.append(
        f"[{ts} TP0] Prefill batch. #new-seq: {1 + i % 4}, #new-token: {100 + i * 31 % 4000}, #cached-token: {i * 17 % 2000}, "
        f"token usage: {(i % 97) / 100:.2f}, #running-req: {8 + i % 40}, #queue-req: 0, "
    )
    for k in range(4):
        out.append(f'INFO:     10.0.{i % 256}.{k}:{40000 + (i * 4 + k) % 20000} - "POST /generate HTTP/1.1" 200 OK')
    if i % 600 == 0:
        out.append(f"[{ts} TP0] Warning: request {i} hit max_new_tokens; the output is truncated.")
    return out


CRASH = """[{ts} TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 3210, in run_scheduler_process
    scheduler.event_loop_normal()
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 940, in event_loop_normal
    result = self.run_batch(batch)
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/speculative/eagle_worker.py", line 300, in forward_batch_generation
    self.forward_draft_extend(
RuntimeError: CUDA error: an illegal memory access was encountered
[{ts}] Received sigquit from a child process. It usually means the child failed.
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    target = args.size_mb * 1024 * 1024
    with open(STARTUP, encoding="utf-8") as f:
        startup = f.read()
    t = datetime.datetime(2026, 3, 2, 10, 1, 30)
    lines = 0
    with open(args.out, "w", encoding="utf-8", buffering=1 << 22) as out:
        out.write(startup)
        lines += startup.count("\n")
        written = len(startup.encode())
        i = 0
        while written < target:
            block = "\n".join(serving_second(t.strftime("%Y-%m-%d %H:%M:%S"), i)) + "\n"
            out.write(block)
            written += len(block)
            lines += block.count("\n")
            t += datetime.timedelta(seconds=1)
            i += 1
        crash = CRASH.format(ts=t.strftime("%Y-%m-%d %H:%M:%S"))
        out.write(crash)
        lines += crash.count("\n")
    print(f"{args.out}: {os.path.getsize(args.out)} bytes, {lines} lines, {i} s of serving")


if __name__ == "__main__":
    main()
