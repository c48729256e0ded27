#!/usr/bin/env python3
"""Old against new from one scripts/gpu_ab.sh call: the decode benchmark's rows of every round
(OLD_r.log / NEW_r.log in a directory or in the call's ab.tgz), per (scheme, batch, context) the
graph times meter off and on of each round, the mean change new / old, and each binary's meter
overhead. Rounds alternate old and new in one call, so the rows compare like with like; a change
inside the rounds' own spread is noise, whatever its sign.

  scripts/ab_summary.py OUT/ab.tgz OLD_NAME NEW_NAME
"""
import io
import os
import sys
import tarfile


def logs(src):
    if os.path.isdir(src):
        return {f: open(os.path.join(src, f), errors="replace").read() for f in os.listdir(src)}
    with tarfile.open(src) as t:
        return {os.path.basename(m.name): t.extractfile(m).read().decode(errors="replace")
                for m in t.getmembers() if m.isfile()}


def rows(text):
    """(scheme, batch, ctx) -> (graph off µs, graph on µs) from the decode table's rows."""
    out, cols = {}, None
    for line in io.StringIO(text):
        f = [c.strip() for c in line.strip().strip("|").split("|")]
        if f and f[0] == "scheme" and "graph off us" in f:
            cols = {name: i for i, name in enumerate(f)}
            continue
        if cols is None or len(f) != len(cols) or not f[1].isdigit():
            continue
        try:
            out[(f[0], int(f[1]), f[2])] = (float(f[cols["graph off us"]]), float(f[cols["graph on us"]]))
        except ValueError:
            pass
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, old, new = sys.argv[1:]
    files = logs(src)
    runs = {}  # name -> [rows of round 1, 2, ...]
    for name in (old, new):
        r = 1
        while f"{name}_{r}.log" in files:
            runs.setdefault(name, []).append(rows(files[f"{name}_{r}.log"]))
            r += 1
        if not runs.get(name):
            sys.exit(f"{src}: no {name}_1.log")
    keys = [k for k in runs[old][0] if all(k in rr for rr in runs[old] + runs[new])]
    print(f"| shape | {old} graph off / on µs | {new} graph off / on µs | on: new/old | overhead {old} → {new} |")
    print("|---|---|---|---|---|")
    for k in keys:
        o = [rr[k] for rr in runs[old]]
        n = [rr[k] for rr in runs[new]]
        mean = lambda xs, i: sum(x[i] for x in xs) / len(xs)
        ratio = mean(n, 1) / mean(o, 1) - 1.0
        ovh = lambda xs: 100.0 * (mean(xs, 1) / mean(xs, 0) - 1.0)
        fmt = lambda xs: ", ".join(f"{a:.1f} / {b:.1f}" for a, b in xs)
        print(f"| {k[0]} {k[1]} × {k[2]} | {fmt(o)} | {fmt(n)} | {100 * ratio:+.1f}% | "
              f"{ovh(o):+.1f}% → {ovh(n):+.1f}% |")


if __name__ == "__main__":
    main()
