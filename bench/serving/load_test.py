#!/usr/bin/env python3
"""Serving load on a real `witcert serve`: concurrent streaming chat clients (the official
`openai` client), aggregate tokens/s, TTFT and inter-token latency; the batching gain at 16
streams vs 1; 64 concurrent clients must complete without errors; the HTTP + JSON + SSE
overhead per token measured against the engine alone (bench_cpu_generate) in the same run.

    python3 bench/serving/load_test.py [--binary build/server/witcert] [--tokens 64]
Prints a Markdown table; `--repeats N` alternates N runs of the level list and reports medians,
plus each level's gain paired within a repeat (robust to a machine whose speed drifts).
`--client httpx` streams with plain httpx (SSE parsed here) for hosts without the openai package
(the GPU machine); `--serve-arg` passes flags to `witcert serve` (e.g. `--serve-arg=--device
--serve-arg=cuda`); `--no-overhead` skips the engine-alone comparison; `--prompt-words N` appends
N filler words (about 4 tokens each) to every prompt, unique per request, for TTFT at long prompts.
"""
import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx

try:
    from openai import AsyncOpenAI
except ImportError:  # --client httpx only
    AsyncOpenAI = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MODEL = "default"
PROMPT_WORDS = 0  # --prompt-words: filler words appended to each client's prompt
_serial = 0       # requests sent so far (long prompts are unique per request)


def prompt_text(idx, words, serial):
    """Client `idx`'s prompt: its own opening line, then (words > 0) `words` filler words that
    start with the request's serial number, so no request shares a prefix with an earlier one
    past the chat template and the prefix cache never shortens a long prompt's prefill."""
    text = f"Tell me a long story about lighthouse {idx}."
    if words > 0:
        text += f" Request {serial}. Notes: " + " ".join(f"beacon{idx}-{i % 97}" for i in range(words))
    return text


def chat_request(tokens, idx):
    """The streaming chat request client `idx` sends (its own prompt and seed)."""
    global _serial
    _serial += 1
    return {"model": MODEL, "stream": True, "max_tokens": tokens, "temperature": 0.7, "seed": idx,
            "messages": [{"role": "user", "content": prompt_text(idx, PROMPT_WORDS, _serial)}]}


async def one_stream(client, tokens, idx):
    t0 = time.perf_counter()
    stamps = []
    stream = await client.chat.completions.create(**chat_request(tokens, idx),
                                                  extra_body={"ignore_eos": True})
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            stamps.append(time.perf_counter())
    return t0, stamps


async def one_stream_httpx(client, base_url, tokens, idx):
    """The same request as one_stream, streamed with httpx; one stamp per content delta."""
    t0 = time.perf_counter()
    stamps = []
    body = dict(chat_request(tokens, idx), ignore_eos=True)
    async with client.stream("POST", base_url + "/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("delta", {}).get("content"):
                stamps.append(time.perf_counter())
    return t0, stamps


CLIENT = "openai"


def DescribeError(e):
    """The exception and its causes (the openai client wraps the transport error)."""
    parts = []
    while e is not None and len(parts) < 4:
        parts.append(repr(e))
        e = e.__cause__ or e.__context__
    return " <- ".join(parts)


async def run_level(base_url, concurrency, tokens):
    limits = httpx.Limits(max_connections=256)
    cpu0 = os.times()
    t0 = time.perf_counter()
    if CLIENT == "httpx":
        async with httpx.AsyncClient(timeout=600, limits=limits) as client:
            results = await asyncio.gather(
                *(one_stream_httpx(client, base_url, tokens, i) for i in range(concurrency)),
                return_exceptions=True)
    else:
        async with AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0,
                               http_client=httpx.AsyncClient(timeout=600, limits=limits)) as client:
            results = await asyncio.gather(*(one_stream(client, tokens, i) for i in range(concurrency)),
                                           return_exceptions=True)
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    client_cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    errors = [r for r in results if isinstance(r, Exception)]
    ok = [r for r in results if not isinstance(r, Exception)]
    chunks = sum(len(s) for _, s in ok)
    ttft = [s[0] - t for t, s in ok if s]
    itl = [b - a for _, s in ok for a, b in zip(s, s[1:])]
    return {"concurrency": concurrency, "errors": len(errors), "wall_s": wall,
            "chunks": chunks, "tok_s": chunks / wall,
            "ttft_p50": statistics.median(ttft) if ttft else float("nan"),
            "itl_p50": statistics.median(itl) if itl else float("nan"),
            "client_cores": client_cpu / wall,
            "first_error": DescribeError(errors[0]) if errors else ""}


GATE_COUNTERS = ("witcert_cert_cells_total", "witcert_cert_cells_certified_total",
                 "witcert_cert_cells_uncertified_total", "witcert_cert_pageins_total",
                 "witcert_kv_promotions_total", "witcert_backing_store_refused_blocks_total")


def gate_totals(base):
    """The gate's counters from /metrics after the run (summed over label sets)."""
    totals = dict.fromkeys(GATE_COUNTERS, 0.0)
    for line in httpx.get(base + "/metrics", timeout=10).text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in totals and not line.startswith("#"):
            totals[name] += float(line.rsplit(" ", 1)[1])
    return totals


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "build/server/witcert"))
    ap.add_argument("--bench", default=os.path.join(ROOT, "build/bench/e2e_cpu/bench_cpu_generate"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=0,
                    help="filler words appended to each prompt (long-prompt TTFT; ~4 tokens a word)")
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--client", choices=["openai", "httpx"], default="openai")
    ap.add_argument("--serve-arg", action="append", default=[])
    ap.add_argument("--no-overhead", action="store_true")
    ap.add_argument("--server-log", default="", help="keep the server's output in this file")
    ap.add_argument("--client-nice", type=int, default=0,
                    help="lower this client's CPU priority by N once the server is up (the server "
                         "keeps its own): on a small host the load generator then takes the cycles "
                         "the server leaves, as a load generator on another machine would")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run the whole level list this many times, alternating; the table then "
                         "shows each level's median run and the gain of medians (plus min-max)")
    args = ap.parse_args()
    global CLIENT, PROMPT_WORDS
    PROMPT_WORDS = args.prompt_words
    CLIENT = args.client
    port = free_port()
    log_path = args.server_log or f"/tmp/witcert-load-{port}.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([args.binary, "serve", "--model", args.model, "--port", str(port),
                             "--grpc-port", "0", "--log-level", "warn"] + args.serve_arg,
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(1800):  # a synthetic 8B model takes ~10 s to build and upload
        if proc.poll() is not None:
            raise SystemExit(f"witcert serve exited with {proc.returncode}:\n{open(log_path).read()}")
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    global MODEL
    MODEL = httpx.get(base + "/v1/models", timeout=5).json()["data"][0]["id"]
    if args.client_nice:
        os.nice(args.client_nice)
    rows = []
    http_itl, engine_step = [], []
    try:
        # Warm-up (not timed): the first request pays page faults on the mapped weights and
        # the allocator's first touches; without it the 1-stream level looks slower than it is.
        asyncio.run(run_level(base + "/v1", 2, 16))
        levels = [int(x) for x in args.levels.split(",")]
        runs = {level: [] for level in levels}
        for _ in range(max(1, args.repeats)):
            for level in levels:
                runs[level].append(asyncio.run(run_level(base + "/v1", level, args.tokens)))
                r = runs[level][-1]
                print(f"[{level} streams: {r['tok_s']:.1f} tok/s, {r['errors']} errors, "
                      f"client CPU {r['client_cores']:.2f} cores]",
                      file=sys.stderr, flush=True)
        for level in levels:  # the median run by tok/s; errors summed over all runs
            ordered = sorted(runs[level], key=lambda r: r["tok_s"])
            median = dict(ordered[len(ordered) // 2])
            median["errors"] = sum(r["errors"] for r in runs[level])
            median["first_error"] = next((r["first_error"] for r in runs[level] if r["errors"]), "")
            median["spread"] = (ordered[0]["tok_s"], ordered[-1]["tok_s"])
            rows.append(median)
        # Overhead: single-stream ITL over HTTP vs the engine's own step time, alternated three
        # times (best of each) so both see the same machine state and context lengths.
        for _ in range(0 if args.no_overhead else 3):
            http_itl.append(asyncio.run(run_level(base + "/v1", 1, args.tokens))["itl_p50"])
            engine = json.loads(subprocess.run(
                [args.bench, args.model, "45", str(args.tokens), "0"], check=True,
                capture_output=True, text=True).stdout)
            engine_step.append(1.0 / engine["decode_tok_s"])
        gate = gate_totals(base)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print("| concurrent streams | errors | aggregate tok/s | vs 1 stream | TTFT p50 (ms) | "
          "ITL p50 (ms) | client CPU (cores) |\n| --- | --- | --- | --- | --- | --- | --- |")
    single = rows[0]["tok_s"] or float("nan")
    for r in rows:
        spread = f" ({r['spread'][0]:.1f}–{r['spread'][1]:.1f})" if args.repeats > 1 else ""
        print(f"| {r['concurrency']} | {r['errors']} | {r['tok_s']:.1f}{spread} | {r['tok_s'] / single:.2f}× "
              f"| {1e3 * r['ttft_p50']:.0f} | {1e3 * r['itl_p50']:.1f} | {r['client_cores']:.2f} |")
        if r["errors"]:
            print(f"first error: {r['first_error']}")
    if args.repeats > 1 and len(levels) > 1:
        # Paired gains: each repeat's level against that same repeat's first level, so a
        # machine whose speed drifts between repeats (a shared VM) does not skew the ratio.
        for level in levels[1:]:
            paired = sorted(r["tok_s"] / (b["tok_s"] or float("nan"))
                            for r, b in zip(runs[level], runs[levels[0]]))
            print(f"paired gain {level} vs {levels[0]} streams, per repeat: "
                  + ", ".join(f"{g:.2f}×" for g in paired)
                  + f" (median {paired[len(paired) // 2]:.2f}×)")
    cells = gate["witcert_cert_cells_total"]
    if cells:
        print(f"\ngate over the whole run (warm-up included): {cells:.0f} cells, "
              f"{100 * gate['witcert_cert_cells_certified_total'] / cells:.2f}% certified before the gate, "
              f"{gate['witcert_cert_cells_uncertified_total']:.0f} uncertified after the gate, "
              f"{gate['witcert_cert_pageins_total']:.0f} page-ins "
              f"({gate['witcert_kv_promotions_total']:.0f} promotions), "
              f"{gate['witcert_backing_store_refused_blocks_total']:.0f} blocks refused by the store")
    if any(r["errors"] for r in rows):
        print(f"server log ({log_path}), last lines:\n" + "".join(open(log_path).readlines()[-15:]))
    if args.no_overhead:
        return
    itl, step = min(http_itl), min(engine_step)
    print(f"\nsingle stream, best of 3 alternated runs: engine alone {1e3 * step:.2f} ms/step; "
          f"over HTTP+SSE ITL p50 {1e3 * itl:.2f} ms → server overhead "
          f"{100 * (itl - step) / step:+.1f}% of step time")


if __name__ == "__main__":
    main()
