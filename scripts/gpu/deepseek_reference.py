#!/usr/bin/env python3
"""Tiny DeepSeek-V3-family checkpoints and transformers' greedy tokens and top-5 logits on them.

Writes, under the output folder, one folder per case with config.json and model.safetensors laid
out as the original checkpoints are (per-expert tensors, `e_score_correction_bias`, an MTP layer at
index `num_hidden_layers`, bf16 as shipped), plus reference.json: transformers' own
`DeepseekV3ForCausalLM` (float32) on each prompt, greedy, without a KV cache so every step is one
full forward. The `kimi-k25` case is the `dsv3-qlora` text model inside the Kimi-K2.5 wrapper
(`KimiK25ForConditionalGeneration`, text model under `text_config`, weights under
`language_model.`, a token vision tower); transformers has no class for the wrapper, so its
reference is the text model's.

Run on the GPU machine, where torch and transformers are installed:
    python3 scripts/gpu/deepseek_reference.py OUT_DIR
"""

import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

VOCAB = 320
PROMPTS = [[17, 203, 5, 88, 140], [2, 3, 4, 5, 6, 7, 8, 9, 10], [311], [99, 12, 250, 64, 31, 7, 180, 222, 43, 19, 301, 75, 8, 160, 27, 55, 290]]
NEW_TOKENS = 16

BASE = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "ep_size": 1,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "moe_layer_freq": 1,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "initializer_range": 0.02,
    "use_cache": True,
    "torch_dtype": "bfloat16",
}

CASES = {
    # DeepSeek-V3 / Kimi-K2 style: q_lora set, 4 expert groups choosing 2, yarn with equal mscales.
    "dsv3-qlora": dict(
        BASE,
        num_hidden_layers=3,
        q_lora_rank=48,
        n_group=4,
        topk_group=2,
        n_shared_experts=1,
        first_k_dense_replace=1,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        max_position_embeddings=2560,
        rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                      "original_max_position_embeddings": 64, "type": "yarn"},
    ),
    # Moonlight / V2-Lite style: no q_lora, one group, two dense layers, two shared experts,
    # unnormalised top-k, mscale != mscale_all_dim so the rope's own scaling is not 1.
    "dsv3-noqlora": dict(
        BASE,
        num_hidden_layers=4,
        q_lora_rank=None,
        n_group=1,
        topk_group=1,
        n_shared_experts=2,
        first_k_dense_replace=2,
        norm_topk_prob=False,
        routed_scaling_factor=1.5,
        max_position_embeddings=2048,
        rope_scaling={"beta_fast": 1, "beta_slow": 1, "factor": 32, "mscale": 0.8, "mscale_all_dim": 0.6,
                      "original_max_position_embeddings": 64, "type": "yarn"},
    ),
}


def rand(gen, shape, std):
    return torch.randn(shape, generator=gen) * std


def mlp(gen, prefix, hidden, inner, out):
    out[f"{prefix}.gate_proj.weight"] = rand(gen, (inner, hidden), hidden ** -0.5)
    out[f"{prefix}.up_proj.weight"] = rand(gen, (inner, hidden), hidden ** -0.5)
    out[f"{prefix}.down_proj.weight"] = rand(gen, (hidden, inner), inner ** -0.5)


def norm(gen, name, width, out):
    out[name] = 1.0 + rand(gen, (width,), 0.1)


def decoder_layer(gen, cfg, i, out):
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    p = f"model.layers.{i}"
    norm(gen, f"{p}.input_layernorm.weight", h, out)
    norm(gen, f"{p}.post_attention_layernorm.weight", h, out)
    a = f"{p}.self_attn"
    if cfg["q_lora_rank"] is None:
        out[f"{a}.q_proj.weight"] = rand(gen, (heads * qk, h), h ** -0.5)
    else:
        r = cfg["q_lora_rank"]
        out[f"{a}.q_a_proj.weight"] = rand(gen, (r, h), h ** -0.5)
        norm(gen, f"{a}.q_a_layernorm.weight", r, out)
        out[f"{a}.q_b_proj.weight"] = rand(gen, (heads * qk, r), r ** -0.5)
    kv = cfg["kv_lora_rank"]
    out[f"{a}.kv_a_proj_with_mqa.weight"] = rand(gen, (kv + cfg["qk_rope_head_dim"], h), h ** -0.5)
    norm(gen, f"{a}.kv_a_layernorm.weight", kv, out)
    out[f"{a}.kv_b_proj.weight"] = rand(gen, (heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), kv), kv ** -0.5)
    out[f"{a}.o_proj.weight"] = rand(gen, (h, heads * cfg["v_head_dim"]), (heads * cfg["v_head_dim"]) ** -0.5)
    if i < cfg["first_k_dense_replace"]:
        mlp(gen, f"{p}.mlp", h, cfg["intermediate_size"], out)
        return
    n, inner = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    out[f"{p}.mlp.gate.weight"] = rand(gen, (n, h), h ** -0.5)
    # Large enough to change which experts win, so a router that adds the bias to the weights
    # (instead of only to the choice) gives different tokens.
    out[f"{p}.mlp.gate.e_score_correction_bias"] = rand(gen, (n,), 0.1)
    for e in range(n):
        mlp(gen, f"{p}.mlp.experts.{e}", h, inner, out)
    mlp(gen, f"{p}.mlp.shared_experts", h, inner * cfg["n_shared_experts"], out)


def checkpoint(cfg, seed):
    gen = torch.Generator().manual_seed(seed)
    h, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    out = {"model.embed_tokens.weight": rand(gen, (VOCAB, h), 1.0)}
    for i in range(layers):
        decoder_layer(gen, cfg, i, out)
    norm(gen, "model.norm.weight", h, out)
    out["lm_head.weight"] = rand(gen, (VOCAB, h), h ** -0.5)
    # The MTP (next-n) layer as DeepSeek ships it, at index num_hidden_layers: a loader must skip it.
    decoder_layer(gen, dict(cfg, first_k_dense_replace=0), layers, out)
    m = f"model.layers.{layers}"
    out[f"{m}.embed_tokens.weight"] = rand(gen, (VOCAB, h), 1.0)
    norm(gen, f"{m}.enorm.weight", h, out)
    norm(gen, f"{m}.hnorm.weight", h, out)
    out[f"{m}.eh_proj.weight"] = rand(gen, (h, 2 * h), (2 * h) ** -0.5)
    norm(gen, f"{m}.shared_head.norm.weight", h, out)
    out[f"{m}.shared_head.head.weight"] = rand(gen, (VOCAB, h), h ** -0.5)
    return {k: v.to(torch.bfloat16).contiguous() for k, v in out.items()}


def write(folder, config, tensors):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


@torch.no_grad()
def reference(folder, num_layers, device):
    model, info = DeepseekV3ForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
    mtp = f"model.layers.{num_layers}."
    unexpected = [k for k in info["unexpected_keys"] if not k.startswith(mtp)]
    if info["missing_keys"] or unexpected or info["mismatched_keys"]:
        raise SystemExit(f"{folder}: transformers did not load every tensor: {info}")
    model = model.to(device).eval()
    rows = []
    for prompt in PROMPTS:
        ids = list(prompt)
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([ids], device=device), use_cache=False).logits[0, -1]
            ids.append(int(logits.argmax()))
        logits = model(torch.tensor([ids[:-1]], device=device), use_cache=False).logits[0].float().cpu()
        top = logits.topk(5, dim=-1)
        rows.append({
            "prompt": prompt,
            "greedy": ids[len(prompt):],
            "top5_ids": top.indices.tolist(),
            "top5_logits": [[round(x, 5) for x in r] for r in top.values.tolist()],
        })
    read_back = DeepseekV3Config.from_pretrained(folder).to_dict()
    return rows, read_back


def kimi_wrapper(text_config, tensors):
    text = dict(text_config, model_type="kimi_k2")
    config = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "bos_token_id": 0,
        "eos_token_id": 1,
        "media_placeholder_token_id": 319,
        "tie_word_embeddings": False,
        "text_config": text,
        "vision_config": {"model_type": "moonvit3d", "hidden_size": 16, "num_hidden_layers": 1, "patch_size": 14},
    }
    out = {f"language_model.{k}": v for k, v in tensors.items()}
    gen = torch.Generator().manual_seed(7)
    out["vision_tower.patch_embed.proj.weight"] = rand(gen, (16, 3, 14, 14), 0.02).to(torch.bfloat16)
    out["mm_projector.proj.0.weight"] = rand(gen, (64, 64), 0.02).to(torch.bfloat16)
    return config, out


def main():
    root = sys.argv[1]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "device": device,
            "dtype": "float32 compute on bf16 weights", "new_tokens": NEW_TOKENS, "cases": {}}
    for seed, (name, cfg) in enumerate(CASES.items(), start=1):
        tensors = checkpoint(cfg, seed)
        folder = os.path.join(root, name)
        write(folder, cfg, tensors)
        rows, read_back = reference(folder, cfg["num_hidden_layers"], device)
        meta["cases"][name] = {"prompts": rows, "transformers_config": read_back}
        if name == "dsv3-qlora":
            config, wrapped = kimi_wrapper(cfg, tensors)
            write(os.path.join(root, "kimi-k25"), config, wrapped)
            meta["cases"]["kimi-k25"] = {"same_as": "dsv3-qlora", "prompts": rows}
        print(name, [r["greedy"] for r in rows])
    with open(os.path.join(root, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
        f.write("\n")


if __name__ == "__main__":
    main()
