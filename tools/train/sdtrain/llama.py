"""A Llama decoder (HF layout and tensor names) with EAGLE-3 hidden-state capture.

RoPE is the rotate-half (NeoX/HF) form; a GGUF llama checkpoint is un-permuted to this
layout when it is loaded (gguf_loader.py), exactly as an HF conversion does.
"""
import json
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    bos_token_id: int = 0
    eos_token_id: int = 1
    extra: dict = field(default_factory=dict)

    def hf_config(self):
        """The config.json of an HF LlamaForCausalLM folder."""
        cfg = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": "bfloat16",
        }
        cfg.update(self.extra)
        return cfg

    @classmethod
    def from_hf(cls, cfg):
        return cls(
            vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=cfg["num_attention_heads"],
            num_key_value_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
            rope_theta=cfg.get("rope_theta", 10000.0), rms_norm_eps=cfg["rms_norm_eps"],
            max_position_embeddings=cfg["max_position_embeddings"],
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            bos_token_id=cfg.get("bos_token_id", 0), eos_token_id=cfg.get("eos_token_id", 1))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # Normalise in fp32 and cast back before the weight, as HF LlamaRMSNorm does.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_cos_sin(positions, head_dim, theta, dtype):
    """cos/sin of shape [*positions.shape, head_dim] for rotate-half RoPE."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    angles = positions.to(torch.float32)[..., None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x: [B, heads, T, hd]; cos/sin: [B, T, hd]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]


class SwiGLU(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    def __init__(self, in_dim, out_dim, heads, kv_heads, head_dim):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(in_dim, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, out_dim, bias=False)

    def project(self, x, cos, sin):
        """q, k, v as [B, heads, T, hd] with RoPE applied to q and k."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def attend(self, q, k, v, mask):
        """mask: None for plain causal over equal-length q/k, else bool [.., Tq, Tk] (True = attend)."""
        group = self.heads // self.kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        b, _, t, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        h = cfg.hidden_size
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.self_attn = Attention(h, h, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.mlp = SwiGLU(h, cfg.intermediate_size)

    def forward(self, x, cos, sin, mask, cache, dropout):
        q, k, v = self.self_attn.project(self.input_layernorm(x), cos, sin)
        if cache is not None:
            k, v = cache.append(k, v)
        x = x + F.dropout(self.self_attn.attend(q, k, v, mask), dropout, self.training)
        return x + F.dropout(self.mlp(self.post_attention_layernorm(x)), dropout, self.training)


class LayerCache:
    """A preallocated K/V buffer for one layer: [B, kv_heads, capacity, hd]."""

    def __init__(self, batch, kv_heads, capacity, head_dim, device, dtype):
        self.k = torch.zeros(batch, kv_heads, capacity, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.length = 0

    def append(self, k, v):
        t = k.shape[2]
        self.k[:, :, self.length:self.length + t] = k
        self.v[:, :, self.length:self.length + t] = v
        self.length += t
        return self.k[:, :, :self.length], self.v[:, :, :self.length]


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig, dropout=0.0):
        super().__init__()
        self.cfg, self.dropout = cfg, dropout
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def init_weights(self, seed):
        gen = torch.Generator().manual_seed(seed)
        residual_scale = 1.0 / math.sqrt(2 * self.cfg.num_hidden_layers)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
                continue
            std = 0.02 * (residual_scale if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0)
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=gen) * std)

    def head_weight(self):
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, ids, positions=None, capture=(), mask=None, caches=None):
        """Returns (final normed hidden [B,T,H], captured residuals {layer: [B,T,H]}).

        `capture` holds input-of-layer indices: the residual stream entering layer i
        (the pre-norm `hidden + residual` that SGLang's aux capture records).
        """
        b, t = ids.shape
        if positions is None:
            positions = torch.arange(t, device=ids.device).expand(b, t)
        x = self.embed_tokens(ids)
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        captured = {}
        for i, layer in enumerate(self.layers):
            if i in capture:
                captured[i] = x
            x = layer(x, cos, sin, mask, None if caches is None else caches[i], self.dropout)
        return self.norm(x), captured

    def logits(self, normed):
        return normed @ self.head_weight().to(normed.dtype).T

    def state_dict_hf(self):
        """Tensors under HF LlamaForCausalLM names, bf16."""
        out = {}
        for name, p in self.state_dict().items():
            key = name if name.startswith("lm_head") else "model." + name
            out[key] = p.detach().to(torch.bfloat16).contiguous().cpu()
        return out

    def load_state_dict_hf(self, tensors):
        own = {}
        for key, value in tensors.items():
            own[key[len("model."):] if key.startswith("model.") else key] = value
        self.load_state_dict(own)


def grouped_decode_attention(q, k, v, key_mask):
    """One query per row against a whole cache, without repeating K/V per head group.

    q: [B, heads, 1, hd]; k, v: [B, kv_heads, C, hd]; key_mask: [B, C] bool (True = attend).
    """
    b, heads, _, hd = q.shape
    kv_heads = k.shape[1]
    grouped = q.reshape(b, kv_heads, heads // kv_heads, hd)
    scores = torch.matmul(grouped, k.transpose(-1, -2)).float() * hd ** -0.5
    scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1).to(v.dtype), v)
    return out.reshape(b, 1, heads * hd)


def _prefill(model, prompts, max_new_tokens, pad_id):
    """Left-pad the prompts, run them through `model` into fresh KV caches of width + max_new slots.

    Returns (final normed hidden of each prompt's last token [B,H], caches, valid_key [B,C]
    (False on left padding), prompt lengths [B], padded width).
    """
    device = model.embed_tokens.weight.device
    dtype = model.embed_tokens.weight.dtype
    b = len(prompts)
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    width = int(lengths.max())
    pads = width - lengths
    ids = torch.full((b, width), pad_id, dtype=torch.long, device=device)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(p, dtype=torch.long, device=device)
    cfg = model.cfg
    caches = [LayerCache(b, cfg.num_key_value_heads, width + max_new_tokens, cfg.head_dim, device, dtype)
              for _ in range(cfg.num_hidden_layers)]
    cols = torch.arange(width + max_new_tokens, device=device)
    valid_key = cols[None, :] >= pads[:, None]                       # left padding is never attended
    positions = (torch.arange(width, device=device)[None, :] - pads[:, None]).clamp(min=0)
    causal = cols[None, :width, None] >= cols[None, None, :width]
    mask = (causal & valid_key[:, None, :width])[:, None]
    # A fully padded query row would softmax over nothing; let it see itself.
    mask = mask | torch.eye(width, dtype=torch.bool, device=device)[None, None]
    normed, _ = model(ids, positions, mask=mask, caches=caches)
    return normed[:, -1], caches, valid_key, lengths, width


def _cut_at_stop(out, stop_ids):
    results = []
    for row in out.tolist():
        cut = next((i + 1 for i, tok in enumerate(row) if tok in stop_ids), len(row))
        results.append(row[:cut])
    return results


@torch.no_grad()
def generate(model, prompts, max_new_tokens, stop_ids=(), temperature=0.0, generator=None, pad_id=0):
    """Batched generation with a KV cache; prompts are lists of ids (left-padded here).

    Returns one list of new ids per prompt, cut after the first stop id (kept).
    Greedy when temperature == 0.
    """
    last, caches, valid_key, lengths, width = _prefill(model, prompts, max_new_tokens, pad_id)
    device = last.device
    b = len(prompts)
    stop = torch.tensor(list(stop_ids) or [-1], device=device)
    out = torch.zeros(b, max_new_tokens, dtype=torch.long, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        logits = model.logits(last).float()
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator)[:, 0]
        else:
            nxt = logits.argmax(-1)
        out[:, step] = nxt
        done |= torch.isin(nxt, stop)
        if bool(done.all()):
            out = out[:, :step + 1]
            break
        pos = (lengths + step)[:, None]
        key_mask = valid_key[:, None, None, :width + step + 1]
        normed, _ = model(nxt[:, None], pos, mask=key_mask, caches=caches)
        last = normed[:, -1]
    return _cut_at_stop(out, stop_ids)


class StaticDecoder:
    """Decoding whose per-token step has fixed shapes, so a CUDA graph can replay it.

    A 135M-parameter target decodes one token in ~1000 small kernels; on the lent GPU the
    launches, not the math, set the eager step time (~90 ms at any batch size). Every
    step here works on the full cache (its write column and the key mask come from a step
    counter on the device), so one captured step replays for the whole response.
    Greedy when temperature == 0, else sampled (Gumbel-max over the default generator,
    which graph replay advances).
    """

    def __init__(self, model, prompts, max_new_tokens, stop_ids, temperature=0.0, pad_id=0):
        self.model, self.temperature = model, temperature
        last, caches, self.valid_key, self.lengths, self.width = _prefill(model, prompts, max_new_tokens, pad_id)
        device = last.device
        self.kv = [(c.k, c.v) for c in caches]
        self.cols = torch.arange(self.width + max_new_tokens, device=device)
        self.stop = torch.tensor(list(stop_ids) or [-1], device=device)
        self.token = self.pick(model.logits(last).float())
        self.step = torch.zeros((), dtype=torch.long, device=device)
        self.out = torch.zeros(len(prompts), max_new_tokens, dtype=torch.long, device=device)
        self.done = torch.zeros(len(prompts), dtype=torch.bool, device=device)

    def advance(self):
        """Record the current token at the step counter and compute the next one."""
        model, col = self.model, self.width + self.step
        self.out.index_copy_(1, self.step.view(1), self.token[:, None])
        self.done.logical_or_((self.token[:, None] == self.stop[None, :]).any(-1))
        key_mask = self.valid_key & (self.cols[None, :] <= col)
        x = model.embed_tokens(self.token[:, None])
        cos, sin = rope_cos_sin((self.lengths + self.step)[:, None], model.cfg.head_dim, model.cfg.rope_theta, x.dtype)
        for layer, (cache_k, cache_v) in zip(model.layers, self.kv):
            q, k, v = layer.self_attn.project(layer.input_layernorm(x), cos, sin)
            cache_k.index_copy_(2, col.view(1), k)
            cache_v.index_copy_(2, col.view(1), v)
            x = x + layer.self_attn.o_proj(grouped_decode_attention(q, cache_k, cache_v, key_mask))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        self.token.copy_(self.pick(model.logits(model.norm(x)[:, -1]).float()))
        self.step.add_(1)

    def pick(self, logits):
        if self.temperature > 0:
            gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp_(min=1e-20)))
            logits = logits / self.temperature + gumbel
        return logits.argmax(-1)

    def run(self, use_graph, check_every=16, eager_warmup=3):
        """Decode all steps (stopping once every row has a stop id); returns the [B, steps] ids."""
        total = self.out.shape[1]
        replay = self.advance
        taken = 0
        if use_graph and total > eager_warmup:
            # Warm-up steps are real steps, run on a side stream as CUDA graph capture wants.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(eager_warmup):
                    self.advance()
            torch.cuda.current_stream().wait_stream(side)
            taken = eager_warmup
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):   # capture records the step without running it
                self.advance()
            replay = graph.replay
        while taken < total:
            replay()
            taken += 1
            if taken % check_every == 0 and bool(self.done.all()):
                break
        return self.out[:, :taken]


@torch.no_grad()
def generate_fast(model, prompts, max_new_tokens, stop_ids=(), temperature=0.0, use_graph=None, pad_id=0):
    """Same contract as `generate`, through StaticDecoder (a CUDA graph on a GPU)."""
    if use_graph is None:
        use_graph = model.embed_tokens.weight.is_cuda
    decoder = StaticDecoder(model, prompts, max_new_tokens, stop_ids, temperature, pad_id)
    return _cut_at_stop(decoder.run(use_graph), stop_ids)


def save_hf_folder(model, folder, extra_files=None):
    """config.json + bf16 model.safetensors (+ any extra text files) into `folder`."""
    from safetensors.torch import save_file
    import os
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(model.cfg.hf_config(), f, indent=2)
        f.write("\n")
    save_file(model.state_dict_hf(), os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    for name, text in (extra_files or {}).items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
