#!/usr/bin/env python3
"""Writes dequantization fixtures for kernels/cpu from an independent implementation.

For each format: <name>.bin holds encoded bytes (random bit patterns with finite fp16 scale
fields, so every code path of the layout is exercised) and <name>.f32 holds what python-gguf's
gguf.quants.dequantize makes of them (little-endian fp32). Two more fixtures take real rows
from the default model. Run from the repo root:
    python3 tests/kernels/cpu/make_fixtures.py
"""
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.quants import dequantize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
rng = np.random.default_rng(20240607)


def finite_f16(count):
    """Random finite fp16 bit patterns of moderate magnitude (incl. negatives, subnormals)."""
    v = rng.standard_normal(count).astype(np.float32) * np.float32(0.02)
    v[::7] = np.float32(3e-6)  # an fp16 subnormal
    return v.astype(np.float16).view(np.uint8).reshape(count, 2)


def blocks(block_bytes, n, f16_offsets):
    b = rng.integers(0, 256, size=(n, block_bytes), dtype=np.uint8)
    for off in f16_offsets:
        b[:, off:off + 2] = finite_f16(n)
    return b


def write(name, qtype, raw):
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    ref = dequantize(raw.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
    raw.tofile(os.path.join(OUT, name + ".bin"))
    ref.astype("<f4").tofile(os.path.join(OUT, name + ".f32"))
    print(f"{name}: {raw.size} bytes -> {ref.size} values")


def main():
    os.makedirs(OUT, exist_ok=True)
    write("q4_0", T.Q4_0, blocks(18, 16, [0]))
    write("q4_1", T.Q4_1, blocks(20, 16, [0, 2]))
    write("q8_0", T.Q8_0, blocks(34, 16, [0]))
    write("q4_k", T.Q4_K, blocks(144, 4, [0, 2]))
    write("q6_k", T.Q6_K, blocks(210, 4, [208]))
    # Plain halves: every exponent incl. subnormals and inf; NaN excluded (payload rules vary).
    h = rng.integers(0, 1 << 16, size=512, dtype=np.uint16)
    h = np.where((h & 0x7C00) == 0x7C00, h & 0xFC00, h).astype(np.uint16)
    write("f16", T.F16, h.view(np.uint8))
    b = rng.integers(0, 1 << 16, size=512, dtype=np.uint16)
    b = np.where(((b & 0x7F80) == 0x7F80) & ((b & 0x7F) != 0), b & 0xFF80, b).astype(np.uint16)
    write("bf16", T.BF16, b.view(np.uint8))
    write("q5_k", T.Q5_K, blocks(176, 4, [0, 2]))  # after the others: their bytes stay as they were
    write("q2_k", T.Q2_K, blocks(84, 4, [80, 82]))
    write("q3_k", T.Q3_K, blocks(110, 4, [108]))
    write("q5_0", T.Q5_0, blocks(22, 16, [0]))
    write("q5_1", T.Q5_1, blocks(24, 16, [0, 2]))
    write("iq4_nl", T.IQ4_NL, blocks(18, 16, [0]))
    write("iq4_xs", T.IQ4_XS, blocks(136, 4, [0]))
    if os.path.exists(MODEL):
        reader = GGUFReader(MODEL)
        tensors = {t.name: t for t in reader.tensors}
        for name, tname, qtype in [("model_q4_1", "blk.0.ffn_up.weight", T.Q4_1),
                                   ("model_q8_0", "token_embd.weight", T.Q8_0)]:
            data = np.asarray(tensors[tname].data).reshape(-1).view(np.uint8)
            row_bytes = 576 // 32 * (20 if qtype == T.Q4_1 else 34)
            write(name, qtype, data[7 * row_bytes:8 * row_bytes])  # row 7, 576 values


if __name__ == "__main__":
    main()
