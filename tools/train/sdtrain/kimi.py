"""The demo's Kimi-K2.5-architecture target: transformers' own DeepseekV3ForCausalLM (MLA, the
sigmoid grouped-top-k MoE, yarn), behind the interface sdtrain/llama.py's Llama gives the
training loop and the EAGLE-3 teacher, and written as Kimi-K2.5 ships: the
`KimiK25ForConditionalGeneration` wrapper (text model under `text_config`, weights under
`language_model.`, a token vision tower), per-expert tensors, and optionally its routed experts
in compressed-tensors pack-quantized INT4 (group 32) as Kimi-K2.5's are.
"""
import json
import os
import tempfile

import torch
import torch.nn as nn
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

WRAPPER_PREFIX = "language_model."
GROUP = 32


class KimiTarget(nn.Module):
    def __init__(self, text_config, dropout=0.0):
        super().__init__()
        self.text_config = text_config
        self.dropout = dropout  # the loop sets it; transformers' DeepseekV3 has no residual dropout
        self.hf = DeepseekV3ForCausalLM(DeepseekV3Config(**text_config))
        self.embed_tokens = self.hf.model.embed_tokens
        self.norm = self.hf.model.norm

    def init_weights(self, seed):
        torch.manual_seed(seed)
        self.hf.apply(self.hf._init_weights)
        with torch.no_grad():
            for layer in self.hf.model.layers:
                gate = getattr(layer.mlp, "gate", None)
                if gate is not None and hasattr(gate, "e_score_correction_bias"):
                    gate.e_score_correction_bias.zero_()

    def head_weight(self):
        return self.hf.lm_head.weight

    def forward(self, ids, capture=()):
        """(final normed hidden [B,T,H], {layer: residual stream entering it}) like Llama's."""
        captured, hooks = {}, []
        for i in capture:
            def grab(module, args, kwargs, i=i):
                captured[i] = args[0] if args else kwargs["hidden_states"]
            hooks.append(self.hf.model.layers[i].register_forward_pre_hook(grab, with_kwargs=True))
        try:
            out = self.hf.model(input_ids=ids, use_cache=False)
        finally:
            for h in hooks:
                h.remove()
        return out.last_hidden_state, captured

    def logits(self, normed):
        return normed @ self.head_weight().to(normed.dtype).T

    def original_layout(self):
        """The text model's tensors under the original checkpoints' names (per-expert)."""
        out = {}
        for name, t in self.hf.state_dict().items():
            t = t.detach().to(torch.bfloat16).cpu()
            if name.endswith("mlp.experts.gate_up_proj"):
                base, inner = name[: -len("gate_up_proj")], t.shape[1] // 2
                for e in range(t.shape[0]):
                    out[f"{base}{e}.gate_proj.weight"] = t[e, :inner].contiguous()
                    out[f"{base}{e}.up_proj.weight"] = t[e, inner:].contiguous()
            elif name.endswith("mlp.experts.down_proj"):
                base = name[: -len("down_proj")]
                for e in range(t.shape[0]):
                    out[f"{base}{e}.down_proj.weight"] = t[e].contiguous()
            elif "e_score_correction_bias" in name:
                out[name] = t.float().contiguous()
            else:
                out[name] = t.contiguous()
        return out


def check_layout(model, tensors, ids):
    """Reload `tensors` through transformers' own loader and compare logits with the model."""
    from safetensors.torch import save_file
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(dict(model.text_config, architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3"), f)
        save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        again, info = DeepseekV3ForCausalLM.from_pretrained(tmp, dtype=torch.bfloat16, output_loading_info=True)
    if info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]:
        raise SystemExit(f"the written layout does not load back: {info}")
    again = again.to(ids.device).eval()
    with torch.no_grad():
        want = model.hf(input_ids=ids, use_cache=False).logits.float()
        got = again(input_ids=ids, use_cache=False).logits.float()
    return (want - got).abs().max().item()


def int4_experts(tensors):
    """Routed experts in compressed-tensors pack-quantized INT4 by its own compressor; the
    weights its own decompressor gives back (to run the teacher as the engine will); the
    quantization_config; the names of the linears left bf16."""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams
    import compressed_tensors
    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, group_size=GROUP, strategy="group")
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    packed, dequantized, ignore = {}, {}, []
    for name, w in tensors.items():
        is_expert = ".mlp.experts." in name and name.endswith("_proj.weight")
        if not is_expert:
            packed[name] = w
            if name.endswith("_proj.weight") or name.endswith("_mqa.weight"):
                ignore.append(WRAPPER_PREFIX + name[: -len(".weight")])
            continue
        groups = w.float().reshape(w.shape[0], -1, GROUP)
        scale, zero = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
        state = PackedQuantizationCompressor.compress({"weight": w, "weight_scale": scale.to(w.dtype), "weight_zero_point": zero}, scheme)
        base = name[: -len(".weight")]
        for k in ("weight_packed", "weight_scale", "weight_shape"):
            packed[f"{base}.{k}"] = state[k]
        dequantized[name] = PackedQuantizationCompressor.decompress(dict(state), scheme)["weight"].to(torch.bfloat16)
    config = QuantizationConfig(config_groups={"group_0": scheme}, format="pack-quantized",
                                ignore=ignore + [WRAPPER_PREFIX + "lm_head"], quantization_status="compressed")
    quant = {"quant_method": "compressed-tensors", "version": compressed_tensors.__version__,
             **json.loads(json.dumps(config.model_dump(exclude=["quant_method"]), default=str))}
    return packed, dequantized, quant


def load_weights(model, tensors):
    """Put original-layout `tensors` (per-expert) back into the model (fused where it fuses)."""
    state = model.hf.state_dict()
    new = {}
    for name in state:
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            e = state[name].shape[0]
            new[name] = torch.stack([torch.cat([tensors[f"{base}{i}.gate_proj.weight"], tensors[f"{base}{i}.up_proj.weight"]]) for i in range(e)])
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            new[name] = torch.stack([tensors[f"{base}{i}.down_proj.weight"] for i in range(state[name].shape[0])])
        else:
            new[name] = tensors[name]
    model.hf.load_state_dict({k: v.to(state[k].dtype) for k, v in new.items()})


def save_wrapped(folder, model, tensors, quant, tokenizer_config, bos, eos):
    """The Kimi-K2.5 wrapper folder: config.json, model.safetensors, tokenizer_config.json."""
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    text = dict(model.text_config, architectures=["DeepseekV3ForCausalLM"], model_type="kimi_k2")
    config = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "bos_token_id": bos,
        "eos_token_id": eos,
        "media_placeholder_token_id": text["vocab_size"] - 1,
        "tie_word_embeddings": False,
        "text_config": text,
        "vision_config": {"model_type": "moonvit3d", "hidden_size": 16, "num_hidden_layers": 1, "patch_size": 14},
    }
    if quant is not None:
        config["quantization_config"] = quant
    out = {WRAPPER_PREFIX + k: v for k, v in tensors.items()}
    gen = torch.Generator().manual_seed(7)
    out["vision_tower.patch_embed.proj.weight"] = (torch.randn(16, 3, 14, 14, generator=gen) * 0.02).to(torch.bfloat16)
    out["mm_projector.proj.0.weight"] = (torch.randn(text["hidden_size"], 16, generator=gen) * 0.02).to(torch.bfloat16)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        f.write(tokenizer_config)
    save_file(out, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


@torch.no_grad()
def generate(model, prompts, max_new_tokens, stop_ids=(), temperature=0.0, generator=None, pad_id=0):
    """Batched generation through transformers' own generate (left-padded prompts); one list of
    new ids per prompt, cut after the first stop id (kept), as sdtrain.llama.generate."""
    device = model.embed_tokens.weight.device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(p, device=device)
        mask[row, width - len(p):] = 1
    kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=pad_id, eos_token_id=None)
    if temperature > 0:
        # transformers samples from the global generator: seeded here instead of `generator`.
        torch.manual_seed(0)
        kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    else:
        kwargs.update(do_sample=False)
    out = model.hf.generate(input_ids=ids, attention_mask=mask, **kwargs)[:, width:].tolist()
    stops = set(stop_ids)
    cut = []
    for row in out:
        end = next((i + 1 for i, t in enumerate(row) if t in stops), len(row))
        cut.append(row[:end])
    return cut
