// Quantization of fp32 activation rows to the 8-bit blocks the integer dot kernels consume.
//
// Symmetric rounding to [-127, 127] (not GGML's [-128, 127] for Q8_K) keeps one error bound
// for every format: |x - d·q| <= d/2 with d = max|x|/127, which the tests turn into a
// per-element tolerance. Runs once per activation row per Matmul call, so scalar code
// (which the compiler vectorizes) is enough.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

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
    q[i] = static_cast<int8_t>(v);
  }
  return d;
}

}  // namespace

void QuantizeRowQ8_1(const float* x, int64_t cols, uint8_t* out) {
  const int64_t nb = cols / kQk;
  float* d = reinterpret_cast<float*>(out);                              // [nb]
  float* s = d + nb;                                                     // [nb]
  int8_t* qs = reinterpret_cast<int8_t*>(out + 2 * nb * sizeof(float));  // [nb, 32]
  for (int64_t b = 0; b < nb; ++b) {
    int8_t* q = qs + b * kQk;
    d[b] = QuantizeSpan(x + b * kQk, kQk, q);
    int sum = 0;
    for (int i = 0; i < kQk; ++i) sum += q[i];
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
