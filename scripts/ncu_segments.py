#!/usr/bin/env python3
"""A kernel's ncu source page (SASS view, as scripts/ncu_kernel.sh exports it to NAME_K.sass.csv)
cut at its barriers: for each stretch between two BAR.SYNC / BAR.ARV, its share of the warp
stall samples and of the executed warp instructions, its top stall reasons, and the loops that
close in it (backward branches, with how often they were taken).

A pipelined kernel's time between barriers is its slowest warp's chain, so the samples by
segment say which phase (the K pass, the weights step, the value MMAs, ...) the time went to;
compare two reports (meter on / off, old / new) segment by segment.

  scripts/ncu_segments.py REPORT.sass.csv [--min-share 0.01] [--dump START END]

--dump prints the instructions with their executed count and samples between two offsets
(hex, relative to the kernel's first instruction) instead.
"""
import argparse
import csv
import re
import sys


def load(path):
    rows = list(csv.reader(open(path, errors="replace")))
    hdr = next((i for i, r in enumerate(rows) if "Address" in r and "Source" in r), None)
    if hdr is None:
        sys.exit(f"{path}: no Address/Source header (not a SASS source page?)")
    h = rows[hdr]
    ai, si = h.index("Address"), h.index("Source")
    wi = next(i for i, c in enumerate(h) if c.startswith("Warp Stall Sampling (All"))
    ei = h.index("Instructions Executed")
    stall = [i for i, c in enumerate(h) if c.startswith("stall_") and "Not Issued" not in c]
    out = []
    for r in rows[hdr + 1:]:
        try:
            a = int(r[ai], 16)
        except (ValueError, IndexError):
            continue
        num = lambda i: float((r[i] or "0").replace(",", ""))
        out.append((a, r[si].strip(), num(wi), num(ei), {h[i][6:]: num(i) for i in stall}))
    if not out:
        sys.exit(f"{path}: no instructions")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--min-share", type=float, default=0.01)
    ap.add_argument("--dump", nargs=2, metavar=("START", "END"))
    a = ap.parse_args()
    ins = load(a.csv)
    base = ins[0][0]
    if a.dump:
        lo, hi = int(a.dump[0], 16), int(a.dump[1], 16)
        for addr, src, s, e, _ in ins:
            if lo <= addr - base <= hi and e > 0:
                print(f"{addr - base:#07x} {int(e):>9} {int(s):>6}  {src}")
        return
    tot_s = sum(x[2] for x in ins) or 1.0
    tot_e = sum(x[3] for x in ins) or 1.0
    print(f"{int(tot_s)} stall samples, {tot_e / 1e6:.1f} M warp instructions executed")
    segs, cur = [], []
    for x in ins:
        cur.append(x)
        if "BAR.SYNC" in x[1] or "BAR.ARV" in x[1]:
            segs.append(cur)
            cur = []
    if cur:
        segs.append(cur)
    for n, seg in enumerate(segs):
        ss, ee = sum(x[2] for x in seg), sum(x[3] for x in seg)
        if ss / tot_s < a.min_share and ee / tot_e < a.min_share:
            continue
        reasons = {}
        for x in seg:
            for k, v in x[4].items():
                reasons[k] = reasons.get(k, 0.0) + v
        top = sorted(reasons.items(), key=lambda kv: -kv[1])[:4]
        print(f"seg {n:2d} {seg[0][0] - base:#07x}-{seg[-1][0] - base:#07x} {len(seg):5d} instrs  "
              f"samples {100 * ss / tot_s:5.1f}% ({int(ss)})  executed {100 * ee / tot_e:5.1f}% ({ee / 1e6:.1f} M)  "
              + " ".join(f"{k}={100 * v / max(ss, 1):.0f}%" for k, v in top))
        for x in seg:
            m = re.search(r"BRA (?:\S+, )?0x([0-9a-f]+)", x[1])
            if m and int(m.group(1), 16) < x[0] and x[3] > 0:
                print(f"        loop {x[0] - base:#07x} -> {int(m.group(1), 16) - base:#07x}, taken {int(x[3])}")


if __name__ == "__main__":
    main()
