"""PyTorch SDPA fp16 decode on the shapes of bench_decode_cuda (the fp16 baseline).

q [B, 32, 1, 128], K/V [B, 8, ctx, 128] fp16, GQA through enable_gqa. Bytes = K + V read.
cudaEvent timing, 5 warm-ups, median of N calls (host dispatch included), and the same calls
back to back in a replayed CUDA graph; shapes under 240 MB rotate over copies so each call
reads HBM. Usage: python3 sdpa_baseline.py [--quick] [--csv FILE]
"""
import argparse
import math

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--csv")
    args = ap.parse_args()
    batches = [1, 16] if args.quick else [1, 16, 64]
    ctxs = [8192] if args.quick else [8192, 32768, 131072]
    hq, hkv, d = 32, 8, 128
    torch.manual_seed(0)
    print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)
    rows = []
    for b in batches:
        for ctx in ctxs:
            kv_bytes = 2 * b * hkv * ctx * d * 2
            copies = max(1, min(16, math.ceil(240e6 / kv_bytes)))
            q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.float16)
            ks = [torch.randn(b, hkv, ctx, d, device="cuda", dtype=torch.float16) for _ in range(copies)]
            vs = [torch.randn(b, hkv, ctx, d, device="cuda", dtype=torch.float16) for _ in range(copies)]
            times = []
            for i in range(35):
                k, v = ks[i % copies], vs[i % copies]
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                e1.record()
                e1.synchronize()
                if i >= 5:
                    times.append(e0.elapsed_time(e1))
            times.sort()
            ms = times[len(times) // 2]
            tbps = kv_bytes / (ms * 1e-3) / 1e12
            # The same calls back to back in a replayed CUDA graph (as bench_decode_cuda's graph
            # column): no host dispatch between the events.
            n = max(8, 2 * copies)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up outside the capture, as PyTorch asks
                for i in range(3):
                    F.scaled_dot_product_attention(q, ks[i % copies], vs[i % copies], enable_gqa=True)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(n):
                    F.scaled_dot_product_attention(q, ks[i % copies], vs[i % copies], enable_gqa=True)
            gtimes = []
            for i in range(9):
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                g.replay()
                e1.record()
                e1.synchronize()
                if i >= 2:
                    gtimes.append(e0.elapsed_time(e1) / n)
            gtimes.sort()
            gms = gtimes[len(gtimes) // 2]
            gtbps = kv_bytes / (gms * 1e-3) / 1e12
            del g
            rows.append((b, ctx, ms * 1e3, tbps, gms * 1e3, gtbps))
            print(f"sdpa fp16 batch {b:2d} ctx {ctx:6d}: {ms * 1e3:9.1f} us  {tbps:.3f} TB/s;"
                  f" graph {gms * 1e3:9.1f} us  {gtbps:.3f} TB/s", flush=True)
            del ks, vs
            torch.cuda.empty_cache()
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("batch,ctx,us,tbps,graph_us,graph_tbps\n")
            for r in rows:
                f.write("%d,%d,%.2f,%.4f,%.2f,%.4f\n" % r)


if __name__ == "__main__":
    main()
