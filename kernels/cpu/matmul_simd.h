// Small AVX2 helpers shared by the matmul dot kernels, and which ISA variants are built.
#pragma once

#if defined(__AVX2__) && defined(__FMA__)
#define WITCERT_MATMUL_AVX2 1
#include <immintrin.h>

namespace witcert::matmul_internal {

// Sum of the 8 lanes, in a fixed order (so results are reproducible).
inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Σ over pairs of u8·i8 products widened to 8 int32 lanes. Callers keep |u·i·2| < 2^15.
inline __m256i DotU8I8(__m256i u, __m256i i) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, i), _mm256_set1_epi16(1));
}

}  // namespace witcert::matmul_internal

// The VNNI variants are compiled with `#pragma GCC target` regions (GCC >= 11 knows
// avxvnni); other compilers get the AVX2 kernels only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define WITCERT_MATMUL_AVXVNNI 1
#define WITCERT_MATMUL_AVX512 1
#endif
#endif
