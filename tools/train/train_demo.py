"""Train specdeck's demo pair: a tiny Llama on Shakespeare and its EAGLE-3 drafter.

    python3 train_demo.py --bundle BUNDLE --out OUT            (GPU, ~7 minutes on an H200)
    python3 train_demo.py --bundle BUNDLE --out OUT --placeholder   (untrained, CPU, seconds)

BUNDLE is what `prepare.py demo` wrote (train.npy, heldout.npy, tokenizer.json,
heldout_prompts.jsonl). OUT receives target/ (LlamaForCausalLM HF folder), draft/
(EAGLE-3 checkpoint), samples.txt, metrics.jsonl and summary.json.

1. The target trains from scratch on random windows of the training plays, keeping the
   checkpoint with the best held-out loss.
2. The drafter learns from the trained (bf16) target: half of its sequences are real
   text windows, half are the target's own greedy continuations of them. Inputs are the
   target's residuals entering layers 1, 3 and 5 (config ids 0, 2, 4 under SGLang's +1
   rule); the loss is the cross-entropy against the target's distribution over the draft
   vocab, unrolled over `--ttt-steps` draft steps at SGLang's draft positions.
3. Evaluation: simulated chain acceptance (S=3, K=1) on the target's greedy
   continuations of held-out prompts (the engine's `specdeck bench` is the real measure).
"""
import argparse
import json
import os
import shutil

import numpy as np
import torch
import torch.nn.functional as F

from sdtrain.eagle3 import drafter_config, simulated_accept_length, start_drafter, ttt_loss
from sdtrain.llama import Llama, LlamaConfig, generate, save_hf_folder
from sdtrain.loop import optimise, start_run

BOS, EOS = 0, 1
TARGET = LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=6,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=64, rope_theta=10000.0,
                     rms_norm_eps=1e-5, max_position_embeddings=262144, tie_word_embeddings=False,
                     bos_token_id=BOS, eos_token_id=EOS)
AUX_LAYER_IDS = (0, 2, 4)
DRAFT_VOCAB = 2048
# The drafter claims half the target's context: the demo's context-length-exceeds-draft story.
DRAFT_MAX_POSITIONS = 131072
TOKENIZER_CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
    "add_bos_token": False, "add_eos_token": False, "model_max_length": 262144,
    "clean_up_tokenization_spaces": False,
}


def demo_drafter_config():
    return drafter_config(hidden=256, intermediate=768, heads=4, kv_heads=2, head_dim=64, vocab=TARGET.vocab_size,
                          draft_vocab=DRAFT_VOCAB, target_hidden=TARGET.hidden_size, aux_layer_ids=AUX_LAYER_IDS,
                          max_positions=DRAFT_MAX_POSITIONS, rope_theta=10000.0, rms_norm_eps=1e-5, bos=BOS, eos=EOS)


def random_windows(data, batch, length, gen):
    starts = torch.randint(0, data.numel() - length, (batch,), generator=gen, device="cpu").to(data.device)
    return data[starts[:, None] + torch.arange(length, device=data.device)]


@torch.no_grad()
def heldout_loss(model, windows, autocast):
    model.eval()
    with autocast():
        normed, _ = model(windows[:, :-1])
        loss = F.cross_entropy(model.logits(normed).float().flatten(0, 1), windows[:, 1:].flatten())
    model.train()
    return loss.item()


def train_target(args, train, heldout, log, autocast):
    model = Llama(TARGET, dropout=args.dropout)
    model.init_weights(args.seed)
    model.to(args.device).train()
    params = [p for p in model.parameters()]
    log(f"target: {sum(p.numel() for p in params) / 1e6:.2f}M parameters")
    gen = torch.Generator().manual_seed(args.seed)
    eval_windows = random_windows(heldout, 64, args.seq + 1, torch.Generator().manual_seed(7))
    best = {"loss": float("inf"), "state": None, "step": 0}

    def step_fn(step):
        batch = random_windows(train, args.batch, args.seq + 1, gen)
        with autocast():
            normed, _ = model(batch[:, :-1])
            loss = F.cross_entropy(model.logits(normed).float().flatten(0, 1), batch[:, 1:].flatten())
        return loss, {}

    def eval_fn(step):
        loss = heldout_loss(model, eval_windows, autocast)
        log.record(phase="target-eval", step=step, heldout_loss=round(loss, 5))
        log(f"target step {step}: held-out loss {loss:.4f}")
        if loss < best["loss"]:
            best.update(loss=loss, step=step, state={k: v.detach().clone() for k, v in model.state_dict().items()})

    steps = optimise(params, step_fn, lr=args.lr, weight_decay=0.1, log=log, name="target", steps=args.target_steps,
                     budget_s=args.target_budget, max_steps=args.target_max_steps, warmup=200, eval_every=args.eval_every, eval_fn=eval_fn)
    if best["state"] is not None:
        model.load_state_dict(best["state"])
        log(f"target: keeping step {best['step']} (held-out loss {best['loss']:.4f})")
    model.dropout = 0.0
    # The engine runs the bf16 checkpoint; the teacher and the samples use the same weights.
    return model.to(torch.bfloat16).eval(), {"steps": steps, "best_step": best["step"], "heldout_loss": best["loss"]}


def encode_prompts(bundle, tokenizer):
    with open(os.path.join(bundle, "heldout_prompts.jsonl")) as f:
        texts = [json.loads(line)["prompt"] for line in f]
    return texts, [e.ids for e in tokenizer.encode_batch(texts)]


def greedy_sequences(target, prompts, new_tokens, device):
    """Right-padded prompt+continuation ids and a mask of the continuation positions."""
    outs = generate(target, prompts, new_tokens)
    width = max(len(p) + len(o) for p, o in zip(prompts, outs))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width)
    for row, (p, o) in enumerate(zip(prompts, outs)):
        seq = p + o
        ids[row, :len(seq)] = torch.tensor(seq)
        # Position q is scored when it predicts a generated token x_{q+1}.
        mask[row, len(p) - 1:len(seq) - 1] = 1
    return ids.to(device), mask.to(device), outs


def draft_pool(args, target, train, log):
    """Real windows and the target's greedy continuations of real prefixes, [N, seq]."""
    gen = torch.Generator().manual_seed(args.seed + 1)
    real = random_windows(train, args.pool_real, args.draft_seq, gen)
    parts = [real]
    prefixes = random_windows(train, args.pool_generated, args.prefix, gen)
    for start in range(0, args.pool_generated, args.gen_batch):
        chunk = prefixes[start:start + args.gen_batch]
        outs = generate(target, chunk.tolist(), args.draft_seq - args.prefix)
        parts.append(torch.cat([chunk, torch.tensor(outs, dtype=torch.long, device=chunk.device)], dim=1))
    pool = torch.cat(parts)
    log(f"drafter pool: {real.shape[0]} real windows + {pool.shape[0] - real.shape[0]} generated, "
        f"{pool.numel()} tokens")
    return pool


def train_drafter(args, target, pool, eval_set, log, autocast):
    counts = torch.bincount(pool.flatten().cpu(), minlength=TARGET.vocab_size)
    drafter, teacher, coverage = start_drafter(demo_drafter_config(), target, counts, AUX_LAYER_IDS,
                                               args.seed + 2, args.device, log)
    params = list(drafter.parameters())
    gen = torch.Generator().manual_seed(args.seed + 3)
    pool_mask = torch.ones_like(pool, dtype=torch.float32)

    def step_fn(step):
        rows = torch.randint(0, pool.shape[0], (args.draft_batch,), generator=gen).to(pool.device)
        with autocast():
            loss, accs = ttt_loss(drafter, teacher, pool[rows], pool_mask[rows], args.ttt_steps)
        return loss, {f"acc{k}": a for k, a in enumerate(accs)}

    def eval_fn(step):
        drafter.eval()
        with autocast():
            total, rounds = simulated_accept_length(drafter, teacher, *eval_set, steps=3)
        drafter.train()
        log.record(phase="draft-eval", step=step, accept_length=round(total / max(rounds, 1), 4))
        log(f"drafter step {step}: simulated accept length (S=3, K=1) {total / max(rounds, 1):.3f} over {rounds:.0f} rounds")

    steps = optimise(params, step_fn, lr=args.draft_lr, weight_decay=0.0, log=log, name="drafter",
                     steps=args.draft_steps, budget_s=args.draft_budget, max_steps=args.draft_max_steps, warmup=100,
                     eval_every=args.eval_every,
                     eval_fn=eval_fn)
    drafter.eval()
    with autocast():
        total, rounds = simulated_accept_length(drafter, teacher, *eval_set, steps=3)
    return drafter, {"steps": steps, "simulated_accept_length": total / max(rounds, 1),
                     "draft_vocab_coverage": coverage}


def write_samples(path, target, tokenizer, texts, prompts, generator):
    greedy = generate(target, prompts[:6], 96)
    sampled = generate(target, prompts[:6], 96, temperature=0.8, generator=generator)
    with open(path, "w") as f:
        for text, g, s in zip(texts, greedy, sampled):
            f.write(f"=== prompt\n{text}=== greedy\n{tokenizer.decode(g)}\n=== sampled (T=0.8)\n{tokenizer.decode(s)}\n\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--placeholder", action="store_true", help="untrained weights in the final format")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--target-steps", type=int, default=None, help="fixed step count (default: fit the budget)")
    ap.add_argument("--target-budget", type=float, default=200.0, help="seconds")
    ap.add_argument("--target-max-steps", type=int, default=5000, help="~50 epochs: more only overfits")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--pool-real", type=int, default=8192)
    ap.add_argument("--pool-generated", type=int, default=16384)
    ap.add_argument("--prefix", type=int, default=32)
    ap.add_argument("--draft-seq", type=int, default=256)
    ap.add_argument("--gen-batch", type=int, default=2048)
    ap.add_argument("--draft-batch", type=int, default=64)
    ap.add_argument("--draft-lr", type=float, default=1e-3)
    ap.add_argument("--ttt-steps", type=int, default=4)
    ap.add_argument("--draft-steps", type=int, default=None)
    ap.add_argument("--draft-budget", type=float, default=150.0)
    ap.add_argument("--draft-max-steps", type=int, default=6000)
    ap.add_argument("--eval-tokens", type=int, default=128)
    args = ap.parse_args()
    if args.placeholder:
        args.target_steps = args.draft_steps = 0
        args.pool_real, args.pool_generated, args.eval_tokens = 256, 0, 8

    from tokenizers import Tokenizer
    log, autocast = start_run(args)
    tokenizer = Tokenizer.from_file(os.path.join(args.bundle, "tokenizer.json"))
    train = torch.from_numpy(np.load(os.path.join(args.bundle, "train.npy")).astype(np.int64)).to(args.device)
    heldout = torch.from_numpy(np.load(os.path.join(args.bundle, "heldout.npy")).astype(np.int64)).to(args.device)
    log(f"data: train {train.numel()} tokens, held-out {heldout.numel()} tokens")

    target, target_stats = train_target(args, train, heldout, log, autocast)
    target_dir = os.path.join(args.out, "target")
    save_hf_folder(target, target_dir, {"tokenizer_config.json": json.dumps(TOKENIZER_CONFIG, indent=2) + "\n"})
    shutil.copy(os.path.join(args.bundle, "tokenizer.json"), target_dir)
    texts, prompts = encode_prompts(args.bundle, tokenizer)
    write_samples(os.path.join(args.out, "samples.txt"), target, tokenizer, texts, prompts,
                  torch.Generator(device=args.device).manual_seed(args.seed))
    log(f"target saved to {target_dir}")

    eval_set = greedy_sequences(target, prompts, args.eval_tokens, args.device)[:2]
    pool = draft_pool(args, target, train, log)
    drafter, draft_stats = train_drafter(args, target, pool, eval_set, log, autocast)
    drafter.save(os.path.join(args.out, "draft"))
    log(f"drafter saved; simulated accept length {draft_stats['simulated_accept_length']:.3f}")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"args": vars(args), "target": target_stats, "drafter": draft_stats,
                   "wall_s": round(log.elapsed(), 1)}, f, indent=2)


if __name__ == "__main__":
    main()
