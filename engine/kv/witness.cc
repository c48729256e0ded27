#include "engine/kv/witness.h"

#include <cmath>

#ifdef __F16C__
#include <immintrin.h>
#endif

#include "kernels/meter/bands.h"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/float_formats.h"

namespace witcert {

void ComputeWitness(const float* x, const float* x_hat, const BandLayout& layout, uint16_t* w) {
  double sum[64] = {};  // [B], B ≤ 64
  const int32_t d = layout.head_dim;
  for (int32_t c = 0; c < d; ++c) {
    double r = static_cast<double>(x[c]) - static_cast<double>(x_hat[c]);  // exact in double
    sum[meter::BandOfDim(c, d, layout.num_bands, layout.interleaved())] += r * r;
  }
  for (int32_t b = 0; b < layout.num_bands; ++b) {
    // double sum of ≤ d squares: relative error ≤ (d+1)·2^-53; inflate well past it.
    double norm = std::sqrt(sum[b]) * (1.0 + 1e-12);
    w[b] = meter::FloatToHalfUp(meter::RoundUpToFloat(norm));
  }
}

void DecodeWitness(const uint16_t* w, int32_t num_bands, float* out) {
  int32_t b = 0;
#ifdef __F16C__
  // fp16 → fp32 is exact: the hardware conversion gives HalfToFloat's bits for every finite
  // or infinite witness (a witness is a norm rounded up: never NaN). Runs per token per step.
  for (; b + 8 <= num_bands; b += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + b));
    _mm256_storeu_ps(out + b, _mm256_cvtph_ps(h));
  }
#endif
  for (; b < num_bands; ++b) out[b] = meter::HalfToFloat(w[b]);
}

}  // namespace witcert
