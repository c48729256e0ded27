#!/usr/bin/env python3
"""Writes the golden fixtures WitCert's tests compare against, using llama.cpp.

The reference is an implementation this project did not write: llama-cpp-python (PyPI),
running the same GGUF. Its outputs are committed as small JSON under tests/golden/, so CI
compares against them without installing heavy Python.

    pip install llama-cpp-python jinja2
    python3 tests/reference/make_golden.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]

Fixtures:
  tokenize.json  token ids of many strings (add_bos=False), with and without special parsing
  logits.json    top-10 logits at the last position of raw prompts
  greedy.json    chat prompts rendered by the GGUF's own Jinja template (jinja2), their ids,
                 and 64-token greedy continuations (argmax, no penalties; stops at EOG)
"""
import argparse
import hashlib
import json
import os
import sys

import jinja2
import numpy as np
from llama_cpp import Llama, __version__ as llama_cpp_version

TOKENIZE_CASES = [
    "Hello, world!",
    "hello world",
    " Hello",
    "  two leading spaces",
    "trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nthree",
    "\n",
    " ",
    "",
    "Numbers: 0 1 12 123 1234 12345 3.14159 -42 1e10",
    "2026-11-29T09:07:44Z",
    "I'm sure you'll've they're we'd it's",
    "DON'T SHOUT I'LL STOP",
    "Ünïcödé façade naïve coöperate",
    "日本語のテキストです。",
    "中文：你好，世界！",
    "한국어 문장입니다",
    "Привет, как дела?",
    "مرحبا بالعالم",
    "Emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "    indented four\n        indented eight",
    "x = {'a': [1, 2, 3], \"b\": None}  # comment",
    "https://example.com/path?query=1&other=two#frag",
    "email@example.org, user.name+tag@domain.co.uk",
    "C:\\Windows\\System32\\drivers\\etc\\hosts",
    "$$$ %%% ^^^ &&& *** ((( )))",
    "....!!!???,,,;;;:::",
    "a\u00a0non-breaking\u2009thin\u200bzero-width",
    "mixed CASE camelCaseWords snake_case_words kebab-case-words",
    "The quick brown fox jumps over the lazy dog.",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%smith%';",
    "<html><body><p class=\"x\">Hi</p></body></html>",
    "1,000,000.00 €100 £50 ¥1000 ₹500",
    "ÀÉÎÕÜ àéîõü ßẞ ǅǆ",
    "\u0301combining accent first",
    "Line one\r\nLine two\r\n",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text with <|endoftext|> inside",
    "αβγδε ΑΒΓΔΕ ∑∏∫√∞",
    "Tab\tseparated\tvalues\t1\t2",
    "repeated repeated repeated repeated",
    "'quoted' \"double\" `back`",
]

LOGIT_PROMPTS = [
    "The capital of France is",
    "def add(a, b):\n    return",
    "Once upon a time, in a small village,",
    "1, 2, 3, 4, 5,",
    "<|im_start|>user\nWhat is the boiling point of water?<|im_end|>\n<|im_start|>assistant\n",
    "Die Hauptstadt von Deutschland ist",
]

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "List three primary colors."}],
    [{"role": "user", "content": "Explain what a KV cache is in one paragraph."}],
    [{"role": "user", "content": "Write a Python function that reverses a string."}],
    [{"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello! How can I help you today?"},
     {"role": "user", "content": "Tell me a fun fact about octopuses."}],
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default="tests/golden")
    ap.add_argument("--steps", type=int, default=64)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    digest = sha256(args.model)
    llm = Llama(model_path=args.model, n_ctx=2048, n_threads=2, n_batch=512, logits_all=True,
                verbose=False)
    meta = llm.metadata
    common = {"model_sha256": digest, "generator": f"llama-cpp-python {llama_cpp_version}"}

    cases = []
    for text in TOKENIZE_CASES:
        for special in (False, True):
            ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
            cases.append({"text": text, "parse_special": special, "ids": ids})
    with open(f"{args.out}/tokenize.json", "w") as f:
        json.dump({**common, "cases": cases}, f, ensure_ascii=False, indent=1)

    eog = {llm.token_eos()}
    for name in ("<|im_end|>", "<|endoftext|>"):
        t = llm.tokenize(name.encode(), add_bos=False, special=True)
        if len(t) == 1:
            eog.add(t[0])

    def last_logits(ids):
        llm.reset()
        llm.eval(ids)
        return np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)

    logit_cases = []
    for prompt in LOGIT_PROMPTS:
        ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
        logits = last_logits(ids)
        top = np.argsort(-logits)[:10]
        logit_cases.append({"prompt": prompt, "ids": ids,
                            "top": [{"id": int(t), "logit": float(logits[t])} for t in top]})
    with open(f"{args.out}/logits.json", "w") as f:
        json.dump({**common, "cases": logit_cases}, f, ensure_ascii=False, indent=1)

    template = jinja2.Environment(loader=jinja2.BaseLoader()).from_string(
        meta["tokenizer.chat_template"])
    chat_cases = []
    for messages in CHATS:
        text = template.render(messages=messages, add_generation_prompt=True,
                               bos_token="", eos_token="")
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        out, margins = [], []
        for _ in range(args.steps):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            order = np.argsort(-logits)[:2]
            tok = int(order[0])
            margins.append(float(logits[order[0]] - logits[order[1]]))
            out.append(tok)
            if tok in eog:
                break
            llm.eval([tok])
        chat_cases.append({"messages": messages, "prompt_text": text, "prompt_ids": ids,
                           "greedy_ids": out,
                           "greedy_text": llm.detokenize(out).decode("utf-8", "replace"),
                           "top2_margins": margins})
        print(f"chat {len(chat_cases)}: {chat_cases[-1]['greedy_text'][:80]!r}", file=sys.stderr)
    with open(f"{args.out}/greedy.json", "w") as f:
        json.dump({**common, "cases": chat_cases}, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
