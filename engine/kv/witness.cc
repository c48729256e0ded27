#include "engine/kv/witness.h"

namespace witcert {
namespace {

constexpr int32_t kMaxDim = 512, kMaxBands = 64;

// Per-band sums of squares of `a` [d] (meter::BandSquareSum, band order).
void BandSums(const double* a, const BandLayout& layout, double* sums) {
  for (int32_t b = 0; b < layout.num_bands; ++b) {
    sums[b] = meter::BandSquareSum(a, layout.head_dim, layout.num_bands, layout.interleaved(), b);
  }
}

}  // namespace

void ComputeKeyWitness(const float* x, const float* x_hat, const BandLayout& layout, uint8_t* out) {
  double r[kMaxDim], sums[kMaxBands];
  for (int32_t c = 0; c < layout.head_dim; ++c) {
    r[c] = static_cast<double>(x[c]) - static_cast<double>(x_hat[c]);  // exact in double
  }
  BandSums(r, layout, sums);
  const uint16_t unit = meter::KeyWitnessFromBandSums(sums, layout.num_bands, out + 2);
  std::memcpy(out, &unit, 2);
}

void ComputeValueSummary(const float* x, const float* x_hat, const BandLayout& layout, uint8_t* out) {
  double r[kMaxDim], xh[kMaxDim];
  for (int32_t c = 0; c < layout.head_dim; ++c) {
    r[c] = static_cast<double>(x[c]) - static_cast<double>(x_hat[c]);
    xh[c] = static_cast<double>(x_hat[c]);
  }
  uint16_t w[2];
  meter::ValueSummaryOf(r, xh, layout.head_dim, w);
  std::memcpy(out, w, 4);
}

}  // namespace witcert
