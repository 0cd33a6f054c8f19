#!/usr/bin/env python3
"""Write the reference GGUF fixtures in testdata/gguf/ with the Python reference (gguf-py).

    pip install gguf numpy tokenizers safetensors
    python3 scripts/gen_gguf_fixtures.py

The Rust tests read these files, so the reader, the dequantizer, the Q/K permutation and
the tokenizer builder are checked against an independent implementation:

quants.gguf
    Metadata of every GGUF value type, and for every type we dequantize a tensor `q.<TYPE>`
    (2 rows x 512) with `ref.<TYPE>`, gguf.quants.dequantize of its bytes, stored as F32.
    Row 0 comes from gguf's own quantizer where it has one; other rows are random bytes
    with finite f16 scales, which reach every bit pattern of the quants.

tiny-llama.gguf
    A complete 2-layer llama model (tied embeddings) with a byte-level BPE vocabulary
    trained here, Q/K rows permuted with convert_hf_to_gguf.py's `permute`, and tensors in
    several quant types.
tiny-llama.expected.safetensors
    The HF tensors `convert` must produce, in f32: gguf dequantize(quantize(hf_weight)) in
    HF row order. Quantization works row by row and the permutation moves whole rows, so
    this needs no inverse permutation.
tiny-llama.expected.json
    Token ids for a few strings from models_and_data.md's Appendix B builder (for the
    `smollm` and `qwen2` pre-tokenizers), with the vocab's user-defined token added as a
    non-special token (HF's convention, which Appendix B leaves out).
"""
import json
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize
from safetensors.numpy import save_file
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from gguf_reference import appendix_b, permute

OUT = Path(__file__).resolve().parent.parent / "testdata" / "gguf"
rng = np.random.default_rng(20261129)

# Byte offsets of the f16 scale fields in one block, per type.
F16_FIELDS = {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q8_0: [0], T.Q4_K: [0, 2], T.Q6_K: [208]}


def random_blocks(ty, n_rows, row_len):
    block_elems, block_bytes = GGML_QUANT_SIZES[ty]
    raw = rng.integers(0, 256, size=(n_rows, row_len // block_elems, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[ty]:
        scales = rng.uniform(-2, 2, size=raw.shape[:2]).astype(np.float16)
        raw[:, :, off:off + 2] = scales.view(np.uint8).reshape(*raw.shape[:2], 2)
    return raw.reshape(n_rows, -1)


def write_quants():
    w = GGUFWriter(OUT / "quants.gguf", arch="test")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo ✓")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 1e-300)
    w.add_array("test.array_i32", [1, -2, 3])
    w.add_array("test.array_str", ["a", "", "ccc"])
    w.add_array("test.array_nested", [[1, 2], [3, 4, 5]])
    rows, row_len = 2, 512
    for ty in (T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q6_K):
        x = (rng.standard_normal((rows, row_len)) * 0.7).astype(np.float32)
        if ty == T.F32:
            q = x
        elif ty == T.F16:
            q = x.astype(np.float16)
        elif ty in F16_FIELDS:
            q = random_blocks(ty, rows, row_len)
            if ty in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0):
                q[0] = quantize(x[:1], ty)[0]
        else:  # BF16: gguf's own rounding
            q = quantize(x, ty)
        ref = dequantize(q, ty).astype(np.float32).reshape(rows, row_len)
        if ty in (T.F32, T.F16):
            w.add_tensor(f"q.{ty.name}", q)
        else:
            w.add_tensor(f"q.{ty.name}", q, raw_dtype=ty)
        w.add_tensor(f"ref.{ty.name}", ref)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


CORPUS = [
    "The capital of France is Paris. The capital of Italy is Rome.",
    "def add(a, b):\n    return a + b\n\nprint(add(12, 30))\n",
    "Hello world! Hello there, world. 1234567890 and 42 and 7.",
    "She said: 'it's fine', and we'll see what they've done.",
] * 20
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED = "<tool_call>"
STRINGS = [
    "Hello world! The capital of France is Paris.",
    "def add(a, b):\n    return a + b  # 12345\n",
    "<|im_start|>user\nWhat's 12+30?<|im_end|>\n<|im_start|>assistant\n",
    "call <tool_call>{\"x\": 1}",
]


def train_vocab():
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=330, special_tokens=CONTROL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(CORPUS, trainer)
    model = json.loads(tk.to_str())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    tokens.append(USER_DEFINED)
    types = [3 if t in CONTROL else 4 if t == USER_DEFINED else 1 for t in tokens]
    return tokens, types, merges


def write_tiny_llama():
    tokens, types, merges = train_vocab()
    hidden, heads, kv_heads, ffn, layers = 64, 4, 2, 96, 2
    head_dim = hidden // heads
    w = GGUFWriter(OUT / "tiny-llama.gguf", arch="llama")
    w.add_name("tiny-llama fixture")
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(100000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|im_end|>"))
    w.add_unk_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")

    expected = {}

    def tensor(gguf_name, hf_name, x, ty, heads_for_permute=None):
        if ty in (T.F32, T.F16):
            cast = x.astype(np.float32 if ty == T.F32 else np.float16)
            expected[hf_name] = cast.astype(np.float32)
            stored = permute(cast, *heads_for_permute) if heads_for_permute else cast
            w.add_tensor(gguf_name, stored)
            return
        q = quantize(x, ty)
        expected[hf_name] = dequantize(q, ty).astype(np.float32).reshape(x.shape)
        stored = permute(q, *heads_for_permute) if heads_for_permute else q
        w.add_tensor(gguf_name, stored, raw_dtype=ty)

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    tensor("token_embd.weight", "model.embed_tokens.weight", rand(len(tokens), hidden), T.Q8_0)
    types_by_layer = [
        dict(q=T.Q4_0, k=T.Q4_1, v=T.Q5_0, o=T.F16, gate=T.BF16, up=T.Q8_0, down=T.Q4_0),
        dict(q=T.Q5_0, k=T.Q8_0, v=T.Q4_1, o=T.Q4_0, gate=T.Q4_1, up=T.F16, down=T.BF16),
    ]
    for i, ty in enumerate(types_by_layer):
        b, p = f"blk.{i}.", f"model.layers.{i}."
        tensor(b + "attn_norm.weight", p + "input_layernorm.weight", 1 + rand(hidden), T.F32)
        tensor(b + "attn_q.weight", p + "self_attn.q_proj.weight", rand(heads * head_dim, hidden), ty["q"], (heads, heads))
        tensor(b + "attn_k.weight", p + "self_attn.k_proj.weight", rand(kv_heads * head_dim, hidden), ty["k"], (heads, kv_heads))
        tensor(b + "attn_v.weight", p + "self_attn.v_proj.weight", rand(kv_heads * head_dim, hidden), ty["v"])
        tensor(b + "attn_output.weight", p + "self_attn.o_proj.weight", rand(hidden, heads * head_dim), ty["o"])
        tensor(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", 1 + rand(hidden), T.F32)
        tensor(b + "ffn_gate.weight", p + "mlp.gate_proj.weight", rand(ffn, hidden), ty["gate"])
        tensor(b + "ffn_up.weight", p + "mlp.up_proj.weight", rand(ffn, hidden), ty["up"])
        tensor(b + "ffn_down.weight", p + "mlp.down_proj.weight", rand(hidden, ffn), ty["down"])
    tensor("output_norm.weight", "model.norm.weight", 1 + rand(hidden), T.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file(expected, OUT / "tiny-llama.expected.safetensors")

    encodings = {pre: [{"text": s, "ids": appendix_b(tokens, types, merges, pre, user_defined=True).encode(s).ids} for s in STRINGS]
                 for pre in ("smollm", "qwen2")}
    (OUT / "tiny-llama.expected.json").write_text(json.dumps({"encodings": encodings}, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    write_quants()
    write_tiny_llama()
    for f in sorted(OUT.iterdir()):
        print(f"{f.stat().st_size:>9}  {f}")
