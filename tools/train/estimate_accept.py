"""Re-measure a shipped pair's simulated chain acceptance from the committed files (CPU).

    python3 estimate_accept.py demo    --target testdata/demo/target --draft testdata/demo/draft \
        --prompts testdata/demo/heldout_prompts.jsonl
    python3 estimate_accept.py smollm2 --gguf GGUF --tokenizer BUNDLE/tokenizer.json \
        --draft assets/drafters/smollm2-135m-eagle3 --prompts assets/drafters/smollm2-135m-eagle3/heldout_prompts.jsonl

The target answers each prompt greedily (f32 math on the bf16 weights), then the drafter
is run with the training-time-test unroll over that output (S=3, K=1): the same estimate
the training scripts log. It checks that the files as committed load and behave as
trained; `specdeck bench` is the real measurement.
"""
import argparse
import json
import os

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from sdtrain.eagle3 import Eagle3Drafter, TargetTeacher, simulated_accept_length
from sdtrain.llama import Llama, LlamaConfig, generate


def load_target_dir(folder):
    with open(os.path.join(folder, "config.json")) as f:
        model = Llama(LlamaConfig.from_hf(json.load(f)))
    model.load_state_dict_hf(load_file(os.path.join(folder, "model.safetensors")))
    return model.float().eval(), Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))


def load_drafter(folder, target):
    with open(os.path.join(folder, "config.json")) as f:
        drafter = Eagle3Drafter(json.load(f), target.embed_tokens.weight)
    drafter.load({k: (v.float() if v.is_floating_point() else v)
                  for k, v in load_file(os.path.join(folder, "model.safetensors")).items()})
    return drafter.eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pair", choices=["demo", "smollm2"])
    ap.add_argument("--target")
    ap.add_argument("--gguf")
    ap.add_argument("--tokenizer")
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    with open(args.prompts) as f:
        texts = [json.loads(line)["prompt"] for line in f][:args.count]
    if args.pair == "demo":
        target, tok = load_target_dir(args.target)
        prompts = [e.ids for e in tok.encode_batch(texts)]
    else:
        import jinja2
        from sdtrain.gguf_loader import load_gguf_llama
        target, meta = load_gguf_llama(args.gguf, "cpu", torch.bfloat16)
        target = target.float()
        tok = Tokenizer.from_file(args.tokenizer)
        template = jinja2.Environment().from_string(meta["chat_template"])
        rendered = [template.render(messages=[{"role": "user", "content": t}], add_generation_prompt=True)
                    for t in texts]
        prompts = [e.ids for e in tok.encode_batch(rendered)]
    drafter = load_drafter(args.draft, target)
    aux_ids = drafter.cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    teacher = TargetTeacher(target, aux_ids, drafter.t2d)
    outs = generate(target, prompts, args.new_tokens, stop_ids=(target.cfg.eos_token_id,))
    total = rounds = 0.0
    for p, o in zip(prompts, outs):
        ids = torch.tensor([p + o])
        mask = torch.zeros(1, ids.shape[1])
        mask[0, len(p) - 1:ids.shape[1] - 1] = 1
        t, r = simulated_accept_length(drafter, teacher, ids, mask, steps=3)
        total, rounds = total + t, rounds + r
    print(f"{args.pair}: {len(prompts)} held-out prompts, {args.new_tokens} new tokens each: "
          f"simulated accept length (S=3, K=1) {total / max(rounds, 1):.3f} over {rounds:.0f} rounds")
    print("first greedy continuation:", repr(tok.decode(outs[0])))


if __name__ == "__main__":
    main()
