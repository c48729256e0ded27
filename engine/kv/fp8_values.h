// fp8-e4m3 codes → fp32 by table: the fp8 codecs' decode runs over the whole context every
// decode step, and a code has only 256 values. Each entry is meter::Fp8E4M3ToFloat's, so the
// table gives the very bits of the scalar rule.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/meter/float_formats.h"

namespace witcert {

// [256]: the value of every fp8-e4m3 code (NaN codes included, as the scalar rule decodes them).
inline const float* Fp8E4M3Values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[b] = meter::Fp8E4M3ToFloat(static_cast<uint8_t>(b));
    return t;
  }();
  return table.data();
}

}  // namespace witcert
