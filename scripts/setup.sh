#!/usr/bin/env bash
# Installs what WitCert builds with (Debian 12 packages), configures and builds.
#
# Idempotent and fast when nothing changed: packages already present are not re-fetched,
# the CMake build tree is reused and ccache keeps object files across clean clones.
#   scripts/setup.sh            # deps + configure + build (Release) into build/
#   WITCERT_BUILD_DIR=out scripts/setup.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${WITCERT_BUILD_DIR:-$root/build}"

packages=(
  build-essential cmake ninja-build pkg-config ccache git python3 python3-pip python3-venv
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libspdlog-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev libpcre2-dev prometheus curl unzip
  clang libclang-rt-14-dev  # the libFuzzer targets scripts/test.sh builds and runs
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="$root"   # hits across clean clones in other folders
export CCACHE_NOHASHDIR=1
ccache --max-size=5G >/dev/null 2>&1 || true

if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${WITCERT_CMAKE_ARGS:-}
fi
jobs="${WITCERT_JOBS:-$(nproc)}"
cmake --build "$build_dir" -j "$jobs"
echo "built: $build_dir/server/witcert"
