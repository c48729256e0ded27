#include "engine/kv/witness.h"

#include <cmath>

#include "kernels/meter/cert_math.h"
#include "kernels/meter/float_formats.h"

namespace witcert {

void ComputeWitness(const float* x, const float* x_hat, const BandLayout& layout, uint16_t* w) {
  // Band b is `run` consecutive dims (interleaved pairs) or two runs of `run / 2`, one in
  // each half (half-split pairs): meter::BandOfDim's map, walked without a division per dim.
  // Each band's squares are summed in increasing dim order, as a loop over dims would.
  const int32_t d = layout.head_dim, nb = layout.num_bands, half = d / 2;
  const int32_t pairs = half / nb;  // rotation pairs per band
  for (int32_t b = 0; b < nb; ++b) {
    double sum = 0.0;
    auto add_run = [&](int32_t c0, int32_t n) {
      for (int32_t c = c0; c < c0 + n; ++c) {
        const double r =
            static_cast<double>(x[c]) - static_cast<double>(x_hat[c]);  // exact in double
        sum += r * r;
      }
    };
    if (layout.interleaved()) {
      add_run(2 * b * pairs, 2 * pairs);
    } else {
      add_run(b * pairs, pairs);
      add_run(half + b * pairs, pairs);
    }
    // double sum of ≤ d squares: relative error ≤ (d+1)·2^-53; inflate well past it.
    const double norm = std::sqrt(sum) * (1.0 + 1e-12);
    w[b] = meter::FloatToHalfUp(meter::RoundUpToFloat(norm));
  }
}

}  // namespace witcert
