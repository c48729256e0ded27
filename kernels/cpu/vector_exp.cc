#include "kernels/cpu/vector_exp.h"

#include <cmath>
#include <cstring>
#include <limits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define WITCERT_VECTOR_EXP_AVX2 1
#endif

namespace witcert {
namespace {

// e^r ≈ 1 + r + r²/2! + ... + r⁷/7! on |r| ≤ ln2/2: the Taylor remainder is ≤ 6e-9 there,
// so the fp32 rounding of the Horner steps dominates (see tests/kernels/cpu/vector_exp_test.cc).
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;            // ln 2 split so k·kLn2Hi is exact
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kC2 = 1.0f / 2, kC3 = 1.0f / 6, kC4 = 1.0f / 24, kC5 = 1.0f / 120,
                kC6 = 1.0f / 720, kC7 = 1.0f / 5040;
constexpr float kMaxArg = 88.7228391f, kMinArg = -87.3365479f;

float Bits(int32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

}  // namespace

float ExpF(float x) {
  if (std::isnan(x)) return x;
  if (x > kMaxArg) return std::numeric_limits<float>::infinity();
  if (x < kMinArg) return 0.0f;
  const float k = std::nearbyint(x * kLog2e);
  float r = std::fma(-k, kLn2Hi, x);
  r = std::fma(-k, kLn2Lo, r);
  float p = std::fma(kC7, r, kC6);
  p = std::fma(p, r, kC5);
  p = std::fma(p, r, kC4);
  p = std::fma(p, r, kC3);
  p = std::fma(p, r, kC2);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  // 2^k: k ∈ [−126, 128]; split so each factor is a normal float (k1 = ⌊k/2⌋, as the
  // vector path's arithmetic shift).
  const int32_t ki = static_cast<int32_t>(k);
  const int32_t k1 = ki >> 1, k2 = ki - k1;
  return p * Bits((k1 + 127) << 23) * Bits((k2 + 127) << 23);
}

#ifdef WITCERT_VECTOR_EXP_AVX2
namespace {

inline __m256 ExpF8(__m256 x) {
  const __m256 nan_mask = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(kMaxArg), _CMP_GT_OQ);
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(kMinArg), _CMP_LT_OQ);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kMinArg)), _mm256_set1_ps(kMaxArg));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Hi), xc);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kC7), r, _mm256_set1_ps(kC6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i ki = _mm256_cvtps_epi32(k);
  const __m256i k1 = _mm256_srai_epi32(ki, 1);  // ⌊k/2⌋
  const __m256i k2 = _mm256_sub_epi32(ki, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  const __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
  y = _mm256_blendv_ps(y, _mm256_set1_ps(std::numeric_limits<float>::infinity()), over);
  return _mm256_blendv_ps(y, x, nan_mask);
}

inline double Sum8(__m256 v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  double s = 0.0;
  for (float f : t) s += f;
  return s;
}

template <bool kStore, bool kSum = true>
double ExpShiftedSumImpl(const float* x, int64_t n, float shift, float scale, float* out) {
  const __m256 vshift = _mm256_set1_ps(shift), vscale = _mm256_set1_ps(scale);
  double total = 0.0;
  int64_t i = 0;
  // 64 elements per double add: fp32 partial sums of ≤ 8 terms ≤ 1 each stay exact enough
  // (relative 2^-24 per add) and the double sum carries the vocabulary-sized total.
  for (; i + 64 <= n; i += 64) {
    __m256 acc = _mm256_setzero_ps();
    for (int j = 0; j < 64; j += 8) {
      const __m256 e =
          ExpF8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + j), vshift), vscale));
      if constexpr (kStore) _mm256_storeu_ps(out + i + j, e);
      if constexpr (kSum) acc = _mm256_add_ps(acc, e);
    }
    if constexpr (kSum) total += Sum8(acc);
  }
  for (; i < n; ++i) {
    const float e = ExpF((x[i] - shift) * scale);
    if constexpr (kStore) out[i] = e;
    if constexpr (kSum) total += e;
  }
  return total;
}

}  // namespace

double ExpShiftedSum(const float* x, int64_t n, float shift, float scale, float* out) {
  return ExpShiftedSumImpl<true>(x, n, shift, scale, out);
}
double ExpShiftedSumOnly(const float* x, int64_t n, float shift, float scale) {
  return ExpShiftedSumImpl<false>(x, n, shift, scale, nullptr);
}
void ExpShifted(const float* x, int64_t n, float shift, float scale, float* out) {
  ExpShiftedSumImpl<true, false>(x, n, shift, scale, out);
}

float MaxValue(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);  // NaN in x → m kept
  alignas(32) float t[8];
  _mm256_store_ps(t, m);
  float best = t[0];
  for (int j = 1; j < 8; ++j) best = std::fmax(best, t[j]);
  for (; i < n; ++i) best = std::fmax(best, x[i]);
  return best;
}

#else  // scalar build

double ExpShiftedSum(const float* x, int64_t n, float shift, float scale, float* out) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += (out[i] = ExpF((x[i] - shift) * scale));
  return total;
}
double ExpShiftedSumOnly(const float* x, int64_t n, float shift, float scale) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += ExpF((x[i] - shift) * scale);
  return total;
}
void ExpShifted(const float* x, int64_t n, float shift, float scale, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ExpF((x[i] - shift) * scale);
}
float MaxValue(const float* x, int64_t n) {
  float best = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) best = std::fmax(best, x[i]);
  return best;
}

#endif

}  // namespace witcert
