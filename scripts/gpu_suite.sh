#!/usr/bin/env bash
# The whole GPU suite in ONE device call: kernel tests, compute-sanitizer memcheck and
# racecheck on the small cases, the decode benchmark and the PyTorch SDPA baseline.
# Build and pack here first (scripts/pack_gpu_suite.sh BUILD_DIR OUT_FILE: every GPU kernel test,
# the CUDA backend test and the decode benchmark, stripped and compressed under the 64 MiB a device
# call carries), then on the GPU host (device `run`, carry OUT_FILE's folder):
#   mkdir -p /tmp/g && xz -dc OUT_FILE | tar -xf - -C /tmp/g && scripts/gpu_suite.sh /tmp/g/dist "$OUT"
#   [--quick] [--no-bench]
# Tests beyond write / decode / repair run when the pack has them (older packs still work).
# Logs land in OUT_DIR (resources.txt: registers/stack/shared memory of every decode kernel);
# the last lines printed are a summary.
set -uo pipefail
pack="${1:?pack dir}"; out="${2:?out dir}"; shift 2
quick=""; bench=1
for a in "$@"; do
  case "$a" in --quick) quick="--quick" ;; --no-bench) bench=0 ;; esac
done
mkdir -p "$out"
summary=()
step() {  # step NAME LOGFILE CMD...
  local name="$1" log="$2"; shift 2
  local t0=$SECONDS
  "$@" >"$out/$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-28s rc=%-3d %4ds  %s' "$name" "$rc" $((SECONDS - t0)) "$(grep -E '^\[  (PASSED|FAILED) |ERROR SUMMARY|tests? ran' "$out/$log" | tr '\n' ' ' | cut -c1-150)")")
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
date -u >>"$out/gpu.txt"
run="$pack/run"
# Registers / stack / shared memory of every decode kernel (cuobjdump is in the toolkit there).
objdump=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null)
[ -n "$objdump" ] && "$objdump" --dump-resource-usage "$pack/bin/bench_decode_cuda" 2>&1 |
  grep -A1 -E "Function .*(Pipelined|MeteredDecode|Int8Mma)" | grep -E "Function|REG" | paste - - |
  sed -E 's/.*Function ([^ :]*).*(REG:[0-9]+ STACK:[0-9]+ SHARED:[0-9]+ LOCAL:[0-9]+).*/\2 \1/' >"$out/resources.txt"
step write_path_test tests.log "$run" kernels_cuda_write_path_test
step metered_decode_test tests_decode.log "$run" kernels_cuda_metered_decode_test
repair=0; [ -x "$pack/bin/kernels_cuda_gate_repair_test" ] && repair=1
[ "$repair" = 1 ] && step gate_repair_test tests_repair.log "$run" kernels_cuda_gate_repair_test
# The other GPU tests, where packed: chunked prefill, the tensor-core rounding model (its margin is
# printed in the summary), Tier A's digits, the RoPE-split write, the forward pass's ops, the CUDA
# backend.
for t in kernels_cuda_metered_prefill_test kernels_cuda_mma_rounding_model_test kernels_cuda_tier_a_digits_test \
         kernels_cuda_rope_split_write_test kernels_cuda_ops_test engine_cuda_backend_test; do
  [ -x "$pack/bin/$t" ] && step "${t#kernels_cuda_}" "tests_$t.log" "$run" "$t"
done
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$san" ]; then
  filt='--gtest_filter=*Small*'
  step memcheck_write sanitizer.log env LD_LIBRARY_PATH="$pack/lib" "$san" --tool memcheck --error-exitcode 3 "$pack/bin/kernels_cuda_write_path_test" "$filt:*Outlier*"
  step memcheck_decode sanitizer_md.log env LD_LIBRARY_PATH="$pack/lib" "$san" --tool memcheck --error-exitcode 3 "$pack/bin/kernels_cuda_metered_decode_test" "$filt:*Promoted*:*Kivi2*:*Outlier*:*WitnessBandCounts*"
  step racecheck_decode sanitizer_rc.log env LD_LIBRARY_PATH="$pack/lib" "$san" --tool racecheck --error-exitcode 3 "$pack/bin/kernels_cuda_metered_decode_test" "$filt"
  step racecheck_write sanitizer_rw.log env LD_LIBRARY_PATH="$pack/lib" "$san" --tool racecheck --error-exitcode 3 "$pack/bin/kernels_cuda_write_path_test" "$filt:*Outlier*"
  if [ "$repair" = 1 ]; then
    step memcheck_repair sanitizer_mr.log env LD_LIBRARY_PATH="$pack/lib" "$san" --tool memcheck --error-exitcode 3 "$pack/bin/kernels_cuda_gate_repair_test"
    step racecheck_repair sanitizer_rr.log env LD_LIBRARY_PATH="$pack/lib" "$san" --tool racecheck --error-exitcode 3 "$pack/bin/kernels_cuda_gate_repair_test"
  fi
  # The chunked-prefill kernels (int8-rtn and the float keys).
  [ -x "$pack/bin/kernels_cuda_metered_prefill_test" ] && {
    step memcheck_prefill sanitizer_mp.log env LD_LIBRARY_PATH="$pack/lib" "$san" --tool memcheck --error-exitcode 3 "$pack/bin/kernels_cuda_metered_prefill_test" "$filt"
    step racecheck_prefill sanitizer_rp.log env LD_LIBRARY_PATH="$pack/lib" "$san" --tool racecheck --error-exitcode 3 "$pack/bin/kernels_cuda_metered_prefill_test" "$filt"
  }
  # The CUDA backend's staged blocks and the gate's exact table (kivi2, repair) under memcheck.
  [ -x "$pack/bin/engine_cuda_backend_test" ] &&
    step memcheck_backend sanitizer_mb.log env LD_LIBRARY_PATH="$pack/lib" "$san" --tool memcheck --error-exitcode 3 "$pack/bin/engine_cuda_backend_test" '--gtest_filter=*Kivi2*:*GateRepair*:*Graph*:*Outlier*'
  cat "$out/sanitizer_md.log" "$out/sanitizer_rc.log" "$out/sanitizer_rw.log" "$out"/sanitizer_m[rbp].log "$out"/sanitizer_r[rp].log >>"$out/sanitizer.log" 2>/dev/null
  rm -f "$out/sanitizer_md.log" "$out/sanitizer_rc.log" "$out/sanitizer_rw.log" "$out/sanitizer_mr.log" "$out/sanitizer_mb.log" "$out/sanitizer_rr.log"
else
  summary+=("compute-sanitizer not found")
fi
cat "$out/tests_decode.log" "$out"/tests_repai[r].log "$out"/tests_*_test.log >>"$out/tests.log" 2>/dev/null
rm -f "$out/tests_decode.log" "$out/tests_repair.log" "$out"/tests_*_test.log
if [ "$bench" = 1 ]; then
  step bench_decode_cuda bench.log "$run" bench_decode_cuda $quick --csv "$out/bench.csv"
  step sdpa_baseline sdpa.log env PYTHONUNBUFFERED=1 python3 "$(dirname "$0")/../bench/decode_cuda/sdpa_baseline.py" $quick --csv "$out/sdpa.csv"
fi
echo "==== failures (first 40) ===="
grep -hE "Failure|FAILED|UNSOUND|mismatch|differ|ERROR SUMMARY: [1-9]|error" "$out"/tests.log "$out"/sanitizer.log 2>/dev/null | head -40
echo "==== bench tables ===="
[ -f "$out/bench.log" ] && grep -E "^\||copy|device" "$out/bench.log"
[ -f "$out/sdpa.log" ] && grep -E "sdpa" "$out/sdpa.log"
grep -h "margin" "$out/tests.log" 2>/dev/null
echo "==== summary ===="
printf '%s\n' "${summary[@]}"
