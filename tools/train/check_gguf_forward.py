"""Check the torch Llama on a GGUF against an independent NumPy forward of the raw GGUF.

    python3 check_gguf_forward.py SmolLM2-135M-Instruct.Q4_1.gguf

The NumPy side keeps llama.cpp's Q/K row order and applies RoPE to interleaved pairs, as
llama.cpp does; the torch side un-permutes the rows and uses rotate-half RoPE (HF). Both
read the same dequantized f32 weights, so their logits must agree to float rounding at
every position; a wrong un-permutation shows up from position 1 on. Exits non-zero on a
mismatch.
"""
import sys

import numpy as np
import torch

from sdtrain.gguf_loader import load_gguf_llama, read_gguf, unpermute_rows

TOKENS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411]


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope_interleaved(x, theta):
    """x: [T, heads, hd]; rotates the pairs (2i, 2i+1) by position * theta^(-2i/hd)."""
    t, _, hd = x.shape
    angles = np.arange(t)[:, None] * theta ** (-np.arange(0, hd, 2) / hd)
    cos, sin = np.cos(angles)[:, None], np.sin(angles)[:, None]
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def numpy_logits(cfg, w, ids):
    t, hd = len(ids), cfg.head_dim
    x = w["embed_tokens.weight"][ids]
    mask = np.triu(np.full((t, t), -np.inf), 1)
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        q = rope_interleaved((h @ w[p + "q_gguf"].T).reshape(t, -1, hd), cfg.rope_theta)
        k = rope_interleaved((h @ w[p + "k_gguf"].T).reshape(t, -1, hd), cfg.rope_theta)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(t, -1, hd)
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        x = x + np.einsum("hqk,khd->qhd", probs, v).reshape(t, -1) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + ((gate / (1 + np.exp(-gate))) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["embed_tokens.weight"])
    return rms(x, w["norm.weight"], cfg.rms_norm_eps) @ head.T


def main(path):
    cfg, w, _ = read_gguf(path)
    w = {k: v.astype(np.float64) for k, v in w.items()}
    # Back to llama.cpp's row order: the inverse of unpermute_rows, found by permuting indices.
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}."
        for name, heads, key in (("q_proj", cfg.num_attention_heads, "q_gguf"), ("k_proj", cfg.num_key_value_heads, "k_gguf")):
            hf = w[p + f"self_attn.{name}.weight"]
            order = unpermute_rows(np.arange(hf.shape[0])[:, None], heads)[:, 0]
            gguf = np.empty_like(hf)
            gguf[order] = hf
            w[p + key] = gguf
    reference = numpy_logits(cfg, w, TOKENS)
    model, _ = load_gguf_llama(path, "cpu", torch.float32)
    with torch.no_grad():
        normed, _ = model(torch.tensor([TOKENS]))
        mine = model.logits(normed)[0].double().numpy()
    err = np.abs(reference - mine).max(-1)
    print("max |logit difference| per position:", np.array2string(err, precision=5))
    if err.max() > 1e-2 or (reference.argmax(-1) != mine.argmax(-1)).any():
        raise SystemExit("check_gguf_forward: torch and NumPy forwards disagree")
    print(f"ok: {len(TOKENS)} positions agree (max {err.max():.2e})")


if __name__ == "__main__":
    main(sys.argv[1])
