#!/usr/bin/env python3
"""Greedy-decode a few tokens from a converted HF folder with a NumPy forward pass written
for HF layout (rotate-half RoPE on every architecture, HF tensor names): a check that the
folder `specdeck convert gguf` wrote is a working model, Q/K permutation included.

    python3 scripts/hf_forward_check.py /work/models/smollm2-135m-instruct "The capital of France is" 4
"""
import json
import sys

import numpy as np
from tokenizers import Tokenizer

from verify_conversion import read_safetensors


def main(folder, prompt, n_new):
    cfg = json.load(open(f"{folder}/config.json"))
    W = {k: np.asarray(v, dtype=np.float32) for k, v in read_safetensors(f"{folder}/model.safetensors").items()}
    W.setdefault("lm_head.weight", W["model.embed_tokens.weight"])
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    tok = Tokenizer.from_file(f"{folder}/tokenizer.json")
    ids = tok.encode(prompt).ids

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x, pos):  # HF rotate_half
        ang = np.outer(pos, theta ** (-np.arange(0, hd, 2) / hd))
        c, s = np.cos(ang)[:, None].astype(np.float32), np.sin(ang)[:, None].astype(np.float32)
        a, b = x[..., : hd // 2], x[..., hd // 2:]
        return np.concatenate([a * c - b * s, a * s + b * c], -1)

    def logits(ids):
        T = len(ids)
        x = W["model.embed_tokens.weight"][ids]
        mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
        for l in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = rms(x, W[p + "input_layernorm.weight"])
            q, k, v = (h @ W[p + f"self_attn.{n}_proj.weight"].T + W.get(p + f"self_attn.{n}_proj.bias", 0) for n in "qkv")
            q, k = rope(q.reshape(T, nh, hd), np.arange(T)), rope(k.reshape(T, nkv, hd), np.arange(T))
            k, v = np.repeat(k, nh // nkv, 1), np.repeat(v.reshape(T, nkv, hd), nh // nkv, 1)
            att = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            x = x + np.einsum("hts,shd->thd", att, v).reshape(T, -1) @ W[p + "self_attn.o_proj.weight"].T
            h = rms(x, W[p + "post_attention_layernorm.weight"])
            g = h @ W[p + "mlp.gate_proj.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
        return rms(x[-1], W["model.norm.weight"]) @ W["lm_head.weight"].T

    out = []
    for _ in range(n_new):
        nxt = int(logits(ids + out).argmax())
        out.append(nxt)
    print(json.dumps({"prompt": prompt, "ids": out, "text": tok.decode(out)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 4)
