"""Reference pieces shared by the GGUF fixture generator and the conversion verifier:
models_and_data.md's Appendix B tokenizer builder and convert_hf_to_gguf.py's `permute`."""
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

QWEN2_RX = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def appendix_b(tokens, types, merges, pre, user_defined=False):
    """Appendix B: a byte-level BPE tokenizer from a GGUF's vocabulary. With `user_defined`,
    tokens of type 4 are also added, as non-special tokens (HF's convention for Qwen's
    <tool_call>); Appendix B itself leaves them out."""
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                              merges=[tuple(m.split(" ", 1)) for m in merges]))
    if pre == "qwen2":
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_RX), behavior="isolated"),
                                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:   # smollm: single digits, then GPT-2 byte-level regex
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    if user_defined:
        tk.add_tokens([AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == 4])
    return tk


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute (HF row order -> GGUF row order)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
