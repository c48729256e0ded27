// Quantization of fp32 activation rows to the 8-bit blocks the integer dot kernels consume.
//
// Symmetric rounding to [-127, 127] (not GGML's [-128, 127] for Q8_K) keeps one error bound
// for every format: |x - d·q| <= d/2 with d = max|x|/127, which the tests turn into a
// per-element tolerance. Runs once per activation row per Matmul call; the 32-element blocks
// have an AVX2 path (a few % of a batched decode step in the scalar version) that returns
// the same bits: max and rounding are exact, nearbyint and _mm256_round_ps both round to
// nearest even, and a NaN element becomes code 0 in both.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

namespace witcert::matmul_internal {
namespace {

// Quantizes `len` values with scale d = max|x|/127 into q; returns d.
inline float QuantizeSpan(const float* x, int len, int8_t* q) {
  float amax = 0.0f;
  // fmax's result (a NaN element is skipped) as a compare-and-select the compiler vectorizes;
  // std::fmax itself stayed a libm call per element (2% of a 16-stream serving profile).
  for (int i = 0; i < len; ++i) {
    const float a = std::fabs(x[i]);
    amax = a > amax ? a : amax;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < len; ++i) {
    float v = std::nearbyint(x[i] * id);
    v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
    q[i] = v == v ? static_cast<int8_t>(v) : 0;
  }
  return d;
}

#ifdef WITCERT_MATMUL_AVX2
// QuantizeSpan for len == 32 plus the codes' sum.
inline float QuantizeBlock32(const float* x, int8_t* q, int* sum) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(_mm256_and_ps(v[k], abs_mask), amax);  // a NaN |x| keeps amax
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float d = _mm_cvtss_f32(m4) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  __m256i iv[4];
  __m256i isum = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    __m256 r = _mm256_round_ps(_mm256_mul_ps(v[k], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));  // NaN → 0 (before max/min eat it)
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    iv[k] = _mm256_cvtps_epi32(r);
    isum = _mm256_add_epi32(isum, iv[k]);
  }
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]),
                                            _mm256_packs_epi32(iv[2], iv[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(isum), _mm256_extracti128_si256(isum, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  *sum = _mm_cvtsi128_si32(s4);
  return d;
}
#endif

}  // namespace

void QuantizeRowQ8_1(const float* x, int64_t cols, uint8_t* out) {
  const int64_t nb = cols / kQk;
  float* d = reinterpret_cast<float*>(out);                              // [nb]
  float* s = d + nb;                                                     // [nb]
  int8_t* qs = reinterpret_cast<int8_t*>(out + 2 * nb * sizeof(float));  // [nb, 32]
  for (int64_t b = 0; b < nb; ++b) {
    int8_t* q = qs + b * kQk;
    int sum = 0;
#ifdef WITCERT_MATMUL_AVX2
    d[b] = QuantizeBlock32(x + b * kQk, q, &sum);
#else
    d[b] = QuantizeSpan(x + b * kQk, kQk, q);
    for (int i = 0; i < kQk; ++i) sum += q[i];
#endif
    s[b] = d[b] * static_cast<float>(sum);
  }
}

void QuantizeRowQ8_K(const float* x, int64_t cols, BlockQ8_Kx* out) {
  for (int64_t b = 0; b < cols / kQkK; ++b) {
    BlockQ8_Kx& blk = out[b];
    blk.d = QuantizeSpan(x + b * kQkK, kQkK, blk.qs);
    for (int g = 0; g < kQkK / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += blk.qs[16 * g + i];
      blk.bsums[g] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace witcert::matmul_internal
