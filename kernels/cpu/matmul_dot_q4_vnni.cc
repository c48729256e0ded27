// AVX-VNNI (256-bit vpdpbusd) build of the 32-element format dots.
//
// The kernel body is matmul_dot_q4_tile256.h, included inside a `#pragma GCC target`
// region so only this file's private copy uses the newer instructions; the library's
// baseline stays AVX2. vpdpbusd adds the four u8·i8 products of each int32 lane in one
// instruction where AVX2 needs maddubs + madd; the lane sums are the same exact integers,
// so the results are bit-identical to the AVX2 kernel's.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

#ifdef WITCERT_MATMUL_AVXVNNI
#pragma GCC push_options
#pragma GCC target("avxvnni")
#include "kernels/cpu/matmul_dot_q4_tile256.h"

namespace witcert::matmul_internal {
namespace {

struct VnniIntDot {
  static __m256i Lanes(__m256i u, __m256i i) {
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, i);
  }
};
template <int NX>
struct Q4_0V : DotTile256<Fmt::kQ4_0, VnniIntDot, NX> {};
template <int NX>
struct Q4_1V : DotTile256<Fmt::kQ4_1, VnniIntDot, NX> {};
template <int NX>
struct Q8_0V : DotTile256<Fmt::kQ8_0, VnniIntDot, NX> {};

}  // namespace

void DotQ4_0Vnni(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q4_0V>(w, x, s, nx, c, o);
}
void DotQ4_1Vnni(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q4_1V>(w, x, s, nx, c, o);
}
void DotQ8_0Vnni(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q8_0V>(w, x, s, nx, c, o);
}

}  // namespace witcert::matmul_internal
#pragma GCC pop_options
#else
namespace witcert::matmul_internal {
// Not built: never selected (CpuKernelAvailable is false); defined so the table links.
void DotQ4_0Vnni(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ4_0(w, x, s, nx, c, o);
}
void DotQ4_1Vnni(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ4_1(w, x, s, nx, c, o);
}
void DotQ8_0Vnni(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ8_0(w, x, s, nx, c, o);
}
}  // namespace witcert::matmul_internal
#endif
