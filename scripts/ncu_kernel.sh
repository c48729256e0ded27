#!/usr/bin/env bash
# One kernel launch under Nsight Compute on the GPU host: where its warps stall, overall and by
# source line. Build with -lineinfo (kernels/CMakeLists.txt does) and pack as for gpu_suite.sh.
#   scripts/ncu_kernel.sh PACK_DIR OUT_DIR NAME KERNEL_REGEX SKIP -- BINARY_ARGS...
# profiles the (SKIP+1)-th launch whose demangled name matches KERNEL_REGEX in `run NAME ARGS`,
# (ncu prints template arguments demangled as `(bool)1`: e.g. 'Int8MmaDecodeKernel<\(bool\)1>'),
# and prints: the launch's duration and issue statistics, the warp stall reasons (share of
# samples), the 25 source lines with the most stall samples, and the samples by barrier segment
# (scripts/ncu_segments.py on OUT_DIR/NAME_K.sass.csv). OUT_DIR/NAME_K.ncu-rep keeps the report
# (open it in the Nsight Compute GUI for the full source view).
set -uo pipefail
[ $# -ge 5 ] || { echo "usage: $0 PACK_DIR OUT_DIR NAME KERNEL_REGEX SKIP [-- ARGS...]" >&2; exit 2; }
pack="$1"; out="$2"; name="$3"; regex="$4"; skip="$5"; shift 5
[ "${1:-}" = "--" ] && shift
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null) || { echo "ncu not found" >&2; exit 2; }
mkdir -p "$out"
tag=$(echo "$regex" | tr -c 'A-Za-z0-9' '_' | cut -c1-40)
rep="$out/${name}_${tag}"
"$ncu" --kernel-name-base demangled -k "regex:$regex" --launch-skip "$skip" --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
  --section LaunchStats --section Occupancy --import-source yes -f -o "$rep" \
  "$pack/run" "$name" "$@" >"$rep.log" 2>&1 || { tail -20 "$rep.log"; exit 1; }
"$ncu" -i "$rep.ncu-rep" --page details --print-units base 2>/dev/null |
  grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Issued Warp|No Eligible|Active Warps|Eligible Warps|Registers|Achieved Occupancy|Warp Cycles Per Issued"
# Stall reasons: the raw per-reason sample counters, as shares.
"$ncu" -i "$rep.ncu-rep" --page raw --csv 2>/dev/null |
  python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) < 3: sys.exit(0)
head, vals = rows[0], rows[-1]
st = {}
for h, v in zip(head, vals):
    if h.startswith("smsp__pcsamp_warps_issue_stalled_") and not h.endswith("_not_issued"):
        try: st[h[len("smsp__pcsamp_warps_issue_stalled_"):]] = float(v.replace(",", ""))
        except ValueError: pass
tot = sum(st.values()) or 1.0
print("stall samples by reason (share):")
for k, v in sorted(st.items(), key=lambda x: -x[1])[:12]:
    print(f"  {k:28s} {100*v/tot:5.1f}%")
'
# Source lines (CUDA) and instructions (SASS) with the most stall samples.
for view in cuda sass; do
  "$ncu" -i "$rep.ncu-rep" --page source --csv --print-source "$view" 2>/dev/null >"$rep.$view.csv"
  python3 - "$rep.$view.csv" "$view" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr = next((i for i, r in enumerate(rows) if any(c.startswith("Warp Stall Sampling (All") for c in r)), None)
if hdr is None:
    print(f"{sys.argv[2]}: no stall samples in the source page"); sys.exit(0)
h = rows[hdr]
ci = next(i for i, c in enumerate(h) if c.startswith("Warp Stall Sampling (All"))
li = next((i for i, c in enumerate(h) if c in ("#", "Line", "Address")), 0)
si = next((i for i, c in enumerate(h) if c == "Source"), len(h) - 1)
data = []
for r in rows[hdr + 1:]:
    try: data.append((float(r[ci].replace(",", "")), r[li], r[si].strip()[:110]))
    except (ValueError, IndexError): pass
tot = sum(d[0] for d in data) or 1.0
print(f"{sys.argv[2]}: top 25 by stall samples (of {int(tot)}):")
for v, l, s in sorted(data, key=lambda x: -x[0])[:25]:
    print(f"  {100*v/tot:5.1f}%  {l:>6}  {s}")
PY
done
# The same samples cut at the kernel's barriers (phases of a pipelined kernel: scripts/ncu_segments.py).
python3 "$(dirname "$0")/ncu_segments.py" "$rep.sass.csv" || true
