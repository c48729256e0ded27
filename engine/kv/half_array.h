// fp16 arrays → fp32, with F16C where the build has it: the fp16 codec's decode and the
// witness decode both run over the whole context every decode step.
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

}  // namespace witcert
