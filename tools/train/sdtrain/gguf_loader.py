"""Load a llama-architecture GGUF (e.g. SmolLM2-135M-Instruct Q4_1) into `Llama`.

Dequantized with the `gguf` package to f32, then rounded to bf16: the same weights that
`specdeck convert gguf` writes. llama.cpp's converter permutes the rows of Q and K for its
interleaved-pair RoPE; they are permuted back here to the HF rotate-half layout.
"""
import numpy as np
import torch

from .llama import Llama, LlamaConfig

LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def unpermute_rows(w, heads):
    """Inverse of convert_hf_to_gguf's `permute` for a [heads*hd, in] Q or K matrix."""
    # The converter sends HF row i of a head to 2i and row hd/2+i to 2i+1; undo that.
    rows, cols = w.shape
    return w.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def hf_tensor_name(gguf_name):
    if gguf_name == "token_embd.weight":
        return "embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    _, layer, rest = gguf_name.split(".", 2)
    return f"layers.{layer}.{LAYER_NAMES[rest]}"


def read_gguf(path):
    """(LlamaConfig, {hf-style name without 'model.': f32 numpy}, metadata fields)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(path)

    def field(key, default=None):
        return reader.fields[key].contents() if key in reader.fields else default

    arch = field("general.architecture")
    if arch != "llama":
        raise SystemExit(f"{path}: general.architecture = {arch!r}, expected 'llama'")
    heads = int(field(f"{arch}.attention.head_count"))
    kv_heads = int(field(f"{arch}.attention.head_count_kv", heads))
    hidden = int(field(f"{arch}.embedding_length"))
    tensors = {}
    for t in reader.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(s) for s in reversed(t.shape)])
        if t.name.endswith("attn_q.weight"):
            w = unpermute_rows(w, heads)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute_rows(w, kv_heads)
        tensors[hf_tensor_name(t.name)] = w
    cfg = LlamaConfig(
        vocab_size=tensors["embed_tokens.weight"].shape[0], hidden_size=hidden,
        intermediate_size=int(field(f"{arch}.feed_forward_length")),
        num_hidden_layers=int(field(f"{arch}.block_count")),
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
        rope_theta=float(field(f"{arch}.rope.freq_base", 10000.0)),
        rms_norm_eps=float(field(f"{arch}.attention.layer_norm_rms_epsilon")),
        max_position_embeddings=int(field(f"{arch}.context_length")),
        tie_word_embeddings="lm_head.weight" not in tensors,
        bos_token_id=int(field("tokenizer.ggml.bos_token_id", 0)),
        eos_token_id=int(field("tokenizer.ggml.eos_token_id", 0)))
    meta = {"chat_template": field("tokenizer.chat_template")}
    return cfg, tensors, meta


def load_gguf_llama(path, device, dtype=torch.bfloat16):
    cfg, tensors, meta = read_gguf(path)
    model = Llama(cfg)
    # f32 -> bf16 rounds to nearest even, like specdeck's converter.
    model.load_state_dict({k: torch.from_numpy(v).to(dtype) for k, v in tensors.items()})
    return model.to(device=device, dtype=dtype).eval(), meta
