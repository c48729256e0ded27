// Small AVX2 helpers shared by the CPU dot kernels (matmul, attention), and which ISA variants
// are built.
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

// Max of the 8 lanes (exact in any order; a NaN lane may or may not win, so callers keep
// NaN out of the lanes).
inline float HMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// [HSum-like lane sums of a, b, c, d]: for each vector ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)),
// four at once by hadd.
inline __m128 LaneSums4(__m256 a, __m256 b, __m256 c, __m256 d) {
  // hadd(hadd(a, b), hadd(c, d)) = [sums of lanes 0-3 of a, b, c, d | of lanes 4-7].
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
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
