// The x8 grouped dot (packed_x8_group.h) on AVX512-VNNI's 256-bit EVEX vpdpbusd, for CPUs
// that have AVX512-VNNI but not AVX-VNNI (packed_x8_vnni.cc explains the kernel).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

// Everything the shared header includes, first: nothing outside it may be compiled under the
// target pragma below (an inline function built for a newer ISA could be the copy the
// linker keeps).
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/packed_x8.h"

#ifdef WITCERT_MATMUL_AVX512
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
// The same false -Wuninitialized reports as in matmul_dot_q4_avx512.cc.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/packed_x8_group.h"

namespace witcert::matmul_internal {
namespace {

struct Avx512VnniDp {
  static __m256i Acc(__m256i acc, __m256i u, __m256i i) { return _mm256_dpbusd_epi32(acc, u, i); }
};

}  // namespace

PackedDotFn DotPackedX8Avx512Vnni() { return DotPackedX8With<DpbusdPackedOps<Avx512VnniDp>>; }

}  // namespace witcert::matmul_internal
#pragma GCC diagnostic pop
#pragma GCC pop_options
#else
namespace witcert::matmul_internal {
PackedDotFn DotPackedX8Avx512Vnni() { return nullptr; }
}  // namespace witcert::matmul_internal
#endif
