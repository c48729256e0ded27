#!/usr/bin/env bash
# A/B of two builds of one benchmark in ONE device call, alternated, so both see the same
# machine state (bench/RESULTS.md compares only runs made this way).
#
# Here: scripts/pack_baseline.sh REV TARGET NAME builds the baseline at another revision and packs
# it beside the suite's pack; or pack both binaries under different names (pack_gpu.sh copies by
# file name), e.g.
#   cp build-old/bench/decode_cuda/bench_decode_cuda /tmp/ab/bench_old
#   cp build/bench/decode_cuda/bench_decode_cuda /tmp/ab/bench_new
#   scripts/pack_gpu.sh build/dist /tmp/ab/bench_old /tmp/ab/bench_new; strip build/dist/bin/*
#   mkdir -p build/gpu_pack; (cd build && tar -cf - dist | xz -9 -T2 > gpu_pack/dist.tar.xz)
# There (device `run`, carry build/gpu_pack):
#   mkdir -p /tmp/g && tar -xJf build/gpu_pack/dist.tar.xz -C /tmp/g
#   scripts/gpu_ab.sh /tmp/g/dist "$OUT" 2 bench_old bench_new -- --only int8-rtn --batch 16
# Runs old, new, old, new, … (ROUNDS pairs) with the same arguments, prints each run's
# markdown rows ("| …") under a "== NAME ROUND" header and then, for the decode benchmark, a
# summary per shape (scripts/ab_summary.py), and leaves every log in one archive, OUT/ab.tgz
# (a device call brings back at most 8 files).
set -uo pipefail
[ $# -ge 5 ] || { echo "usage: $0 PACK_DIR OUT_DIR ROUNDS OLD_NAME NEW_NAME [-- ARGS...]" >&2; exit 2; }
pack="$1"; out="$2"; rounds="$3"; old="$4"; new="$5"; shift 5
[ "${1:-}" = "--" ] && shift
for b in "$old" "$new"; do
  [ -x "$pack/bin/$b" ] || { echo "$0: $pack/bin/$b is not an executable" >&2; exit 2; }
done
logs="$(mktemp -d)"
date -u >"$logs/date.txt"
status=0
for ((r = 1; r <= rounds; ++r)); do
  for b in "$old" "$new"; do
    "$pack/run" "$b" "$@" >"$logs/${b}_$r.log" 2>&1 || { echo "$b round $r: exit $?"; status=1; }
  done
done
for ((r = 1; r <= rounds; ++r)); do
  for b in "$old" "$new"; do
    echo "== $b $r"
    grep -E '^\|' "$logs/${b}_$r.log" | grep -vE '^\|[- |]*\|$'
  done
done
mkdir -p "$out"
tar -czf "$out/ab.tgz" -C "$logs" .
rm -rf "$logs"
echo "== summary"
python3 "$(dirname "$0")/ab_summary.py" "$out/ab.tgz" "$old" "$new" || true
exit "$status"
