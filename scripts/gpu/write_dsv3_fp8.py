"""A DeepSeek-V3-shaped checkpoint with the real per-layer sizes (hidden 7168, 128 heads, q
LoRA 1536, kv LoRA 512, 256 routed experts of 2048, 8 active, one shared, the first layer
dense) and as many layers as asked, random weights in FP8 e4m3 with 128x128
`weight_scale_inv` blocks as DeepSeek-V3's files hold them (embeddings, norms, the router
and its correction bias unquantized), sharded with an index and a word-level tokenizer,
generated on the GPU.

With --int4, the layout Kimi-K2.5 ships instead: the routed experts in compressed-tensors
pack-quantized INT4 (random 4-bit values, eight to an int32 word, a bf16 scale per group of
32 along a row, `weight_shape`), every other linear layer bf16.

usage: python3 write_dsv3_fp8.py OUT [--layers 3] [--int4]
"""
import argparse
import json
import os
import time

import torch
from safetensors.torch import save_file

from write_llama8b import finish

BLOCK = 128
GROUP = 32
SHARD_BYTES = 4 << 30

CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 3, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_routed_experts": 256, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
    "topk_method": "noaux_tc", "scoring_func": "sigmoid", "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "hidden_act": "silu",
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                     "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [BLOCK, BLOCK]},
}


def linears(cfg, i):
    h, p = cfg["hidden_size"], f"model.layers.{i}."
    heads, nope, rope, v = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    yield p + "self_attn.q_a_proj.weight", (cfg["q_lora_rank"], h)
    yield p + "self_attn.q_b_proj.weight", (heads * (nope + rope), cfg["q_lora_rank"])
    yield p + "self_attn.kv_a_proj_with_mqa.weight", (cfg["kv_lora_rank"] + rope, h)
    yield p + "self_attn.kv_b_proj.weight", (heads * (nope + v), cfg["kv_lora_rank"])
    yield p + "self_attn.o_proj.weight", (h, heads * v)
    if i < cfg["first_k_dense_replace"]:
        mlps = [(p + "mlp.", cfg["intermediate_size"])]
    else:
        inner = cfg["moe_intermediate_size"]
        mlps = [(p + f"mlp.experts.{e}.", inner) for e in range(cfg["n_routed_experts"])]
        mlps.append((p + "mlp.shared_experts.", inner * cfg["n_shared_experts"]))
    for q, inner in mlps:
        yield q + "gate_proj.weight", (inner, h)
        yield q + "up_proj.weight", (inner, h)
        yield q + "down_proj.weight", (h, inner)


def fp8(shape, gen):
    """Random weights quantized per 128x128 block: e4m3 values and the blocks' dequantization scales."""
    w = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * 0.02
    rows, cols = -(-shape[0] // BLOCK), -(-shape[1] // BLOCK)
    pad = torch.zeros(rows * BLOCK, cols * BLOCK, device="cuda")
    pad[: shape[0], : shape[1]] = w
    blocks = pad.view(rows, BLOCK, cols, BLOCK).abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale = blocks / 448.0
    q = (pad.view(rows, BLOCK, cols, BLOCK) / scale[:, None, :, None]).view(rows * BLOCK, cols * BLOCK)
    return q[: shape[0], : shape[1]].to(torch.float8_e4m3fn).cpu(), scale.cpu()


INT4_CONFIG = {
    "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 4, "type": "int", "symmetric": True, "group_size": GROUP, "strategy": "group", "dynamic": False}}},
}


def int4(shape, gen):
    """Random pack-quantized INT4 as compressed-tensors writes it: q + 8 in bits 4c..4c+4 of a
    row's int32 words, a bf16 scale per GROUP of a row (values up to about 0.02), and the shape."""
    rows, cols = shape
    words = torch.randint(-(2**31), 2**31 - 1, (rows, cols // 8), generator=gen, device="cuda", dtype=torch.int32)
    scale = (torch.rand((rows, cols // GROUP), generator=gen, device="cuda") * 0.001 + 0.002).to(torch.bfloat16)
    return words.cpu(), scale.cpu(), torch.tensor([rows, cols], dtype=torch.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--int4", action="store_true", help="routed experts in pack-quantized INT4, the rest bf16 (Kimi-K2.5)")
    args = ap.parse_args()
    cfg = dict(CONFIG, num_hidden_layers=args.layers)
    if args.int4:
        cfg["quantization_config"] = INT4_CONFIG
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    gen = torch.Generator(device="cuda").manual_seed(0)
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    shards, current, size, weight_map, total = [], {}, 0, {}, 0

    def put(name, t):
        nonlocal current, size, total
        nbytes = t.numel() * t.element_size()
        if size + nbytes > SHARD_BYTES:
            flush()
        current[name] = t
        size += nbytes
        total += nbytes

    def flush():
        nonlocal current, size
        if current:
            name = f"model-{len(shards) + 1:05d}.safetensors"
            save_file(current, os.path.join(args.out, name), metadata={"format": "pt"})
            shards.append(name)
            weight_map.update({k: name for k in current})
            current, size = {}, 0

    bf16 = lambda shape: (torch.randn(shape, generator=gen, device="cuda") * 0.02).to(torch.bfloat16).cpu()
    put("model.embed_tokens.weight", bf16((v, h)))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for norm, width in [("input_layernorm", h), ("post_attention_layernorm", h), ("self_attn.q_a_layernorm", cfg["q_lora_rank"]),
                            ("self_attn.kv_a_layernorm", cfg["kv_lora_rank"])]:
            put(p + norm + ".weight", torch.ones(width, dtype=torch.bfloat16))
        for name, shape in linears(cfg, i):
            base = name.removesuffix(".weight")
            if not args.int4:
                q, s = fp8(shape, gen)
                put(name, q)
                put(name + "_scale_inv", s)
            elif ".experts." in name:
                for suffix, t in zip(("weight_packed", "weight_scale", "weight_shape"), int4(shape, gen)):
                    put(f"{base}.{suffix}", t)
            else:
                put(name, bf16(shape))
        if i >= cfg["first_k_dense_replace"]:
            put(p + "mlp.gate.weight", bf16((cfg["n_routed_experts"], h)))
            put(p + "mlp.gate.e_score_correction_bias", torch.zeros(cfg["n_routed_experts"], dtype=torch.float32))
        print(f"layer {i} at {time.time() - t0:.0f} s", flush=True)
    put("model.norm.weight", torch.ones(h, dtype=torch.bfloat16))
    put("lm_head.weight", bf16((v, h)))
    flush()
    finish(args.out, shards, weight_map, total, cfg)
    print(json.dumps({"dir": args.out, "bytes": total, "shards": len(shards), "seconds": time.time() - t0}))


if __name__ == "__main__":
    main()
