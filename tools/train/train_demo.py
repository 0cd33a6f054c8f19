"""Train specdeck's demo pair: a tiny target on Shakespeare and its EAGLE-3 drafter.

    python3 train_demo.py --bundle BUNDLE --out OUT            (GPU, ~7 minutes on an H200)
    python3 train_demo.py --bundle BUNDLE --out OUT --placeholder   (untrained, CPU, seconds)
    python3 train_demo.py --family kimi [--int4] ...           (the Kimi-K2.5-architecture target)

`--family llama` (the first pair) trains sdtrain/llama.py's Llama; `--family kimi` trains
transformers' own DeepseekV3ForCausalLM as a tiny Kimi-K2.5 (MLA, 8 routed experts + 1
shared, yarn to 262144 positions) and writes it in the Kimi-K2.5 wrapper (sdtrain/kimi.py);
`--int4` then ships its routed experts in compressed-tensors INT4, as Kimi-K2.5's are, and the
drafter learns from the target as the engine will run it (the dequantized INT4 experts).

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

from sdtrain import llama
from sdtrain.eagle3 import drafter_config, simulated_accept_length, start_drafter, ttt_loss
from sdtrain.llama import Llama, LlamaConfig, save_hf_folder
from sdtrain.loop import optimise, start_run

BOS, EOS = 0, 1
TARGET = LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=6,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=64, rope_theta=10000.0,
                     rms_norm_eps=1e-5, max_position_embeddings=262144, tie_word_embeddings=False,
                     bos_token_id=BOS, eos_token_id=EOS)
# Kimi-K2.5's text model, scaled down: MLA (q LoRA, latent 128 + rope 32), 8 routed experts in
# 4 groups choosing 2 (2 per token) + 1 shared, the first layer dense, yarn x64 to 262144.
KIMI_TEXT = dict(vocab_size=4096, hidden_size=256, intermediate_size=768, moe_intermediate_size=256,
                 num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8,
                 num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
                 moe_layer_freq=1, routed_scaling_factor=2.5, norm_topk_prob=True, topk_method="noaux_tc",
                 scoring_func="sigmoid", q_lora_rank=128, kv_lora_rank=128, qk_nope_head_dim=32,
                 qk_rope_head_dim=32, v_head_dim=64, hidden_act="silu", rms_norm_eps=1e-5, rope_theta=50000.0,
                 rope_scaling={"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                               "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
                 max_position_embeddings=262144, num_nextn_predict_layers=0, attention_bias=False,
                 attention_dropout=0.0, tie_word_embeddings=False, bos_token_id=BOS, eos_token_id=EOS,
                 initializer_range=0.02, torch_dtype="bfloat16")
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


def new_target(args):
    if args.family == "kimi":
        from sdtrain.kimi import KimiTarget
        return KimiTarget(KIMI_TEXT, dropout=args.dropout)
    return Llama(TARGET, dropout=args.dropout)


def generate(target, prompts, new_tokens, **kw):
    if hasattr(target, "hf"):
        from sdtrain import kimi
        return kimi.generate(target, prompts, new_tokens, **kw)
    return llama.generate(target, prompts, new_tokens, **kw)


def save_target(args, target, target_dir, sample_ids, log):
    """The target folder as its family ships; for an INT4 Kimi target, the target then holds
    the dequantized INT4 experts (what the engine runs) for the drafter to learn from."""
    tokenizer_config = json.dumps(TOKENIZER_CONFIG, indent=2) + "\n"
    if args.family == "llama":
        save_hf_folder(target, target_dir, {"tokenizer_config.json": tokenizer_config})
        return {}
    from sdtrain import kimi
    tensors = target.original_layout()
    stats = {"layout_check_max_logit_diff": kimi.check_layout(target, tensors, sample_ids)}
    log(f"target: the original layout reloads in transformers within {stats['layout_check_max_logit_diff']:.3g}")
    quant = None
    if args.int4:
        packed, dequantized, quant = kimi.int4_experts(tensors)
        with torch.no_grad():
            before = target.logits(target(sample_ids)[0]).float()
            kimi.load_weights(target, {**tensors, **dequantized})
            after = target.logits(target(sample_ids)[0]).float()
        stats["int4_argmax_agreement"] = (before.argmax(-1) == after.argmax(-1)).float().mean().item()
        log(f"target: INT4 experts keep {stats['int4_argmax_agreement']:.4f} of the bf16 argmaxes")
        tensors = packed
    kimi.save_wrapped(target_dir, target, tensors, quant, tokenizer_config, BOS, EOS)
    return stats


def train_target(args, train, heldout, log, autocast):
    model = new_target(args)
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
    ap.add_argument("--family", choices=["llama", "kimi"], default="llama")
    ap.add_argument("--int4", action="store_true", help="kimi: routed experts in compressed-tensors INT4")
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
    target_stats.update(save_target(args, target, target_dir, heldout[:2048].reshape(8, 256), log))
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
