#!/usr/bin/env python3
"""Generates tests/engine/tokenizer/fixtures/sentencepiece_bpe.json.

An independent reference for WitCert's SentencePiece-style BPE (engine/tokenizer/bpe_tokenizer.h):
HF `tokenizers` (PyPI) trains a small byte-fallback BPE vocabulary on the corpus below, the
vocabulary is laid out the way Llama 2 / Mistral checkpoints lay theirs out (<unk>, <s>, </s>,
the 256 <0xNN> byte tokens, then the learned pieces, and a merge list holding every split of
every piece, ordered by the piece's id, which is what the score order of a SentencePiece model
gives), and `tokenizers` itself encodes the test strings under three published configurations:

  legacy          normalizer Prepend("▁") + Replace(" " → "▁"), no pre-tokenizer (Llama 2,
                  Mistral 7B v0.1)
  metaspace_first Metaspace prepend_scheme "first", split false (Mistral 7B v0.3)
  metaspace_split Metaspace prepend_scheme "always", split true (older conversions)

The same vocabulary, with score = −id for learned pieces, is what the C++ test writes as a GGUF
"llama" vocabulary; llama.cpp's tokenizer puts "▁" before every text segment as `legacy` does.

Run with a venv holding `tokenizers`:  python make_sentencepiece_fixture.py
"""
import json
import os

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPACE = "\u2581"
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! Hello there, how are you doing today?",
    "def main():\n    return 0  # two spaces before the comment",
    "In the beginning the model read the text and then the tokens.",
    "Tokenizers split text into pieces; pieces merge into tokens.",
    "Mistral and Llama use SentencePiece vocabularies with byte fallback.",
    "Numbers like 2024, 3.14159 and 1e-5 appear in technical text.",
    "café naïve résumé über",
] * 20
SPECIALS = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
CASES = [
    "Hello world",
    "the quick brown fox",
    "  two leading spaces",
    "multiple   spaces   inside",
    "trailing space ",
    "tabs\tand\nnewlines\n",
    "unicode: café, naïve, 日本語 🙂",
    "[INST] What is 2+2?[/INST]",
    "[INST]Hello[/INST] The answer",
    "a",
    " ",
    "",
    "Zebra quartz vexing jumps",
]


def base_tokenizer():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=[SPACE])
    tok.train_from_iterator(CORPUS, trainer)
    return json.loads(tok.to_str())


def main():
    trained = base_tokenizer()
    vocab = trained["model"]["vocab"]  # piece → id: specials 0..258, then characters and merges
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    pieces = [p for p, _ in by_id]
    ids = dict(vocab)
    merges = []
    for piece, pid in by_id:
        if pid < len(SPECIALS) or len(piece) < 2:
            continue
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in ids and right in ids and ids[left] >= len(SPECIALS) and ids[right] >= len(SPECIALS):
                merges.append([left, right])
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
             "vocab": vocab, "merges": merges}
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    # Mistral v0.3's control tokens, appended as added special tokens.
    added += [{"id": len(pieces) + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
               "normalized": False, "special": True} for i, c in enumerate(["[INST]", "[/INST]"])]
    sp_decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    variants = {
        "legacy": {
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": SPACE},
                {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]},
            "pre_tokenizer": None, "decoder": sp_decoder},
        "metaspace_first": {
            "normalizer": None,
            "pre_tokenizer": {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first", "split": False},
            "decoder": {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first", "split": False}},
        "metaspace_split": {
            "normalizer": None,
            "pre_tokenizer": {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True},
            "decoder": {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True}},
    }
    out = {"model": model, "added_tokens": added, "variants": {}}
    for name, v in variants.items():
        doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
               "normalizer": v["normalizer"], "pre_tokenizer": v["pre_tokenizer"], "post_processor": None,
               "decoder": v["decoder"], "model": model}
        tok = Tokenizer.from_str(json.dumps(doc))
        cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in CASES]
        out["variants"][name] = {k: v[k] for k in ("normalizer", "pre_tokenizer", "decoder")}
        out["variants"][name]["cases"] = cases
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "sentencepiece_bpe.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(path, len(pieces), "pieces,", len(merges), "merges")
    for name in variants:
        print(name, [c["ids"] for c in out["variants"][name]["cases"][:3]])


if __name__ == "__main__":
    main()
