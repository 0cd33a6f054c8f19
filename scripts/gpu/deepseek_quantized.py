#!/usr/bin/env python3
"""FP8 and INT4 tiny DeepSeek-V3-family checkpoints as their producers write them, with
transformers' greedy tokens and top-5 logits on the dequantized weights.

From one set of random bf16 weights (deepseek_reference.py's layout, dims large enough for
several 128-wide blocks, one block partial as in DeepSeek-V3's kv_a_proj_with_mqa):
- dsv3-fp8: every linear weight of the decoder layers in float8_e4m3fn with 128x128
  `weight_scale_inv` blocks and DeepSeek-V3's quantization_config, quantized by transformers'
  own fine-grained FP8 quantizer (zero-padded to whole blocks, cropped back, as DeepSeek's
  ceil-sized scale grids are). transformers' FineGrainedFP8Config(dequantize=True) is then
  asked to read the file back and its answer recorded: 5.17's loader wants whole blocks and
  refuses the partial one (quantized.json, "transformers_fp8_loader").
- kimi-int4: the same text model inside the Kimi-K2.5 wrapper, routed experts in
  compressed-tensors pack-quantized INT4 (group 32, symmetric), packed by compressed-tensors'
  own PackedQuantizationCompressor; attention, dense and shared MLPs, router and lm_head stay
  bf16 as Kimi-K2.5 ships them.
quantized.json holds, per case, transformers' DeepseekV3ForCausalLM in float32 on the weights
each format's own dequantizer gives back, and the versions used.

Run on the GPU machine (compressed-tensors and its pure-Python dependencies carried as wheels):
    python3 scripts/gpu/deepseek_quantized.py OUT_DIR
"""

import json
import os
import re
import sys
import tempfile
import types

import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_reference as ref  # noqa: E402

import compressed_tensors  # noqa: E402
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor  # noqa: E402
from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme  # noqa: E402
from compressed_tensors.quantization.utils import calculate_qparams  # noqa: E402

BLOCK = 128
GROUP = 32

CONFIG = dict(
    ref.BASE,
    hidden_size=256,
    intermediate_size=512,
    moe_intermediate_size=128,
    q_lora_rank=256,
    kv_lora_rank=256,
    qk_nope_head_dim=32,
    # kv_a_proj_with_mqa has 256 + 64 = 320 outputs: 2.5 blocks, as DeepSeek-V3's 576 is 4.5.
    qk_rope_head_dim=64,
    v_head_dim=64,
    num_hidden_layers=3,
    n_group=4,
    topk_group=2,
    n_shared_experts=1,
    first_k_dense_replace=1,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
    max_position_embeddings=4096,
    rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 32, "mscale": 1.0, "mscale_all_dim": 1.0,
                  "original_max_position_embeddings": 128, "type": "yarn"},
)

# DeepSeek-V3's own quantization_config, key for key.
FP8_CONFIG = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [BLOCK, BLOCK]}
LINEAR = re.compile(r"\.(q_a_proj|q_b_proj|q_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$")
ROUTED = re.compile(r"\.mlp\.experts\.\d+\.(gate_proj|up_proj|down_proj)\.weight$")


def transformers_fp8_quantizer():
    """transformers' fine-grained FP8 weight quantizer (its conversion op), or None."""
    for module in ("transformers.integrations.finegrained_fp8", "transformers.quantizers.quantizer_finegrained_fp8",
                   "transformers.core_model_loading"):
        try:
            mod = __import__(module, fromlist=["Fp8Quantize"])
        except ImportError:
            continue
        if hasattr(mod, "Fp8Quantize"):
            return mod.Fp8Quantize, module
    return None, None


def quantize_fp8(op_class, w):
    """One weight through transformers' quantizer: zero-padded to whole blocks (padding does not
    change a block's max), then cropped, leaving DeepSeek's ceil-sized scale grid."""
    rows, cols = w.shape
    br, bc = -(-rows // BLOCK), -(-cols // BLOCK)
    padded = torch.zeros(br * BLOCK, bc * BLOCK, dtype=w.dtype, device=w.device)
    padded[:rows, :cols] = w
    # The op reads its block size (and the scale format, plain f32 here) from its quantizer's config.
    config = types.SimpleNamespace(weight_block_size=[BLOCK, BLOCK], scale_fmt=None)
    out = op_class(types.SimpleNamespace(quantization_config=config)).convert({"w.weight": padded})
    q = out["w.weight"]
    q = q[0] if isinstance(q, (list, tuple)) else q
    scale = next(v for k, v in out.items() if k != "w.weight")
    scale = scale[0] if isinstance(scale, (list, tuple)) else scale
    return q[:rows, :cols].contiguous(), scale.reshape(br, bc).to(torch.float32).contiguous()


def dequantize_fp8(q, scale_inv):
    rows, cols = q.shape
    grid = scale_inv.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:rows, :cols]
    return q.to(torch.float32) * grid


INT4_ARGS = QuantizationArgs(num_bits=4, type="int", symmetric=True, group_size=GROUP, strategy="group")
INT4_SCHEME = QuantizationScheme(targets=["Linear"], weights=INT4_ARGS)


def quantize_int4(w):
    groups = w.to(torch.float32).reshape(w.shape[0], -1, GROUP)
    scale, zero = calculate_qparams(groups.amin(-1), groups.amax(-1), INT4_ARGS)
    state = {"weight": w, "weight_scale": scale.to(w.dtype), "weight_zero_point": zero}
    return PackedQuantizationCompressor.compress(state, INT4_SCHEME)


def dequantize_int4(packed):
    return PackedQuantizationCompressor.decompress(dict(packed), INT4_SCHEME)["weight"].to(torch.float32)


def write(folder, config, tensors):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})


def reference(dequantized, device):
    """transformers on the dequantized weights (float32), through deepseek_reference's loop."""
    with tempfile.TemporaryDirectory() as tmp:
        write(tmp, CONFIG, dequantized)
        rows, _ = ref.reference(tmp, CONFIG["num_hidden_layers"], device)
    return rows


def transformers_reads_fp8(folder, dequantized):
    """Whether transformers' own FP8 loader, dequantizing, gets our dequantized weights back."""
    try:
        from transformers import FineGrainedFP8Config
        model = ref.DeepseekV3ForCausalLM.from_pretrained(
            folder, quantization_config=FineGrainedFP8Config(dequantize=True), dtype=torch.float32)
    except Exception as e:  # recorded, not fatal: the reference does not depend on it
        return {"loaded": False, "error": f"{type(e).__name__}: {e}"[:400]}
    state = model.state_dict()
    worst, compared = 0.0, 0
    for name, want in dequantized.items():
        if LINEAR.search(name) and not ROUTED.search(name) and name in state:
            worst = max(worst, (state[name].float().cpu() - want).abs().max().item())
            compared += 1
    return {"loaded": True, "compared_tensors": compared, "max_abs_difference": worst}


def main():
    root = sys.argv[1]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    bf16 = ref.checkpoint(CONFIG, 11)
    mtp = f"model.layers.{CONFIG['num_hidden_layers']}."
    bf16 = {k: v for k, v in bf16.items() if not k.startswith(mtp)}
    op_class, op_module = transformers_fp8_quantizer()
    if op_class is None:
        raise SystemExit("transformers has no Fp8Quantize here: refusing to write an FP8 file by another quantizer")
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "compressed_tensors": compressed_tensors.__version__, "device": device,
            "fp8_quantizer": f"{op_module}.Fp8Quantize", "int4_quantizer": "compressed_tensors PackedQuantizationCompressor",
            "dtype": "float32 compute on the dequantized weights", "new_tokens": ref.NEW_TOKENS, "cases": {}}

    fp8, fp8_deq = {}, {}
    for name, w in bf16.items():
        if LINEAR.search(name):
            q, s = quantize_fp8(op_class, w.to(device))
            fp8[name], fp8[name.replace(".weight", ".weight_scale_inv")] = q.cpu(), s.cpu()
            fp8_deq[name] = dequantize_fp8(q, s).cpu()
        else:
            fp8[name], fp8_deq[name] = w, w.to(torch.float32)
    folder = os.path.join(root, "dsv3-fp8")
    write(folder, dict(CONFIG, quantization_config=FP8_CONFIG), fp8)
    meta["cases"]["dsv3-fp8"] = {"prompts": reference(fp8_deq, device),
                                 "transformers_fp8_loader": transformers_reads_fp8(folder, fp8_deq)}
    print("dsv3-fp8", [r["greedy"] for r in meta["cases"]["dsv3-fp8"]["prompts"]], meta["cases"]["dsv3-fp8"]["transformers_fp8_loader"])

    int4, int4_deq, ignore = {}, {}, []
    for name, w in bf16.items():
        if ROUTED.search(name):
            base = name[: -len(".weight")]
            packed = quantize_int4(w)
            for k in ("weight_packed", "weight_scale", "weight_shape"):
                int4[f"{base}.{k}"] = packed[k]
            int4_deq[name] = dequantize_int4(packed)
        else:
            int4[name], int4_deq[name] = w, w.to(torch.float32)
            if LINEAR.search(name):
                ignore.append("language_model." + name[: -len(".weight")])
    qc = QuantizationConfig(config_groups={"group_0": INT4_SCHEME}, format="pack-quantized",
                            ignore=ignore + ["language_model.lm_head"], quantization_status="compressed")
    quant = {"quant_method": "compressed-tensors", "version": compressed_tensors.__version__,
             **qc.model_dump(exclude=["quant_method"])}
    config, wrapped = ref.kimi_wrapper(CONFIG, int4)
    config["quantization_config"] = json.loads(json.dumps(quant, default=str))
    write(os.path.join(root, "kimi-int4"), config, wrapped)
    meta["cases"]["kimi-int4"] = {"prompts": reference(int4_deq, device)}
    print("kimi-int4", [r["greedy"] for r in meta["cases"]["kimi-int4"]["prompts"]])

    with open(os.path.join(root, "quantized.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
        f.write("\n")


if __name__ == "__main__":
    main()
