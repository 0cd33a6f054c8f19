#!/usr/bin/env python3
"""Write a Llama-3.1-8B-shaped checkpoint with random bf16 weights (config.json, sharded
model.safetensors with its index, a word-level tokenizer.json), generated on the GPU with
torch. Used by run.sh for the decode benchmark; the weights mean nothing.

usage: write_llama8b.py OUT_DIR [--layers N] [--shape llama8b|qwen0.5b|qwen1.5b]

The Qwen shapes are Qwen2.5-0.5B / 1.5B's (q, k, v biases, tied embeddings), for timing the
STANDALONE pair's kernels without sending the real weights over.
"""
import argparse
import json
import os
import time

import torch
from safetensors.torch import save_file

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "torch_dtype": "bfloat16",
}

QWEN = {"attention_bias": True, "tie_word_embeddings": True, "vocab_size": 151936, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "rope_scaling": None, "max_position_embeddings": 32768}
SHAPES = {
    "llama8b": {},
    "qwen0.5b": dict(QWEN, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                     num_key_value_heads=2, head_dim=64),
    "qwen1.5b": dict(QWEN, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                     num_key_value_heads=2, head_dim=128),
}

SHARD_BYTES = 4 << 30


def tensors(cfg):
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    yield "model.embed_tokens.weight", (v, h)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        yield p + "input_layernorm.weight", (h,)
        yield p + "self_attn.q_proj.weight", (q, h)
        yield p + "self_attn.k_proj.weight", (kv, h)
        yield p + "self_attn.v_proj.weight", (kv, h)
        if cfg["attention_bias"]:
            yield p + "self_attn.q_proj.bias", (q,)
            yield p + "self_attn.k_proj.bias", (kv,)
            yield p + "self_attn.v_proj.bias", (kv,)
        yield p + "self_attn.o_proj.weight", (h, q)
        yield p + "post_attention_layernorm.weight", (h,)
        yield p + "mlp.gate_proj.weight", (i, h)
        yield p + "mlp.up_proj.weight", (i, h)
        yield p + "mlp.down_proj.weight", (h, i)
    yield "model.norm.weight", (h,)
    if not cfg["tie_word_embeddings"]:
        yield "lm_head.weight", (v, h)


def tokenizer(vocab):
    words = {"<unk>": 0, "<s>": 1, "</s>": 2}
    words.update({f"w{i}": i for i in range(3, vocab)})
    special = [{"id": i, "content": w, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for w, i in list(words.items())[:3]]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
            "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
            "decoder": None, "model": {"type": "WordLevel", "vocab": words, "unk_token": "<unk>"}}


def finish(out, shards, weight_map, total, cfg):
    """Rename the shards with the final count in their names, as HF writes them, and write the
    index, the config and the word-level tokenizer beside them."""
    final = {}
    for i, name in enumerate(shards):
        new = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        os.rename(os.path.join(out, name), os.path.join(out, new))
        final[name] = new
    index = {"metadata": {"total_size": total}, "weight_map": {k: final[v] for k, v in weight_map.items()}}
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer(cfg["vocab_size"]), f)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>"}, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama8b")
    args = ap.parse_args()
    cfg = dict(CONFIG, **SHAPES[args.shape])
    if args.layers:
        cfg["num_hidden_layers"] = args.layers
    cfg = {k: v for k, v in cfg.items() if v is not None}
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    gen = torch.Generator(device="cuda").manual_seed(0)
    shards, current, size, weight_map = [], {}, 0, {}

    def flush():
        nonlocal current, size
        if current:
            name = f"model-{len(shards) + 1:05d}.safetensors"
            save_file(current, os.path.join(args.out, name), metadata={"format": "pt"})
            shards.append(name)
            for k in current:
                weight_map[k] = name
            current, size = {}, 0

    total = 0
    for name, shape in tensors(cfg):
        if name.endswith("norm.weight"):
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:
            t = (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()
        nbytes = t.numel() * 2
        if size + nbytes > SHARD_BYTES:
            flush()
        current[name] = t
        size += nbytes
        total += nbytes
    flush()
    finish(args.out, shards, weight_map, total, cfg)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "do_sample": False}, f)
    print(json.dumps({"dir": args.out, "bytes": total, "shards": len(shards), "seconds": time.time() - t0}))


if __name__ == "__main__":
    main()
