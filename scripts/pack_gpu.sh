#!/usr/bin/env bash
# Packs binaries for a GPU host that has the CUDA toolkit but none of the Debian C++ libraries:
# copies each binary and every shared library it links that is not part of the base system
# or of the CUDA driver into one folder, with a launcher that sets LD_LIBRARY_PATH.
#   scripts/pack_gpu.sh OUT_DIR BINARY [BINARY ...]
#   OUT_DIR/run BINARY_NAME [args]   # on the GPU host
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR BINARY [BINARY ...]" >&2; exit 2; }
out="$1"; shift
mkdir -p "$out/lib" "$out/bin"
# Libraries every Linux host, the GPU driver and the CUDA toolkit (with cuBLAS) provide there:
# never carry these.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libnvidia|libcublas|libcudart|libnvrtc|libnvJitLink)'
for bin in "$@"; do
  cp -L "$bin" "$out/bin/"
  ldd "$bin" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if ! [[ "$name" =~ $skip ]]; then cp -Ln "$path" "$out/lib/" 2>/dev/null || true; fi
  done
done
cat > "$out/run" <<'RUN'
#!/usr/bin/env bash
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="$1"; shift
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/bin/$name" "$@"
RUN
chmod +x "$out/run"
du -sh "$out"
