#!/usr/bin/env python3
"""Single-stream CPU speed of WitCert vs llama.cpp (llama-cpp-python), same model, same
threads, same prompt length and decode length, in one run; prints a Markdown table row set.

    pip install llama-cpp-python
    python3 bench/e2e_cpu/compare_llama_cpp.py --threads 2 [--prompt 128] [--decode 128]
"""
import argparse
import json
import subprocess
import time

import numpy as np
from llama_cpp import Llama, __version__ as llama_cpp_version


def llama_cpp_run(model, threads, prompt_tokens, decode_tokens, repeats):
    llm = Llama(model_path=model, n_ctx=2048, n_threads=threads, n_threads_batch=threads,
                n_batch=512, verbose=False)
    seed = llm.tokenize(b"The quick brown fox jumps over the lazy dog. ", add_bos=False)
    prompt = [seed[i % len(seed)] for i in range(prompt_tokens)]
    best_prefill, best_decode = 0.0, 0.0
    for _ in range(repeats):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t2 = time.perf_counter()
        for _ in range(decode_tokens - 1):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t3 = time.perf_counter()
        best_prefill = max(best_prefill, prompt_tokens / (t1 - t0))
        best_decode = max(best_decode, (decode_tokens - 1) / (t3 - t2))
    return best_prefill, best_decode


def witcert_run(binary, model, threads, prompt_tokens, decode_tokens, repeats, kv, gate):
    best_prefill, best_decode = 0.0, 0.0
    for _ in range(repeats):
        out = subprocess.run([binary, model, str(prompt_tokens), str(decode_tokens),
                              str(threads), kv, gate], check=True, capture_output=True,
                             text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        best_prefill = max(best_prefill, r["prefill_tok_s"])
        best_decode = max(best_decode, r["decode_tok_s"])
    return best_prefill, best_decode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--binary", default="build/bench/e2e_cpu/bench_cpu_generate")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = [("llama.cpp " + llama_cpp_version + " (f16 KV)",
             llama_cpp_run(args.model, args.threads, args.prompt, args.decode, args.repeats))]
    for kv, gate in (("fp16", "off"), ("fp16", "observe"), ("int8-rtn", "observe")):
        rows.append((f"witcert {kv}, gate {gate}",
                     witcert_run(args.binary, args.model, args.threads, args.prompt,
                                 args.decode, args.repeats, kv, gate)))
    base_prefill, base_decode = rows[0][1]
    print(f"| engine | prefill tok/s ({args.prompt} tokens) | decode tok/s ({args.decode} tokens) "
          f"| prefill vs llama.cpp | decode vs llama.cpp |")
    print("| --- | --- | --- | --- | --- |")
    for name, (p, d) in rows:
        print(f"| {name} | {p:.1f} | {d:.1f} | {p / base_prefill:.2f}× | {d / base_decode:.2f}× |")


if __name__ == "__main__":
    main()
