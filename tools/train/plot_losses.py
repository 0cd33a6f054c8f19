"""Plot the loss curves of a demo run and a SmolLM2 drafter run into one PNG.

    python3 plot_losses.py DEMO_METRICS.jsonl SMOL_METRICS.jsonl [MORE_SMOL_METRICS.jsonl ...] OUT.png

Further SmolLM2 files are rounds that continued training the previous round's drafter
(`--init-from`): their steps are drawn after it, with a line where each round starts.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def series(records, phase, key):
    rows = [r for r in records if r.get("phase") == phase and key in r]
    return [r["step"] for r in rows], [r[key] for r in rows]


def continued(rounds):
    """The records of consecutive training rounds as one run: steps offset, plus where each later round starts."""
    merged, offset, starts = [], 0, []
    for i, records in enumerate(rounds):
        if i:
            starts.append(offset)
        merged += [dict(r, step=r["step"] + offset) if "step" in r else r for r in records]
        offset += max((r["step"] for r in records if r.get("phase") == "drafter"), default=0)
    return merged, starts


def drafter_panel(ax, records, title, round_starts=()):
    ax.plot(*series(records, "drafter", "loss"), label="TTT loss (weighted sum)", color="black")
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    twin = ax.twinx()
    for k in range(4):
        steps, acc = series(records, "drafter", f"acc{k}")
        if steps:
            twin.plot(steps, acc, label=f"top-1 agreement, draft step {k + 1}", alpha=0.8)
    twin.set_ylim(0, 1)
    twin.set_ylabel("agreement with target argmax")
    steps, accept = series(records, "draft-eval", "accept_length")
    if steps:
        twin.plot(steps, [a / 4 for a in accept], "o--", color="gray", label="simulated accept length / 4 (held-out)")
    for start in round_starts:
        ax.axvline(start, color="red", linestyle=":", label=f"next round (warm start) at step {start}")
    if round_starts:
        ax.legend(loc="upper right", fontsize=7)
    twin.legend(loc="center right", fontsize=7)


def main(demo_path, *smol_paths_then_out):
    *smol_paths, out = smol_paths_then_out
    demo = read(demo_path)
    smol, round_starts = continued([read(p) for p in smol_paths])
    fig, axes = plt.subplots(1, 3, figsize=(18, 5))
    ax = axes[0]
    ax.plot(*series(demo, "target", "loss"), label="train (dropout 0.2)")
    ax.plot(*series(demo, "target-eval", "heldout_loss"), "o-", label="held-out plays")
    ax.set_title("demo target: Shakespeare LM, cross-entropy (nats/token)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    drafter_panel(axes[1], demo, "demo EAGLE-3 drafter")
    drafter_panel(axes[2], smol, "SmolLM2-135M-Instruct EAGLE-3 drafter", round_starts)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
