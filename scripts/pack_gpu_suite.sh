#!/usr/bin/env bash
# Builds and packs everything scripts/gpu_suite.sh runs (every GPU kernel test, the CUDA backend
# test, the decode benchmark) into one compressed file that a device call can carry (< 64 MiB):
#   scripts/pack_gpu_suite.sh BUILD_DIR OUT_FILE [EXTRA_BINARY ...]
# then on the GPU host (device `run`, carry OUT_FILE's folder):
#   mkdir -p /tmp/g && xz -dc OUT_FILE | tar -xf - -C /tmp/g && scripts/gpu_suite.sh /tmp/g/dist "$OUT"
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR OUT_FILE [EXTRA_BINARY ...]" >&2; exit 2; }
build="$1"; out="$2"; shift 2
kernel_tests=(kernels_cuda_write_path_test kernels_cuda_metered_decode_test kernels_cuda_gate_repair_test
              kernels_cuda_metered_prefill_test kernels_cuda_mma_rounding_model_test
              kernels_cuda_tier_a_digits_test kernels_cuda_rope_split_write_test)
ninja -C "$build" "${kernel_tests[@]}" kernels_cuda_ops_test engine_cuda_backend_test bench_decode_cuda
bins=()
for t in "${kernel_tests[@]}"; do bins+=("$build/tests/kernels/cuda/$t"); done
# The forward pass's ops (RMSNorm, RoPE with scaling, the q/k norm, sampling, the GEMVs, prefill).
bins+=("$build/tests/kernels/cuda_ops/kernels_cuda_ops_test")
bins+=("$build/tests/engine/cuda_backend/engine_cuda_backend_test" "$build/bench/decode_cuda/bench_decode_cuda" "$@")
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$(dirname "$0")/pack_gpu.sh" "$tmp/dist" "${bins[@]}" >/dev/null
strip "$tmp/dist/bin/"*
mkdir -p "$(dirname "$out")"
(cd "$tmp" && tar -cf - dist | xz -T2 --lzma2=preset=6,dict=256MiB) >"$out"
ls -la "$out"
