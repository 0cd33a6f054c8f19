"""Train an EAGLE-3 drafter for SmolLM2-135M-Instruct on the target's own chat responses.

    python3 train_smollm2.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf --bundle BUNDLE --out OUT

BUNDLE is what `prepare.py smollm2` wrote (prompts.npz: ShareGPT prompts rendered with
the GGUF's chat template and tokenized; tokenizer.json). OUT receives draft/ (the EAGLE-3
checkpoint), data.npz (the generated training sequences), samples.txt, metrics.jsonl and
summary.json.

1. The target is the GGUF dequantized to f32 and rounded to bf16 (what `specdeck convert
   gguf` produces). It answers the held-out prompts for evaluation and the training prompts
   not answered in `--reuse-data` greedily (batched, KV cache, one CUDA graph per batch's
   decode step) until `--gen-budget` seconds are spent; then, for `--sample-budget`
   seconds, all training prompts once more at `--sample-temperature` (more contexts; the
   loss is against the target's distribution either way).
2. Draft vocab: the `--draft-vocab` most frequent target ids in the responses (d2t/t2d),
   or the vocab of the drafter given by `--init-from`, whose weights training continues.
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

from sdtrain.eagle3 import drafter_config, resume_drafter, simulated_accept_length, start_drafter, ttt_loss
from sdtrain.gguf_loader import load_gguf_llama
from sdtrain.llama import generate_fast
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


def answer(target, prompts, args, log, budget_s, label, max_new, temperature=0.0, limit=None):
    """Responses (greedy unless `temperature`), shortest prompts first in batches, until the budget is spent
    (or `limit` prompts are answered).

    Returns (the prompts answered, in their given order, and their responses).
    """
    start, answered = time.time(), {}
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))[:limit]  # less left padding per batch
    for i in range(0, len(order), args.gen_batch):
        if time.time() - start > budget_s:
            break
        rows = order[i:i + args.gen_batch]
        batch = [prompts[r] for r in rows]
        try:
            outs = generate_fast(target, batch, max_new, stop_ids=STOP_IDS, temperature=temperature,
                                 use_graph=None if args.cuda_graphs else False)
        except RuntimeError as err:
            if not args.cuda_graphs:
                raise
            # A capture failure leaves the model untouched: decode this and later batches eagerly.
            log(f"{label}: CUDA graph decoding failed ({err}); decoding eagerly from here on")
            args.cuda_graphs = False
            torch.cuda.empty_cache()
            outs = generate_fast(target, batch, max_new, stop_ids=STOP_IDS, temperature=temperature, use_graph=False)
        for row, response in zip(rows, outs):
            answered[row] = response
        tokens = sum(map(len, answered.values()))
        log(f"{label}: {len(answered)}/{len(prompts)} responses, {tokens} tokens, "
            f"{tokens / (time.time() - start):.0f} tok/s")
    rows = sorted(answered)
    return [prompts[r] for r in rows], [answered[r] for r in rows]


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
    ap.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false",
                    help="decode eagerly (~90 ms per token step on the lent H200, launch-bound)")
    ap.add_argument("--max-new", type=int, default=320)
    ap.add_argument("--gen-budget", type=float, default=150.0, help="seconds of answering training prompts")
    ap.add_argument("--max-prompts", type=int, default=None)
    ap.add_argument("--sample-budget", type=float, default=0.0,
                    help="seconds of extra sampled answers to all training prompts, after the greedy ones")
    ap.add_argument("--sample-temperature", type=float, default=0.7)
    ap.add_argument("--max-sampled", type=int, default=None, help="at most this many sampled answers")
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
    ap.add_argument("--finish-by", type=float, default=None,
                    help="Unix time by which training must end (leaves ~20 s to save); overrides --draft-budget")
    ap.add_argument("--init-from", default=None,
                    help="a drafter folder to continue training (its config, weights and draft vocab)")
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

    _, heldout_responses = answer(target, heldout_prompts, args, log, float("inf"), "held-out", args.heldout_new)
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
    new_prompts, responses = answer(target, train_prompts, args, log, args.gen_budget, "train", args.max_new)
    train_prompts = reused_prompts + new_prompts
    responses = reused_responses + responses
    sampled_prompts, sampled_responses = [], []
    if args.sample_budget > 0:
        torch.manual_seed(args.seed + 4)
        sampled_prompts, sampled_responses = answer(target, train_prompts, args, log, args.sample_budget,
                                                    f"sampled T={args.sample_temperature}", args.max_new,
                                                    temperature=args.sample_temperature, limit=args.max_sampled)
    gen_s = time.time() - gen_start
    greedy_count = len(responses)
    train_prompts, responses = train_prompts + sampled_prompts, responses + sampled_responses
    lengths = [len(p) + len(r) for p, r in zip(train_prompts, responses)]
    response_tokens = sum(map(len, responses))
    log(f"training data: {len(responses)} sequences, {sum(lengths)} tokens ({response_tokens} response tokens); "
        f"{greedy_count - len(reused_prompts)} greedy and {len(sampled_responses)} sampled generated in {gen_s:.0f}s")
    np.savez_compressed(os.path.join(args.out, "data.npz"),
                        ids=np.concatenate([np.asarray(p + r, dtype=np.uint16) for p, r in zip(train_prompts, responses)]),
                        offsets=np.cumsum([0] + lengths), prompt_lengths=np.asarray([len(p) for p in train_prompts]),
                        sampled=np.arange(len(responses)) >= greedy_count)

    counts = torch.bincount(torch.tensor([t for r in responses for t in r]), minlength=target.cfg.vocab_size)
    if args.init_from:
        drafter, teacher, coverage = resume_drafter(args.init_from, target, counts, AUX_LAYER_IDS, args.device, log)
    else:
        drafter, teacher, coverage = start_drafter(smollm2_drafter_config(target.cfg, args.draft_vocab), target,
                                                   counts, AUX_LAYER_IDS, args.seed + 2, args.device, log)
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
    if args.init_from:
        eval_fn(0)  # the starting drafter, on this run's held-out responses
    budget_s = args.draft_budget if args.finish_by is None else args.finish_by - 20.0 - time.time()
    train_start = time.time()
    steps = optimise(params, step_fn, lr=args.draft_lr, weight_decay=0.0, log=log, name="drafter",
                     steps=args.draft_steps, budget_s=budget_s, warmup=100, eval_every=args.eval_every,
                     eval_fn=eval_fn)
    train_s = time.time() - train_start
    drafter.eval()
    drafter.save(os.path.join(args.out, "draft"))
    value, rounds = accept_length()
    log(f"drafter saved; simulated accept length {value:.3f}")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"args": vars(args), "sequences": len(responses), "reused_sequences": len(reused_prompts),
                   "sampled_sequences": len(sampled_responses),
                   "tokens": sum(lengths),
                   "response_tokens": response_tokens, "generation_s": round(gen_s, 1),
                   "draft_vocab_coverage": coverage, "steps": steps, "epochs": round(steps / len(batches), 2),
                   "train_s": round(train_s, 1), "simulated_accept_length": value, "heldout_rounds": rounds,
                   "wall_s": round(log.elapsed(), 1)}, f, indent=2)


if __name__ == "__main__":
    main()
