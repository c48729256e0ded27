// fp16 arrays ↔ fp32, with F16C where the build has it: the fp16 codec's decode and the
// witness decode both run over the whole context every decode step, its encode on every write.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __F16C__
#include <immintrin.h>
#endif

#include "kernels/meter/float_formats.h"

namespace witcert {

// out[i] = the fp16 value in bytes [2i, 2i+2) of `in` (any alignment), i < n. fp16 → fp32 is
// exact, so the hardware path gives meter::HalfToFloat's bits for every non-NaN value.
inline void HalfArrayToFloat(const uint8_t* in, int64_t n, float* out) {
  int64_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = meter::HalfToFloat(h);
  }
}

// out[i] = meter::FloatToHalfSat(in[i]) as fp16 bits in bytes [2i, 2i+2) of `out`, i < n.
// F16C rounds to nearest even like FloatToHalf; eight values go through it when every one is
// finite with |x| ≤ 65504 (where saturation cannot apply), others take the scalar rule.
inline void FloatArrayToHalfSat(const float* in, int64_t n, uint8_t* out) {
  int64_t i = 0;
#ifdef __F16C__
  const __m256 limit = _mm256_set1_ps(65504.0f), sign = _mm256_set1_ps(-0.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    // |x| ≤ 65504 is false for NaN, so NaN lanes fall back too.
    if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, x), limit, _CMP_LE_OQ)) != 0xff) {
      for (int64_t j = i; j < i + 8; ++j) {
        const uint16_t h = meter::FloatToHalfSat(in[j]);
        std::memcpy(out + 2 * j, &h, 2);
      }
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i) {
    const uint16_t h = meter::FloatToHalfSat(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

}  // namespace witcert
