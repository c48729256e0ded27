#!/usr/bin/env python3
"""Adds exact (float64) logits to tests/golden/logits.json.

A second, independent oracle beside llama.cpp: the GGUF's weights dequantized by the PyPI
`gguf` package and the transformer evaluated in float64 numpy, with no activation
quantization and no fp16 KV cache. It measures how far llama.cpp's own quantized arithmetic
sits from exact (which sets the tolerance of comparisons against llama.cpp), and it is the
reference for WitCert's exact-matmul forward mode, which must match it closely.

    python3 tests/reference/exact_forward.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
Only the llama architecture with interleaved RoPE pairs (as GGUF stores it) is handled.
"""
import argparse
import json

import gguf
import numpy as np


class ExactLlama:
    def __init__(self, path):
        self.reader = gguf.GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        f = self.reader.fields
        arch = "llama"
        def val(key):
            field = f[f"{arch}.{key}"]
            return field.parts[field.data[0]][0]
        self.layers = int(val("block_count"))
        self.heads = int(val("attention.head_count"))
        self.kv_heads = int(val("attention.head_count_kv"))
        self.hidden = int(val("embedding_length"))
        self.head_dim = self.hidden // self.heads
        self.eps = float(val("attention.layer_norm_rms_epsilon"))
        self.theta = float(val("rope.freq_base"))
        self._cache = {}

    def weight(self, name):
        if name not in self._cache:
            t = self.tensors[name]
            a = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64)
            shape = [int(x) for x in reversed(t.shape)]
            self._cache[name] = a.reshape(shape) if len(shape) > 1 else a.reshape(-1)
        return self._cache[name]

    def rms(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        d = self.head_dim
        inv = self.theta ** (-2.0 * np.arange(d // 2) / d)
        ang = pos[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def greedy(self, ids, steps, eog):
        """Greedy continuation in float64 with a K/V cache; returns tokens and top-2 margins."""
        d, hq, hkv = self.head_dim, self.heads, self.kv_heads
        emb = self.weight("token_embd.weight")
        out_w = self.weight("output.weight") if "output.weight" in self.tensors else emb
        cache_k = [np.zeros((0, hkv, d)) for _ in range(self.layers)]
        cache_v = [np.zeros((0, hkv, d)) for _ in range(self.layers)]
        tokens, margins, pending, start = [], [], list(ids), 0
        for _ in range(steps):
            n = len(pending)
            x = emb[np.asarray(pending)]
            pos = np.arange(start, start + n, dtype=np.float64)
            for l in range(self.layers):
                p = f"blk.{l}."
                h = self.rms(x, self.weight(p + "attn_norm.weight"))
                q = self.rope((h @ self.weight(p + "attn_q.weight").T).reshape(n, hq, d), pos)
                k = self.rope((h @ self.weight(p + "attn_k.weight").T).reshape(n, hkv, d), pos)
                v = (h @ self.weight(p + "attn_v.weight").T).reshape(n, hkv, d)
                cache_k[l] = np.concatenate([cache_k[l], k])
                cache_v[l] = np.concatenate([cache_v[l], v])
                total = cache_k[l].shape[0]
                mask = np.where(np.arange(total)[None, :] <= pos[:, None], 0.0, -np.inf)
                att = np.zeros((n, hq, d))
                for head in range(hq):
                    g = head // (hq // hkv)
                    s = q[:, head] @ cache_k[l][:, g].T / np.sqrt(d) + mask
                    s = np.exp(s - s.max(-1, keepdims=True))
                    att[:, head] = (s / s.sum(-1, keepdims=True)) @ cache_v[l][:, g]
                x = x + att.reshape(n, hq * d) @ self.weight(p + "attn_output.weight").T
                h = self.rms(x, self.weight(p + "ffn_norm.weight"))
                gate = h @ self.weight(p + "ffn_gate.weight").T
                up = h @ self.weight(p + "ffn_up.weight").T
                x = x + (gate / (1.0 + np.exp(-gate)) * up) @ self.weight(p + "ffn_down.weight").T
            logits = out_w @ self.rms(x[-1], self.weight("output_norm.weight"))
            order = np.argsort(-logits)[:2]
            tokens.append(int(order[0]))
            margins.append(float(logits[order[0]] - logits[order[1]]))
            start += n
            pending = [tokens[-1]]
            if tokens[-1] in eog:
                break
        return tokens, margins

    def last_logits(self, ids):
        n, d, hq, hkv = len(ids), self.head_dim, self.heads, self.kv_heads
        emb = self.weight("token_embd.weight")
        x = emb[np.asarray(ids)]
        pos = np.arange(n, dtype=np.float64)
        mask = np.triu(np.full((n, n), -np.inf), 1)
        for l in range(self.layers):
            p = f"blk.{l}."
            h = self.rms(x, self.weight(p + "attn_norm.weight"))
            q = self.rope((h @ self.weight(p + "attn_q.weight").T).reshape(n, hq, d), pos)
            k = self.rope((h @ self.weight(p + "attn_k.weight").T).reshape(n, hkv, d), pos)
            v = (h @ self.weight(p + "attn_v.weight").T).reshape(n, hkv, d)
            out = np.zeros((n, hq, d))
            for head in range(hq):
                g = head // (hq // hkv)
                s = q[:, head] @ k[:, g].T / np.sqrt(d) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                out[:, head] = (s / s.sum(-1, keepdims=True)) @ v[:, g]
            x = x + out.reshape(n, hq * d) @ self.weight(p + "attn_output.weight").T
            h = self.rms(x, self.weight(p + "ffn_norm.weight"))
            gate = h @ self.weight(p + "ffn_gate.weight").T
            up = h @ self.weight(p + "ffn_up.weight").T
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ self.weight(p + "ffn_down.weight").T
        out_w = self.weight("output.weight") if "output.weight" in self.tensors else emb
        return out_w @ self.rms(x[-1], self.weight("output_norm.weight"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--fixture", default="tests/golden/logits.json")
    ap.add_argument("--greedy", default="tests/golden/greedy.json")
    args = ap.parse_args()
    model = ExactLlama(args.model)
    with open(args.fixture) as f:
        fixture = json.load(f)
    worst = 0.0
    for case in fixture["cases"]:
        logits = model.last_logits(case["ids"])
        top = np.argsort(-logits)[:10]
        case["exact_top"] = [{"id": int(t), "logit": float(logits[t])} for t in top]
        for entry in case["top"]:
            entry["exact_logit"] = float(logits[entry["id"]])
            worst = max(worst, abs(entry["exact_logit"] - entry["logit"]))
    fixture["llama_cpp_max_abs_dev_from_exact"] = worst
    fixture["exact_generator"] = f"numpy {np.__version__} float64 + gguf dequantize"
    with open(args.fixture, "w") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
    print(f"max |llama.cpp - exact| over top-10 logits: {worst:.4f}")

    # Exact greedy continuations of the chat prompts (same EOG rule as make_golden.py).
    with open(args.greedy) as f:
        greedy = json.load(f)
    eog = {2, 0}  # <|im_end|>, <|endoftext|> in SmolLM2
    for case in greedy["cases"]:
        tokens, margins = model.greedy(case["prompt_ids"], len(case["greedy_ids"]), eog)
        case["exact_greedy_ids"] = tokens
        case["exact_top2_margins"] = margins
        same = next((i for i, (a, b) in enumerate(zip(tokens, case["greedy_ids"])) if a != b),
                    min(len(tokens), len(case["greedy_ids"])))
        print(f"exact greedy agrees with llama.cpp for {same} of {len(tokens)} tokens")
    greedy["exact_generator"] = fixture["exact_generator"]
    with open(args.greedy, "w") as f:
        json.dump(greedy, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
