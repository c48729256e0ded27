#include "engine/kv/witness.h"

#include <cmath>

#include "engine/kv/half_array.h"
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
  // A witness is a norm rounded up, never NaN: the F16C path gives HalfToFloat's bits.
  HalfArrayToFloat(reinterpret_cast<const uint8_t*>(w), num_bands, out);
}

}  // namespace witcert
