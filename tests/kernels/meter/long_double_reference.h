// High-precision truth for certificate tests: exact attention in long double.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace witcert::testing {

struct TrueError {
  long double tv = 0;       // ½ Σ |p_t − p̃_t|
  long double out_err = 0;  // ‖o − õ‖₂
  long double out_norm = 0; // ‖õ‖₂
};

inline std::vector<long double> SoftmaxLd(const float* q, const float* k, int64_t s, int32_t d) {
  std::vector<long double> l(s);
  long double m = -INFINITY;
  const long double inv = 1.0L / std::sqrt(static_cast<long double>(d));
  for (int64_t t = 0; t < s; ++t) {
    long double dot = 0;
    for (int32_t c = 0; c < d; ++c) dot += static_cast<long double>(q[c]) * k[t * d + c];
    l[t] = dot * inv;
    m = std::fmax(m, l[t]);
  }
  long double z = 0;
  for (auto& x : l) z += (x = std::exp(x - m));
  for (auto& x : l) x /= z;
  return l;
}

// Exact rows (k, v) vs stored rows (ks, vs), all [S, d].
inline TrueError TrueAttentionError(const float* q, const float* k, const float* v,
                                    const float* ks, const float* vs, int64_t s, int32_t d) {
  auto p = SoftmaxLd(q, k, s, d);
  auto pt = SoftmaxLd(q, ks, s, d);
  TrueError e;
  for (int64_t t = 0; t < s; ++t) e.tv += std::fabs(p[t] - pt[t]);
  e.tv *= 0.5L;
  long double err2 = 0, n2 = 0;
  for (int32_t c = 0; c < d; ++c) {
    long double o = 0, ot = 0;
    for (int64_t t = 0; t < s; ++t) {
      o += p[t] * v[t * d + c];
      ot += pt[t] * vs[t * d + c];
    }
    err2 += (o - ot) * (o - ot);
    n2 += ot * ot;
  }
  e.out_err = std::sqrt(err2);
  e.out_norm = std::sqrt(n2);
  return e;
}

}  // namespace witcert::testing
