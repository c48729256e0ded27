#include "engine/cert/audit.h"

#include <cmath>
#include <vector>

#include "kernels/meter/dither_hash.h"

namespace witcert {
namespace {

std::vector<long double> Softmax(const float* q, const float* k, int64_t s, int32_t d) {
  std::vector<long double> l(s);
  long double m = -INFINITY;
  const long double inv = 1.0L / std::sqrt(static_cast<long double>(d));
  for (int64_t t = 0; t < s; ++t) {
    long double dot = 0;
    for (int32_t c = 0; c < d; ++c) dot += static_cast<long double>(q[c]) * k[t * d + c];
    l[t] = dot * inv;
    if (l[t] > m) m = l[t];
  }
  long double z = 0;
  for (auto& x : l) z += (x = std::exp(x - m));
  for (auto& x : l) x /= z;
  return l;
}

}  // namespace

bool AuditSampled(int32_t layer, int32_t head, int64_t step, double rate) {
  if (rate <= 0) return false;
  if (rate >= 1) return true;
  uint64_t h = meter::Mix64(meter::Mix64((static_cast<uint64_t>(layer) << 32) | static_cast<uint32_t>(head)) ^
                            static_cast<uint64_t>(step));
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0) < rate;
}

AuditResult AuditCell(const float* q, const float* k, const float* v, const float* ks,
                      const float* vs, int64_t s, int32_t d) {
  auto p = Softmax(q, k, s, d);
  auto pt = Softmax(q, ks, s, d);
  long double tv = 0, err2 = 0, n2 = 0;
  for (int64_t t = 0; t < s; ++t) tv += std::fabs(p[t] - pt[t]);
  for (int32_t c = 0; c < d; ++c) {
    long double o = 0, ot = 0;
    for (int64_t t = 0; t < s; ++t) {
      o += p[t] * v[t * d + c];
      ot += pt[t] * vs[t * d + c];
    }
    err2 += (o - ot) * (o - ot);
    n2 += ot * ot;
  }
  AuditResult r;
  r.true_tv = static_cast<double>(0.5L * tv);
  r.true_out_err = static_cast<double>(std::sqrt(err2));
  r.out_norm = static_cast<double>(std::sqrt(n2));
  return r;
}

}  // namespace witcert
