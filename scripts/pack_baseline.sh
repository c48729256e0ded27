#!/usr/bin/env bash
# Builds one benchmark binary at another git revision (the A/B baseline) and packs it beside the
# suite's pack, stripped and compressed, under NAME.xz, for scripts/gpu_ab.sh on the device:
#   scripts/pack_baseline.sh REV TARGET NAME [OUT_DIR]
#   e.g. scripts/pack_baseline.sh main bench/decode_cuda/bench_decode_cuda bench_old
# TARGET is the ninja target path under the build folder; OUT_DIR defaults to build/gpu_pack/old.
# The revision is checked out in a throwaway git worktree and built there (ccache makes a rebuild
# of mostly unchanged sources quick). There (device `run`, carry build/gpu_pack):
#   xz -dc build/gpu_pack/old/bench_old.xz > /tmp/g/dist/bin/bench_old && chmod +x /tmp/g/dist/bin/bench_old
#   scripts/gpu_ab.sh /tmp/g/dist "$OUT/ab" 2 bench_old bench_decode_cuda -- --only fp16
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 REV TARGET NAME [OUT_DIR]" >&2; exit 2; }
rev="$1"; target="$2"; name="$3"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${4:-$root/build/gpu_pack/old}"
tree="$(mktemp -d /tmp/witcert-baseline.XXXXXX)"
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"' EXIT
git -C "$root" worktree add --detach -q "$tree" "$rev"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_BASEDIR="$tree" CCACHE_NOHASHDIR=1
cmake -S "$tree" -B "$tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$tree/build" "$target" >/dev/null
mkdir -p "$out"
cp "$tree/build/$target" "$out/$name"
strip "$out/$name"
xz -T2 -6 -f "$out/$name"
ls -la "$out/$name.xz"
