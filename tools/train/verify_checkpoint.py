"""Check an EAGLE-3 drafter folder against its target folder (eagle3_spec 1.3 and 8.1).

    python3 verify_checkpoint.py TARGET_DIR DRAFT_DIR

Exits non-zero naming the first broken rule; prints a one-line summary otherwise.
"""
import json
import os
import sys

import torch
from safetensors import safe_open


def load(folder):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    tensors = {}
    path = os.path.join(folder, "model.safetensors")
    with safe_open(path, "pt") as f:
        for key in f.keys():
            tensors[key] = f.get_tensor(key)
    return cfg, tensors


def fail(msg):
    raise SystemExit(f"verify_checkpoint: {msg}")


def verify(target_dir, draft_dir):
    tcfg, ttensors = load(target_dir)
    dcfg, d = load(draft_dir)
    h, ht = dcfg["hidden_size"], tcfg["hidden_size"]
    v, vd = dcfg["vocab_size"], dcfg["draft_vocab_size"]
    hd, nh, nkv = dcfg["head_dim"], dcfg["num_attention_heads"], dcfg["num_key_value_heads"]
    layers = tcfg["num_hidden_layers"]
    if dcfg["architectures"] != ["LlamaForCausalLMEagle3"]:
        fail(f"{draft_dir}: architectures = {dcfg['architectures']}")
    if v != tcfg["vocab_size"] or ttensors["model.embed_tokens.weight"].shape[0] != v:
        fail(f"vocab_size {v} != target vocab {tcfg['vocab_size']}")
    if dcfg["target_hidden_size"] != ht:
        fail(f"target_hidden_size {dcfg['target_hidden_size']} != target hidden {ht}")
    ids = dcfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    if len(set(ids)) != 3 or not all(0 <= i <= layers - 2 for i in ids):
        fail(f"aux layer ids {ids} outside 0..{layers - 2} (SGLang convention) or not 3 distinct")
    shapes = {
        "fc.weight": (h, 3 * ht),
        "midlayer.input_layernorm.weight": (h,), "midlayer.hidden_norm.weight": (h,),
        "midlayer.self_attn.q_proj.weight": (nh * hd, 2 * h),
        "midlayer.self_attn.k_proj.weight": (nkv * hd, 2 * h),
        "midlayer.self_attn.v_proj.weight": (nkv * hd, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, nh * hd),
        "midlayer.post_attention_layernorm.weight": (h,),
        "midlayer.mlp.gate_proj.weight": (dcfg["intermediate_size"], h),
        "midlayer.mlp.up_proj.weight": (dcfg["intermediate_size"], h),
        "midlayer.mlp.down_proj.weight": (h, dcfg["intermediate_size"]),
        "norm.weight": (h,), "lm_head.weight": (vd, h), "d2t": (vd,), "t2d": (v,),
    }
    if set(d) != set(shapes):
        fail(f"tensor names differ: extra {sorted(set(d) - set(shapes))}, missing {sorted(set(shapes) - set(d))}")
    for name, shape in shapes.items():
        if tuple(d[name].shape) != shape:
            fail(f"{name}: shape {tuple(d[name].shape)} != {shape}")
        want = {"d2t": torch.int64, "t2d": torch.bool}.get(name, torch.bfloat16)
        if d[name].dtype != want:
            fail(f"{name}: dtype {d[name].dtype} != {want}")
    mapped = torch.arange(vd) + d["d2t"]
    if mapped.min() < 0 or mapped.max() >= v or not bool((mapped[1:] > mapped[:-1]).all()):
        fail("d2t: i + d2t[i] must lie in [0, V) and strictly increase")
    if int(d["t2d"].sum()) != vd or not bool(d["t2d"][mapped].all()):
        fail("t2d must mark exactly the ids d2t maps to")
    size = os.path.getsize(os.path.join(draft_dir, "model.safetensors"))
    print(f"ok: {draft_dir} H={h} Ht={ht} V={v} Vd={vd} aux ids {ids} -> capture {[i + 1 for i in sorted(ids)]}, "
          f"{size / 1e6:.1f} MB")


if __name__ == "__main__":
    verify(*sys.argv[1:3])
