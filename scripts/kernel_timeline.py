#!/usr/bin/env python3
"""Summarize a kernel trace (bench/decode_gpu/kernel_trace_preload.cc) of replayed CUDA graphs.

For each graph, the replays are split apart (a replay is one launch of every node); per kernel of a
replay, in node order:
  * busy: end - start, as the GPU ran it in place (overlapping launches included);
  * advance: how far this kernel moved the replay's finish line (its end minus the latest end of
    the kernels before it, at least 0). The advances of a replay add up to its span, so they say
    which launches the step's time is spent waiting on.
Kernels are grouped by a short name (demangled by c++filt where it is installed); `--graph N` picks
one graph, else every graph is printed; `--window FIRST COUNT` also lists part of the last replay.

  scripts/kernel_timeline.py trace.csv [--skip 2] [--graph ID] [--window FIRST COUNT]
"""
import argparse
import collections
import csv
import re
import shutil
import statistics
import subprocess


def demangled(names):
    """CUPTI's mangled kernel names -> their demangled form (unchanged without c++filt)."""
    names = sorted(set(names))
    if not names or shutil.which("c++filt") is None:
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return dict(zip(names, out.stdout.splitlines()))


def short_name(name):
    """A demangled kernel name without its namespaces, return type and parameter list."""
    base = re.sub(r"\(anonymous namespace\)::|witcert::|cuda_kv::|cuda_ops::|meter::", "", name)
    if base.endswith(")"):  # drop the parameter list: from the '(' that matches the last ')'
        depth = 0
        for i in range(len(base) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(base[i], 0)
            if depth == 0:
                base = base[:i]
                break
    base = re.sub(r"^void ", "", base)
    return base[:110]


def replays(rows):
    """Splits one graph's kernels (sorted by start) into replays: a node id seen again starts one."""
    out, cur, seen = [], [], set()
    for r in rows:
        if r["node"] in seen:
            out.append(cur)
            cur, seen = [], set()
        cur.append(r)
        seen.add(r["node"])
    if cur:
        out.append(cur)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=2, help="replays of each graph to skip (warm-up)")
    ap.add_argument("--graph", type=int, default=None)
    ap.add_argument("--window", type=int, nargs=2, default=None, metavar=("FIRST", "COUNT"),
                    help="also print kernels FIRST .. FIRST+COUNT-1 of the last replay, start and end in us")
    args = ap.parse_args()

    with open(args.trace, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["graph_id"] != "0"]
    names = demangled(r["name"] for r in rows)
    graphs = collections.defaultdict(list)
    for r in rows:
        graphs[int(r["graph_id"])].append({
            "start": int(r["start_ns"]), "end": int(r["end_ns"]), "node": int(r["graph_node_id"]),
            "grid": int(r["grid"]), "name": short_name(names[r["name"]])})
    for gid in sorted(graphs):
        if args.graph is not None and gid != args.graph:
            continue
        rows = sorted(graphs[gid], key=lambda r: r["start"])
        reps = [sorted(rep, key=lambda r: r["node"]) for rep in replays(rows)]
        reps = [rep for rep in reps if len(rep) == len(reps[0])][args.skip:]
        if not reps:
            continue
        spans, busy, adv, count = [], collections.defaultdict(list), collections.defaultdict(list), {}
        for rep in reps:
            t0 = min(r["start"] for r in rep)
            frontier = t0
            per_b, per_a = collections.defaultdict(float), collections.defaultdict(float)
            for r in rep:
                key = (r["name"], r["grid"])
                per_b[key] += r["end"] - r["start"]
                per_a[key] += max(0, r["end"] - frontier)
                frontier = max(frontier, r["end"])
                count[key] = count.get(key, 0) + 1
            spans.append(frontier - t0)
            for k in per_b:
                busy[k].append(per_b[k])
                adv[k].append(per_a[k])
        n = len(reps)
        print(f"graph {gid}: {n} replays of {len(reps[0])} kernels, span {statistics.mean(spans) / 1e3:.1f} us "
              f"(min {min(spans) / 1e3:.1f})")
        print(f"  {'advance us':>10} {'busy us':>9} {'launches':>8} {'per launch: adv':>15} {'busy':>7}  grid  kernel")
        for k in sorted(adv, key=lambda k: -statistics.mean(adv[k])):
            c = count[k] // n
            a, b = statistics.mean(adv[k]) / 1e3, statistics.mean(busy[k]) / 1e3
            print(f"  {a:10.1f} {b:9.1f} {c:8d} {a / c:15.2f} {b / c:7.2f} {k[1]:5d}  {k[0]}")
        if args.window:
            first, num = args.window
            rep = reps[-1][first:first + num]
            t0 = rep[0]["start"] if rep else 0
            print(f"  last replay, kernels {first}..{first + num - 1} (us from the first one's start):")
            for r in rep:
                print(f"    {(r['start'] - t0) / 1e3:8.2f} {(r['end'] - t0) / 1e3:8.2f} {(r['end'] - r['start']) / 1e3:7.2f}"
                      f" {r['grid']:5d}  {r['name']}")


if __name__ == "__main__":
    main()
