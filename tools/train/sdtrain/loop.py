"""Seeding, logging and a wall-clock-budgeted optimisation loop.

A run either takes a fixed `steps`, or measures its step time as it goes and fits as many
steps as its time budget allows (re-planned every `probe` steps, since another job may
share the GPU); the count is logged, and passing it back as `steps` repeats the run.
"""
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


class Log:
    """Prints with elapsed seconds and appends JSON records (the loss curves) to a file."""

    def __init__(self, path):
        self.start = time.time()
        self.records = open(path, "w")

    def __call__(self, msg):
        print(f"[{time.time() - self.start:7.1f}s] {msg}", flush=True)
        sys.stdout.flush()

    def elapsed(self):
        return time.time() - self.start

    def record(self, **fields):
        fields["t"] = round(time.time() - self.start, 2)
        self.records.write(json.dumps(fields) + "\n")
        self.records.flush()


def start_run(args):
    """Seed, create `args.out`, and return (log, a bf16 autocast context factory for args.device)."""
    seed_everything(args.seed)
    os.makedirs(args.out, exist_ok=True)
    device_type = "cuda" if args.device.startswith("cuda") else "cpu"
    return Log(os.path.join(args.out, "metrics.jsonl")), lambda: torch.autocast(device_type, dtype=torch.bfloat16)


def lr_factor(step, warmup, total, floor=0.1):
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def optimise(params, step_fn, *, lr, weight_decay, log, name, steps=None, budget_s=None, warmup=100,
             probe=30, max_steps=100000, eval_every=0, eval_fn=None, clip=1.0):
    """Run AdamW over `step_fn(step) -> (loss, extras dict)`; returns the number of steps run."""
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), fused=torch.cuda.is_available())
    total = steps if steps is not None else max_steps
    start = mark = time.time()
    step = 0
    while step < total:
        for group in opt.param_groups:
            group["lr"] = lr * lr_factor(step, warmup, total)
        loss, extras = step_fn(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        step += 1
        if steps is None and step % probe == 0:
            # Re-plan from the recent step time: another job may share the GPU.
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            now = time.time()
            per_step = (now - mark) / probe
            mark = now
            planned = total
            total = max(step + 1, min(max_steps, step + int((budget_s - (now - start)) / per_step)))
            if step == probe or abs(total - planned) > 0.05 * planned:
                log(f"{name}: {per_step * 1000:.1f} ms/step -> {total} steps in {budget_s:.0f}s")
        if step % 25 == 0 or step == total:
            # Reading values back syncs with the GPU, so only at logging steps.
            values = {k: round(float(v), 4) for k, v in extras.items()}
            log.record(phase=name, step=step, loss=round(loss.item(), 5), lr=opt.param_groups[0]["lr"],
                       grad_norm=round(grad_norm.item(), 4), **values)
            if step % 100 == 0 or step == total:
                log(f"{name} step {step}/{total} loss {loss.item():.4f} " +
                    " ".join(f"{k} {v}" for k, v in values.items()))
        if eval_fn is not None and eval_every and (step % eval_every == 0 or step == total):
            eval_start = time.time()
            eval_fn(step)
            mark += time.time() - eval_start  # evaluation time is not step time
    log(f"{name}: {step} steps in {time.time() - start:.1f}s")
    return step
