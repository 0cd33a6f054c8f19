"""Train an EAGLE-3 drafter for SmolLM2-135M-Instruct on the target's own chat responses.

    python3 train_smollm2.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf --bundle BUNDLE --out OUT

BUNDLE is what `prepare.py smollm2` wrote (prompts.npz: ShareGPT prompts rendered with
the GGUF's chat template and tokenized; tokenizer.json). OUT receives draft/ (the EAGLE-3
checkpoint), data.npz (the generated training sequences), samples.txt, metrics.jsonl and
summary.json.

1. The target is the GGUF dequantized to f32 and rounded to bf16 (what `specdeck convert
   gguf` produces). It answers the training prompts greedily (batched, KV cache) until
   `--gen-budget` seconds are spent, and the held-out prompts for evaluation.
2. Draft vocab: the `--draft-vocab` most frequent target ids in the responses (d2t/t2d).
3. The drafter (hidden 576 like the target; lm_head rows and final norm start from the
   target's tied embedding and norm) reads the residuals entering target layers 2, 15 and
   27 (config ids 1, 14, 26: SGLang's default for 30 layers) and is trained with the
   EAGLE-3 training-time test against the target's distribution on response positions.
"""
import argparse
import json
import os
import random
import time

import numpy as np
import torch

from sdtrain.eagle3 import drafter_config, simulated_accept_length, start_drafter, ttt_loss
from sdtrain.gguf_loader import load_gguf_llama
from sdtrain.llama import generate
from sdtrain.loop import optimise, start_run

AUX_LAYER_IDS = (1, 14, 26)
STOP_IDS = (0, 2)  # <|endoftext|>, <|im_end|>


def smollm2_drafter_config(target_cfg, draft_vocab_size):
    return drafter_config(hidden=target_cfg.hidden_size, intermediate=target_cfg.intermediate_size,
                          heads=target_cfg.num_attention_heads, kv_heads=target_cfg.num_key_value_heads,
                          head_dim=target_cfg.head_dim, vocab=target_cfg.vocab_size, draft_vocab=draft_vocab_size,
                          target_hidden=target_cfg.hidden_size, aux_layer_ids=AUX_LAYER_IDS,
                          max_positions=target_cfg.max_position_embeddings, rope_theta=target_cfg.rope_theta,
                          rms_norm_eps=round(target_cfg.rms_norm_eps, 7), bos=target_cfg.bos_token_id,
                          eos=target_cfg.eos_token_id)


def split(flat, offsets):
    return [flat[offsets[i]:offsets[i + 1]].astype(np.int64).tolist() for i in range(len(offsets) - 1)]


def answer(target, prompts, args, log, budget_s, label, max_new):
    """Greedy responses, batch by batch, until the time budget is spent."""
    start, responses = time.time(), []
    for i in range(0, len(prompts), args.gen_batch):
        if time.time() - start > budget_s:
            break
        responses.extend(generate(target, prompts[i:i + args.gen_batch], max_new, stop_ids=STOP_IDS))
        tokens = sum(map(len, responses))
        log(f"{label}: {len(responses)}/{len(prompts)} responses, {tokens} tokens, "
            f"{tokens / (time.time() - start):.0f} tok/s")
    return responses


def load_sequences(path):
    """(prompts, responses) from a data.npz written by an earlier run."""
    data = np.load(path)
    seqs = split(data["ids"], data["offsets"])
    return ([seq[:n] for seq, n in zip(seqs, data["prompt_lengths"])],
            [seq[n:] for seq, n in zip(seqs, data["prompt_lengths"])])


def pack(prompts, responses, device):
    """Right-padded ids [N, W] and the mask of positions that predict a response token."""
    width = max(len(p) + len(r) for p, r in zip(prompts, responses))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width)
    for row, (p, r) in enumerate(zip(prompts, responses)):
        ids[row, :len(p) + len(r)] = torch.tensor(p + r)
        mask[row, len(p) - 1:len(p) + len(r) - 1] = 1
    return ids.to(device), mask.to(device)


def length_batches(lengths, tokens_per_batch):
    """Index lists of similar-length sequences, each at most `tokens_per_batch` padded tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current = [], []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > tokens_per_batch:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gen-batch", type=int, default=2048)
    ap.add_argument("--max-new", type=int, default=320)
    ap.add_argument("--gen-budget", type=float, default=150.0, help="seconds of answering training prompts")
    ap.add_argument("--max-prompts", type=int, default=None)
    ap.add_argument("--heldout-new", type=int, default=192)
    ap.add_argument("--max-heldout", type=int, default=None)
    ap.add_argument("--reuse-data", default=None,
                    help="data.npz of an earlier run: its sequences are kept and their prompts not re-asked")
    ap.add_argument("--draft-vocab", type=int, default=16384)
    ap.add_argument("--tokens-per-batch", type=int, default=32768)
    ap.add_argument("--draft-lr", type=float, default=8e-4)
    ap.add_argument("--ttt-steps", type=int, default=3, help="draft steps unrolled (S=3 needs 3)")
    ap.add_argument("--draft-steps", type=int, default=None)
    ap.add_argument("--draft-budget", type=float, default=240.0)
    ap.add_argument("--eval-every", type=int, default=400)
    args = ap.parse_args()

    from tokenizers import Tokenizer
    log, autocast = start_run(args)
    tokenizer = Tokenizer.from_file(os.path.join(args.bundle, "tokenizer.json"))
    target, _ = load_gguf_llama(args.gguf, args.device)
    log(f"target: {sum(p.numel() for p in target.parameters()) / 1e6:.1f}M parameters, {target.cfg}")

    data = np.load(os.path.join(args.bundle, "prompts.npz"))
    train_prompts = split(data["train"], data["train_offsets"])
    heldout_prompts = split(data["heldout"], data["heldout_offsets"])[:args.max_heldout]
    random.Random(args.seed).shuffle(train_prompts)
    if args.max_prompts is not None:
        train_prompts = train_prompts[:args.max_prompts]

    heldout_responses = answer(target, heldout_prompts, args, log, float("inf"), "held-out", args.heldout_new)
    with open(os.path.join(args.out, "samples.txt"), "w") as f:
        for p, r in list(zip(heldout_prompts, heldout_responses))[:8]:
            f.write(f"=== prompt\n{tokenizer.decode(p, skip_special_tokens=False)}\n=== greedy response\n"
                    f"{tokenizer.decode(r, skip_special_tokens=False)}\n\n")
    reused_prompts, reused_responses = load_sequences(args.reuse_data) if args.reuse_data else ([], [])
    if set(map(tuple, reused_prompts)) & set(map(tuple, heldout_prompts)):
        raise SystemExit(f"{args.reuse_data}: holds a held-out prompt")
    asked = set(map(tuple, reused_prompts))
    train_prompts = [p for p in train_prompts if tuple(p) not in asked]
    log(f"reused {len(reused_prompts)} sequences; {len(train_prompts)} prompts left to answer")
    gen_start = time.time()
    responses = answer(target, train_prompts, args, log, args.gen_budget, "train", args.max_new)
    gen_s = time.time() - gen_start
    train_prompts = reused_prompts + train_prompts[:len(responses)]
    responses = reused_responses + responses
    lengths = [len(p) + len(r) for p, r in zip(train_prompts, responses)]
    response_tokens = sum(map(len, responses))
    log(f"training data: {len(responses)} sequences, {sum(lengths)} tokens ({response_tokens} response tokens); "
        f"{len(responses) - len(reused_prompts)} generated in {gen_s:.0f}s")
    np.savez_compressed(os.path.join(args.out, "data.npz"),
                        ids=np.concatenate([np.asarray(p + r, dtype=np.uint16) for p, r in zip(train_prompts, responses)]),
                        offsets=np.cumsum([0] + lengths), prompt_lengths=np.asarray([len(p) for p in train_prompts]))

    counts = torch.bincount(torch.tensor([t for r in responses for t in r]), minlength=target.cfg.vocab_size)
    drafter, teacher, coverage = start_drafter(smollm2_drafter_config(target.cfg, args.draft_vocab), target, counts,
                                               AUX_LAYER_IDS, args.seed + 2, args.device, log)
    params = list(drafter.parameters())

    ids, mask = pack(train_prompts, responses, "cpu")
    batches = length_batches(lengths, args.tokens_per_batch)
    rng = random.Random(args.seed + 3)
    queue = []
    eval_ids, eval_mask = pack(heldout_prompts, heldout_responses, args.device)

    def step_fn(step):
        if not queue:
            queue.extend(rng.sample(batches, len(batches)))
        rows = queue.pop()
        width = max(lengths[i] for i in rows)
        batch_ids, batch_mask = ids[rows, :width].to(args.device), mask[rows, :width].to(args.device)
        with autocast():
            loss, accs = ttt_loss(drafter, teacher, batch_ids, batch_mask, args.ttt_steps)
        return loss, {f"acc{k}": a for k, a in enumerate(accs)}

    def accept_length():
        drafter.eval()
        total = rounds = 0.0
        with autocast():
            for i in range(0, eval_ids.shape[0], 16):
                t, r = simulated_accept_length(drafter, teacher, eval_ids[i:i + 16], eval_mask[i:i + 16], steps=3)
                total, rounds = total + t, rounds + r
        drafter.train()
        return total / max(rounds, 1.0), rounds

    def eval_fn(step):
        value, rounds = accept_length()
        log.record(phase="draft-eval", step=step, accept_length=round(value, 4))
        log(f"drafter step {step}: simulated accept length (S=3, K=1) {value:.3f} over {rounds:.0f} held-out rounds")

    log(f"{len(batches)} batches per epoch")
    train_start = time.time()
    steps = optimise(params, step_fn, lr=args.draft_lr, weight_decay=0.0, log=log, name="drafter",
                     steps=args.draft_steps, budget_s=args.draft_budget, warmup=100, eval_every=args.eval_every,
                     eval_fn=eval_fn)
    train_s = time.time() - train_start
    drafter.eval()
    drafter.save(os.path.join(args.out, "draft"))
    value, rounds = accept_length()
    log(f"drafter saved; simulated accept length {value:.3f}")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"args": vars(args), "sequences": len(responses), "reused_sequences": len(reused_prompts),
                   "tokens": sum(lengths),
                   "response_tokens": response_tokens, "generation_s": round(gen_s, 1),
                   "draft_vocab_coverage": coverage, "steps": steps, "epochs": round(steps / len(batches), 2),
                   "train_s": round(train_s, 1), "simulated_accept_length": value, "heldout_rounds": rounds,
                   "wall_s": round(log.elapsed(), 1)}, f, indent=2)


if __name__ == "__main__":
    main()
