#!/usr/bin/env python3
"""Check a `specdeck convert gguf` folder against the Python reference (gguf-py).

    pip install gguf numpy tokenizers
    python3 scripts/verify_conversion.py IN.gguf BF16_DIR [--f32-dir F32_DIR] [--per-type N]

For up to N tensors of every ggml type in the GGUF:
  * the f32 folder (convert --dtype f32) must equal gguf.quants.dequantize exactly; for a
    llama GGUF the Q/K tensors are first put back into GGUF row order with
    convert_hf_to_gguf's own `permute`, so the reference needs no inverse of our code;
  * the bf16 folder must equal the reference rounded to bf16 (round-to-nearest-even) exactly.
Then tokenizer.json must encode a few strings to the same ids as a tokenizer built from the
GGUF with models_and_data.md's Appendix B builder, and its vocab, merges, pre-tokenizer and
decoder must match that builder's JSON.
Exits non-zero on any difference.
"""
import argparse
import json
import struct
import sys
from collections import defaultdict

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from tokenizers import Tokenizer

from gguf_reference import appendix_b, permute

LAYER = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
         "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
         "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
         "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
         "attn_v.bias": "self_attn.v_proj.bias", "ffn_gate.weight": "mlp.gate_proj.weight",
         "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}
TOP = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight",
       "output_norm.weight": "model.norm.weight"}
STRINGS = [
    "The capital of France is Paris. It has 2,148,271 inhabitants (2020).",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n <= 1:\n        return n\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat's 12+30?<|im_end|>\n",
    "Ünïcödé — naïve café, 東京, emoji 🙂, tabs\tand  double  spaces\r\n",
]
# Not NFC: Qwen2's HF tokenizer normalizes it (so do we); Appendix B does not, so this one is
# compared only against a real HF tokenizer.json (--hf-tokenizer).
DECOMPOSED = "cafe\u0301 nai\u0308ve <tool_call>{\"name\": \"f\"}</tool_call>"


def hf_name(name):
    if name in TOP:
        return TOP[name]
    _, layer, suffix = name.split(".", 2)
    return f"model.layers.{layer}.{LAYER[suffix]}"


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        raw = data[s:e]
        if info["dtype"] == "F32":
            arr = raw.view(np.float32)
        elif info["dtype"] == "BF16":
            arr = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{path}: {name} has dtype {info['dtype']}")
        out[name] = arr.reshape(info["shape"])
    return out


def to_bf16(x):
    """Round f32 to bf16 (nearest even), returned as f32. NaN-free inputs only."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def appendix_b_tokenizer(r):
    """models_and_data.md Appendix B over the GGUF's own vocabulary."""
    f = lambda k: r.fields[k].contents()
    return appendix_b(f("tokenizer.ggml.tokens"), f("tokenizer.ggml.token_type"), f("tokenizer.ggml.merges"),
                      f("tokenizer.ggml.pre"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("bf16_dir")
    ap.add_argument("--f32-dir")
    ap.add_argument("--per-type", type=int, default=4)
    ap.add_argument("--hf-tokenizer", help="a tokenizer.json from the original HF model, to compare ids with")
    a = ap.parse_args()

    r = GGUFReader(a.gguf)
    arch = r.fields["general.architecture"].contents()
    n_head = r.fields[f"{arch}.attention.head_count"].contents()
    n_kv = r.fields[f"{arch}.attention.head_count_kv"].contents()
    bf16 = read_safetensors(f"{a.bf16_dir}/model.safetensors")
    f32 = read_safetensors(f"{a.f32_dir}/model.safetensors") if a.f32_dir else None
    ok = True

    by_type = defaultdict(list)
    for t in r.tensors:
        by_type[t.tensor_type.name].append(t)
    print(f"{'type':6} {'tensor':28} {'shape':>14} {'f32 max|diff|':>14} {'bf16 vs RNE(ref)':>17} {'bf16 vs ref':>12}")
    for ty, ts in sorted(by_type.items()):
        # Spread the picks over the file: first, last and evenly between.
        picks = [ts[int(i)] for i in np.unique(np.linspace(0, len(ts) - 1, min(a.per_type, len(ts))).round())]
        # Always include the first Q and K projections of this type: they carry the permutation.
        for proj in ("attn_q.weight", "attn_k.weight"):
            first = next((t for t in ts if t.name.endswith(proj)), None)
            if first is not None and first not in picks:
                picks.append(first)
        for t in picks:
            ref = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(s) for s in reversed(t.shape)])
            name = hf_name(t.name)

            def gguf_order(x):
                if arch == "llama" and t.name.split(".")[-2] in ("attn_q", "attn_k"):
                    return permute(x, n_head, n_head if t.name.split(".")[-2] == "attn_q" else n_kv)
                return x

            d32 = float(np.abs(gguf_order(f32[name]) - ref).max()) if f32 is not None else float("nan")
            mine16 = gguf_order(bf16[name])
            d16 = float(np.abs(mine16 - to_bf16(ref)).max())
            d16ref = float(np.abs(mine16 - ref).max())
            print(f"{ty:6} {t.name:28} {str(tuple(ref.shape)):>14} {d32:14.3g} {d16:17.3g} {d16ref:12.3g}")
            if d16 != 0 or (f32 is not None and d32 != 0):
                ok = False
    names = {hf_name(t.name) for t in r.tensors}
    if set(bf16) != names:
        print("tensor names differ:", sorted(set(bf16) ^ names))
        ok = False

    ref_tok = appendix_b_tokenizer(r)
    mine = Tokenizer.from_file(f"{a.bf16_dir}/tokenizer.json")
    for s in STRINGS:
        want, got = ref_tok.encode(s).ids, mine.encode(s).ids
        same = want == got
        ok &= same
        print(f"tokenizer {'same' if same else 'DIFFERENT'}: {len(got)} ids for {s[:40]!r}")
        if mine.decode(got, skip_special_tokens=False) != s:
            print("  decode does not round-trip")
            ok = False
    jr, jm = json.loads(ref_tok.to_str()), json.loads(mine.to_str())
    pre = r.fields["tokenizer.ggml.pre"].contents()
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder", "model"):
        same = jr[part] == jm[part]
        if part == "normalizer" and pre == "qwen2" and jm[part] == {"type": "NFC"} and jr[part] is None:
            print("tokenizer.json normalizer: NFC (as Qwen2's HF tokenizer; Appendix B has none)")
            continue
        ok &= same
        print(f"tokenizer.json {part}: {'same' if same else 'DIFFERENT'}")
    if a.hf_tokenizer:
        hf = Tokenizer.from_file(a.hf_tokenizer)
        for s in STRINGS + [DECOMPOSED]:
            same = hf.encode(s).ids == mine.encode(s).ids
            ok &= same
            print(f"vs HF tokenizer.json {'same' if same else 'DIFFERENT'}: {len(mine.encode(s).ids)} ids for {s[:40]!r}")
    special = [t for t in jm["added_tokens"] if t["special"]]
    same = special == jr["added_tokens"]
    ok &= same
    extra = [t["content"] for t in jm["added_tokens"] if not t["special"]]
    print(f"special added tokens: {'same' if same else 'DIFFERENT'} ({len(special)}); "
          f"non-special user-defined tokens we add beyond Appendix B: {extra}")
    print("OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
