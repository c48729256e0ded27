#!/usr/bin/env python3
"""Where a kernel's instructions go, from an ncu per-SASS export, split at its barriers.

Make the export on the GPU host (one launch of one kernel):
  ncu --kernel-name-base mangled --kernel-name regex:NAME -c 1 --section SourceCounters \\
      --page source --print-source sass --csv BINARY ARGS > k.csv
Then here:
  scripts/ncu_regions.py k.csv                 # instructions and stall samples per region between BAR.SYNCs
  scripts/ncu_regions.py k.csv --dump A B      # rows A..B executed at least --min times, with counts
  scripts/ncu_regions.py k.csv --paths A B     # rows A..B grouped by execution count (the hot path's length)
Dividing a region's count by (CTAs × warps × stages) gives instructions per warp and stage
(bench/RESULTS.md, sixteenth session: how the pipelined kernel's loader was found).
"""
import argparse
import collections
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        lines = f.readlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    reader = csv.reader(lines[start:])
    header = next(reader)
    col_exec = header.index("Instructions Executed")
    col_samples = header.index("Warp Stall Sampling (All Samples)")
    rows = []
    for row in reader:
        if len(row) <= col_exec:
            continue
        try:
            rows.append((row[1].strip(), int(row[col_exec]), int(row[col_samples])))
        except ValueError:
            continue
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--dump", nargs=2, type=int, metavar=("A", "B"))
    ap.add_argument("--paths", nargs=2, type=int, metavar=("A", "B"))
    ap.add_argument("--min", type=int, default=1, help="--dump: smallest execution count shown")
    args = ap.parse_args()
    rows = load(args.csv)
    if not rows:
        sys.exit("no per-instruction rows in " + args.csv)
    if args.dump:
        a, b = args.dump
        for i in range(a, min(b, len(rows) - 1) + 1):
            text, count, samples = rows[i]
            if count >= args.min:
                print(f"{i:6d} {count:11d} {samples:6d}  {text[:90]}")
        return
    if args.paths:
        a, b = args.paths
        by_count = collections.Counter(rows[i][1] for i in range(a, min(b, len(rows) - 1) + 1) if rows[i][1] > 0)
        for count, n in sorted(by_count.items()):
            print(f"{n:5d} instructions executed {count} times each")
        return
    total = sum(r[1] for r in rows)
    samples = sum(r[2] for r in rows) or 1
    print(f"{args.csv}: {total} instructions executed, {len(rows)} in the listing")
    region, acc, acc_samples, first = 0, 0, 0, 0
    for i, (text, count, s) in enumerate(rows):
        acc += count
        acc_samples += s
        if "BAR.SYNC" in text or i == len(rows) - 1:
            print(f"  region {region:2d} rows [{first:5d}, {i:5d}]: {acc:12d} instructions ({100 * acc / total:5.1f}%), "
                  f"{100 * acc_samples / samples:5.1f}% of stall samples")
            region, acc, acc_samples, first = region + 1, 0, 0, i + 1


if __name__ == "__main__":
    main()
