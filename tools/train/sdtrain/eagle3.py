"""The EAGLE-3 drafter (one fused decoder layer), training-time test, and its checkpoint.

Layer math (eagle3_spec.md section 2.2), per position t of a draft step:
    x   = fc(concat(aux_low, aux_mid, aux_high))          only at step 0; later steps feed o
    u   = concat(input_layernorm(embed(token)), hidden_norm(x))      [2H], embedding first
    s   = o_proj(attn(u)) + x                              residual = the un-normed hidden
    o   = mlp(post_attention_layernorm(s)) + s             next step's hidden (pre-norm)
    logits = lm_head(norm(o))                              over the draft vocab

Alignment (section 2.3): the pair at position t is (target hidden of x_t, token x_{t+1}) and
predicts the target's distribution at position t+1. Training-time test unrolls `steps`
draft steps; step k at index t feeds the drafter's own hidden from step k-1 with token
x_{t+1+k}, attends to step 0's keys at positions <= t plus its own chain at index t, and
sits at SGLang's draft position t+k+1 (EAGLE's reference would use t+k).
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from .llama import Attention, RMSNorm, SwiGLU, rope_cos_sin

# SGLang places a draft step's token one position past EAGLE's reference (eagle3_spec 2.3).
SGLANG_DRAFT_POSITION_OFFSET = 1


def draft_vocab(token_counts, draft_vocab_size):
    """(d2t int64 [Vd], t2d bool [V]) from target-token counts, as SpecForge builds them.

    The Vd most frequent ids (ties broken by the lower id), sorted ascending; d2t holds
    offsets: target_id = draft_id + d2t[draft_id].
    """
    counts = torch.as_tensor(token_counts, dtype=torch.float64)
    vocab = counts.numel()
    # Stable ordering: by count descending, then id ascending.
    order = sorted(range(vocab), key=lambda i: (-counts[i].item(), i))[:draft_vocab_size]
    used = torch.tensor(sorted(order), dtype=torch.int64)
    d2t = used - torch.arange(draft_vocab_size, dtype=torch.int64)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[used] = True
    return d2t, t2d


class Eagle3Drafter(nn.Module):
    def __init__(self, cfg, target_embed):
        """cfg: the drafter's config.json dict; target_embed: the target's frozen [V, Ht] table."""
        super().__init__()
        self.cfg = cfg
        h, ht = cfg["hidden_size"], cfg["target_hidden_size"]
        self.head_dim = cfg["head_dim"]
        self.rope_theta = cfg["rope_theta"]
        eps = cfg["rms_norm_eps"]
        self.fc = nn.Linear(3 * ht, h, bias=False)
        self.midlayer = nn.Module()
        self.midlayer.input_layernorm = RMSNorm(h, eps)
        self.midlayer.hidden_norm = RMSNorm(h, eps)
        self.midlayer.self_attn = Attention(2 * h, h, cfg["num_attention_heads"], cfg["num_key_value_heads"], self.head_dim)
        self.midlayer.post_attention_layernorm = RMSNorm(h, eps)
        self.midlayer.mlp = SwiGLU(h, cfg["intermediate_size"])
        self.norm = RMSNorm(h, eps)
        self.lm_head = nn.Linear(h, cfg["draft_vocab_size"], bias=False)
        self.register_buffer("embed", target_embed.detach(), persistent=False)
        self.register_buffer("d2t", torch.zeros(cfg["draft_vocab_size"], dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(cfg["vocab_size"], dtype=torch.bool))

    def init_weights(self, seed, target_norm=None, target_head=None):
        """Random init; lm_head rows and the final norm start from the target's when given."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
            if target_head is not None:
                self.lm_head.weight.copy_(target_head[self.draft_to_target()])
            if target_norm is not None:
                self.norm.weight.copy_(target_norm)

    def set_vocab(self, d2t, t2d):
        self.d2t.copy_(d2t)
        self.t2d.copy_(t2d)

    def draft_to_target(self):
        return torch.arange(self.d2t.numel(), device=self.d2t.device) + self.d2t

    def ttt(self, aux, next_ids, steps, position_offset=SGLANG_DRAFT_POSITION_OFFSET):
        """Unrolled training-time test.

        aux: [B, T, 3*Ht] target residuals at the capture layers for tokens x_0..x_{T-1};
        next_ids: [B, T] with next_ids[:, t] = x_{t+1} (the shifted ids; pad past the end).
        Returns a list of `steps` logits tensors [B, T, Vd]; entry k at index t predicts
        x_{t+2+k}.
        """
        b, t, _ = aux.shape
        attn = self.midlayer.self_attn
        base = torch.arange(t, device=aux.device).expand(b, t)
        hidden = self.fc(aux)
        keys, values, outputs = [], [], []
        causal = torch.ones(t, t, dtype=torch.bool, device=aux.device).tril()
        diagonal = torch.eye(t, dtype=torch.bool, device=aux.device)
        ids = next_ids
        for k in range(steps):
            if k > 0:
                # Token x_{t+1+k}: shift left by one more, padding the tail.
                ids = F.pad(ids[:, 1:], (0, 1), value=0)
            embeds = self.embed[ids].to(hidden.dtype)
            u = torch.cat([self.midlayer.input_layernorm(embeds), self.midlayer.hidden_norm(hidden)], dim=-1)
            positions = base if k == 0 else base + k + position_offset
            cos, sin = rope_cos_sin(positions, self.head_dim, self.rope_theta, u.dtype)
            q, key, value = attn.project(u, cos, sin)
            keys.append(key)
            values.append(value)
            mask = torch.cat([causal] + [diagonal] * k, dim=1)
            a = attn.attend(q, torch.cat(keys, dim=2), torch.cat(values, dim=2), mask)
            s = a + hidden
            hidden = self.midlayer.mlp(self.midlayer.post_attention_layernorm(s)) + s
            outputs.append(self.lm_head(self.norm(hidden)))
        return outputs

    def checkpoint_tensors(self):
        """Tensors under the names of eagle3_spec 1.3 (no embed_tokens: the target's is shared)."""
        out = {}
        for name, p in self.named_parameters():
            out[name] = p.detach().to(torch.bfloat16).contiguous().cpu()
        out["d2t"] = self.d2t.detach().to(torch.int64).cpu().contiguous()
        out["t2d"] = self.t2d.detach().to(torch.bool).cpu().contiguous()
        return out

    def save(self, folder):
        from safetensors.torch import save_file
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(self.cfg, f, indent=2)
            f.write("\n")
        save_file(self.checkpoint_tensors(), os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})

    def load(self, tensors, source="checkpoint"):
        """Weights and d2t/t2d from checkpoint tensors; names must match exactly."""
        result = self.load_state_dict({k: v for k, v in tensors.items() if k not in ("d2t", "t2d")}, strict=False)
        if result.unexpected_keys or set(result.missing_keys) != {"d2t", "t2d"}:
            raise SystemExit(f"{source}: unexpected {result.unexpected_keys}, "
                             f"missing {sorted(set(result.missing_keys) - {'d2t', 't2d'})}")
        self.set_vocab(tensors["d2t"], tensors["t2d"])


def drafter_config(*, hidden, intermediate, heads, kv_heads, head_dim, vocab, draft_vocab, target_hidden,
                   aux_layer_ids, max_positions, rope_theta, rms_norm_eps, bos, eos):
    """config.json in the format real EAGLE-3 drafters ship (SpecForge / SGLang)."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "vocab_size": vocab,
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": target_hidden,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_layer_ids), "use_aux_hidden_state": True},
        "max_position_embeddings": max_positions,
        "rope_theta": rope_theta,
        "rope_scaling": None,
        "rms_norm_eps": rms_norm_eps,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
    }


def sglang_capture_layers(aux_layer_ids):
    """SGLang captures the input of layer id+1 for each configured id (eagle3_spec 2.1), ascending."""
    return sorted(i + 1 for i in aux_layer_ids)


class TargetTeacher:
    """What the drafter learns from: the target's aux residuals and its distribution."""

    def __init__(self, target, aux_layer_ids, t2d):
        self.target = target
        self.capture = sglang_capture_layers(aux_layer_ids)
        self.t2d = t2d
        self.draft_ids = torch.nonzero(t2d).flatten()

    @torch.no_grad()
    def __call__(self, ids):
        """ids [B, T] -> (aux [B,T,3Ht], target draft-vocab log-probs [B,T,Vd], in_draft [B,T] bool)."""
        normed, captured = self.target(ids, capture=self.capture)
        aux = torch.cat([captured[i] for i in self.capture], dim=-1)
        head = self.target.head_weight().to(normed.dtype)
        full_argmax = (normed @ head.T).argmax(-1)
        # SpecForge: renormalise over the draft vocab; positions whose target argmax lies
        # outside it cannot be drafted and are masked out of the loss.
        draft_logits = (normed @ head[self.draft_ids].T).float()
        return aux, torch.log_softmax(draft_logits, dim=-1), self.t2d[full_argmax]


def _ready(drafter, target, aux_layer_ids, token_counts, device, log):
    drafter.to(device).train()
    coverage = token_counts[drafter.t2d.cpu()].sum().item() / token_counts.sum().item()
    log(f"draft vocab: {drafter.cfg['draft_vocab_size']} of {drafter.cfg['vocab_size']} ids cover "
        f"{coverage:.4f} of the counted tokens")
    log(f"drafter: {sum(p.numel() for p in drafter.parameters()) / 1e6:.2f}M parameters")
    return drafter, TargetTeacher(target, aux_layer_ids, drafter.t2d), coverage


def start_drafter(cfg, target, token_counts, aux_layer_ids, seed, device, log):
    """A drafter on the target's most frequent tokens, initialised from the target, and its teacher.

    lm_head rows and the final norm start from the target's head and norm; returns
    (drafter, teacher, share of the counted tokens the draft vocab covers).
    """
    drafter = Eagle3Drafter(cfg, target.embed_tokens.weight)
    drafter.set_vocab(*draft_vocab(token_counts, cfg["draft_vocab_size"]))
    drafter.init_weights(seed, target_norm=target.norm.weight.float(), target_head=target.head_weight().float())
    return _ready(drafter, target, aux_layer_ids, token_counts, device, log)


def resume_drafter(folder, target, token_counts, aux_layer_ids, device, log):
    """The checkpoint in `folder` (its config, weights and d2t/t2d), to train further; as start_drafter."""
    from safetensors.torch import load_file
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    if cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] != list(aux_layer_ids):
        raise SystemExit(f"{folder}/config.json: aux layer ids differ from {list(aux_layer_ids)}")
    drafter = Eagle3Drafter(cfg, target.embed_tokens.weight)
    path = os.path.join(folder, "model.safetensors")
    drafter.load(load_file(path), source=path)
    log(f"drafter resumed from {folder}")
    return _ready(drafter, target, aux_layer_ids, token_counts, device, log)


def ttt_loss(drafter, teacher, ids, loss_mask, steps, decay=0.8):
    """Loss and per-step top-1 agreement for a batch of right-padded sequences.

    loss_mask[:, p] is 1 where the token x_{p+1} (what position p predicts) is trained on.
    """
    aux, target_logp, in_draft = teacher(ids)
    next_ids = F.pad(ids[:, 1:], (0, 1), value=0)
    outputs = drafter.ttt(aux, next_ids, steps)
    valid_base = (loss_mask.bool() & in_draft).float()
    total, accs = 0.0, []
    for k, logits in enumerate(outputs):
        # Step k at index t is scored against the target's distribution at t+1+k.
        shift = 1 + k
        tgt = target_logp[:, shift:]
        valid = valid_base[:, shift:]
        logp = torch.log_softmax(logits[:, :-shift].float(), dim=-1)
        ce = -(tgt.exp() * logp).sum(-1)
        denom = valid.sum().clamp(min=1.0)
        total = total + (decay ** k) * (ce * valid).sum() / denom
        agree = (logits[:, :-shift].argmax(-1) == tgt.argmax(-1)).float()
        accs.append((agree * valid).sum() / denom)
    return total, accs


@torch.no_grad()
def simulated_accept_length(drafter, teacher, ids, loss_mask, steps=3):
    """Mean committed tokens per round of chain drafting (K=1, S=steps) over greedy sequences.

    `ids` must be the target's own greedy output: then step k's input token equals the
    drafted token whenever the earlier steps were accepted, and agreement with the
    target argmax is acceptance. Rounds start at every response position with `steps`
    tokens ahead of it.
    """
    aux, target_logp, _ = teacher(ids)
    next_ids = F.pad(ids[:, 1:], (0, 1), value=0)
    outputs = drafter.ttt(aux, next_ids, steps)
    t = ids.shape[1]
    usable = t - 1 - steps
    d2t_ids = drafter.draft_to_target()
    chain = torch.ones(ids.shape[0], usable, device=ids.device)
    accepted = torch.zeros_like(chain)
    for k, logits in enumerate(outputs):
        drafted = d2t_ids[logits[:, :usable].argmax(-1)]
        chain = chain * (drafted == ids[:, 2 + k:2 + k + usable]).float()
        accepted += chain
    # A round at t needs the target tokens through t+1+steps inside the response.
    starts = loss_mask[:, :usable].float() * loss_mask[:, steps:steps + usable].float()
    return ((1.0 + accepted) * starts).sum().item(), starts.sum().item()
