// CPU reference of metered decode attention (see metered_attention.h).
#include "kernels/cpu/metered_attention.h"

#include <cmath>
#include <cstring>

#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <vector>

#include "kernels/meter/partial_sum.h"

namespace witcert {

MeteredQuery PrepareMeteredQuery(const MeteredHeadInputs& in, const float* q,
                                 const MeteredAttentionOptions& options) {
  MeteredQuery mq;
  mq.q = q;
  const int32_t d = in.head_dim;
  mq.inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(d));
  mq.eps_inflation = meter::EpsInflation(d, in.num_bands);
  mq.eta_factor = meter::EtaFactor(d);
  float tmp[512];
  if (in.k_witness != nullptr) {
    meter::QueryBandNorms(q, d, in.num_bands, in.interleaved, tmp, mq.q_band_norm);
  }
  if (in.k_dither_scale != nullptr && options.delta_loc > 0.0) {
    double n1 = 0.0;
    for (int32_t c = 0; c < d; ++c) n1 += std::fabs(q[c]);
    float n2 = meter::ScaledNorm(q, d) * (1.0f + 2.0f * (d + 6) * meter::kUnitRoundoff);
    mq.tier_b_coef = meter::TierBCoefficient(n2, meter::RoundUpToFloat(n1 * (1.0 + 1e-6)), d,
                                             in.num_tokens, options.delta_loc);
  }
  return mq;
}

// q·k and Σ|q_c k_c|. Any summation order has rounding within γ_d·Σ|q_c k_c|, which is what
// the meter's η bound (EtaFactor) covers, so the 8-lane order is as sound as the sequential one.
inline void DotAndAbsDot(const float* q, const float* k, int32_t d, float* dot, float* absdot) {
  int32_t c = 0;
  float sum = 0.0f, abs_sum = 0.0f;
#ifdef __AVX2__
  if (d >= 8) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 s8 = _mm256_setzero_ps(), a8 = _mm256_setzero_ps();
    for (; c + 8 <= d; c += 8) {
      const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(k + c));
      s8 = _mm256_add_ps(s8, p);
      a8 = _mm256_add_ps(a8, _mm256_andnot_ps(sign, p));
    }
    alignas(32) float ls[8], la[8];
    _mm256_store_ps(ls, s8);
    _mm256_store_ps(la, a8);
    for (int j = 0; j < 8; ++j) {
      sum += ls[j];
      abs_sum += la[j];
    }
  }
#endif
  for (; c < d; ++c) {
    const float p = q[c] * k[c];
    sum += p;
    abs_sum += std::fabs(p);
  }
  *dot = sum;
  *absdot = abs_sum;
}

float StoredValueNorm(const float* v, int32_t head_dim) {
  const float inflation = 1.0f + 2.0f * (head_dim + 6) * meter::kUnitRoundoff;
#ifdef __AVX2__
  // Same scaled norm as meter::ScaledNorm, 8 lanes at a time. Summing in 8 lanes and then
  // across them has a smaller rounding bound (γ_{d/8+3}) than the sequential sum the
  // inflation was derived for (γ_d), so the inflated result stays an upper bound.
  if (head_dim % 8 == 0) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax8 = _mm256_setzero_ps();
    for (int32_t c = 0; c < head_dim; c += 8) {
      amax8 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v + c)), amax8);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, amax8);
    float amax = 0.0f;
    for (float l : lanes) amax = meter::MaxAcc(amax, l);
    if (amax == 0.0f || !(amax <= 3.0e38f)) return meter::ScaledNorm(v, head_dim) * inflation;
    const __m256 inv = _mm256_set1_ps(1.0f / amax);
    __m256 sum8 = _mm256_setzero_ps();
    for (int32_t c = 0; c < head_dim; c += 8) {
      const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(v + c), inv);
      sum8 = _mm256_add_ps(sum8, _mm256_mul_ps(y, y));
    }
    _mm256_store_ps(lanes, sum8);
    float sum = 0.0f;
    for (float l : lanes) sum += l;
    return amax * std::sqrt(sum) * inflation;
  }
#endif
  return meter::ScaledNorm(v, head_dim) * inflation;
}

void MeteredSplit(const MeteredHeadInputs& in, const MeteredQuery& mq, bool meter, int64_t begin,
                  int64_t end, meter::CertPartial* partial, float* acc, float* logit, float* eps) {
  const int32_t d = in.head_dim;
  const int32_t nb = in.num_bands;
  const int64_t n = end - begin;
  std::memset(acc, 0, sizeof(float) * d);
  *partial = meter::CertPartial();
  if (n <= 0) return;
  // Per-thread scratch, reused: this runs per (sequence, layer, head, split) every step.
  thread_local std::vector<float> lg, ep, eta;  // [n] each
  lg.resize(n);
  ep.resize(meter ? n : 0);
  eta.resize(meter ? n : 0);
  const float* q = mq.q;
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    const float* k = in.k + (begin + i) * d;
    float dot = 0.0f, absdot = 0.0f;
    DotAndAbsDot(q, k, d, &dot, &absdot);
    lg[i] = dot * mq.inv_sqrt_d;
    m = meter::MaxAcc(m, lg[i]);
    if (!meter) continue;
    eta[i] = mq.eta_factor * absdot * mq.inv_sqrt_d;
    bool exact = in.token_exact != nullptr && in.token_exact[begin + i] != 0;
    float e = 0.0f;
    if (!exact) {
      if (in.k_witness != nullptr) {
        e = meter::TierAEpsilon(mq.q_band_norm, in.k_witness + (begin + i) * nb, nb, mq.inv_sqrt_d,
                                mq.eps_inflation);
      }
      if (mq.tier_b_coef > 0.0f) {
        float u = mq.tier_b_coef * in.k_dither_scale[begin + i] * (1.0f + 4 * meter::kUnitRoundoff);
        e = in.k_witness != nullptr ? std::fmin(e, u) : u;
      }
    }
    ep[i] = e;
  }
  if (!(m > -INFINITY)) m = 0.0f;  // all logits NaN: keep going, the partial is marked bad
  partial->m = m;
  for (int64_t i = 0; i < n; ++i) {
    const float* v = in.v + (begin + i) * d;
    float w = std::exp(lg[i] - m);
    for (int32_t c = 0; c < d; ++c) acc[c] += w * v[c];
    if (!meter) {
      partial->z += w;
      partial->count += 1;
      partial->chain += 1;
      continue;
    }
    bool exact = in.token_exact != nullptr && in.token_exact[begin + i] != 0;
    float rho = 0.0f;
    if (!exact && in.v_witness != nullptr) {
      rho = in.v_rho != nullptr ? in.v_rho[begin + i]
                                : meter::ResidualNormFromWitness(in.v_witness + (begin + i) * nb, nb);
    }
    float vn = in.v_norm != nullptr ? in.v_norm[begin + i] : StoredValueNorm(v, d);
    // Same arithmetic as meter::PartialAddToken, reusing w (the GPU kernels do the same).
    meter::PartialAddTokenWeighted(partial, lg[i], w, ep[i], rho, eta[i]);
    partial->vmax = meter::MaxAcc(partial->vmax, vn + rho);
  }
  if (logit != nullptr) std::memcpy(logit, lg.data(), sizeof(float) * n);
  if (eps != nullptr && meter) std::memcpy(eps, ep.data(), sizeof(float) * n);
}

void MeteredAttention(const MeteredHeadInputs& in, const float* q,
                      const MeteredAttentionOptions& options, float* out,
                      MeteredAttentionResult* result, float* token_risk) {
  const int32_t d = in.head_dim;
  const int64_t s = in.num_tokens;
  *result = MeteredAttentionResult();
  std::memset(out, 0, sizeof(float) * d);
  if (s <= 0) return;
  int64_t splits = options.num_splits < 1 ? 1 : options.num_splits;
  if (splits > s) splits = s;
  MeteredQuery mq = PrepareMeteredQuery(in, q, options);
  result->tier_b = mq.tier_b_coef > 0.0f;
  thread_local std::vector<meter::CertPartial> parts;
  thread_local std::vector<float> acc;  // [splits, d]
  parts.assign(splits, meter::CertPartial());
  acc.assign(splits * d, 0.0f);
  const bool want_tokens = token_risk != nullptr && options.meter;
  thread_local std::vector<float> token_logit, token_eps;  // [S]
  token_logit.resize(want_tokens ? s : 0);
  token_eps.resize(want_tokens ? s : 0);
  std::vector<float>& lg = token_logit;
  std::vector<float>& ep = token_eps;
  for (int64_t i = 0; i < splits; ++i) {
    int64_t b = s * i / splits, e = s * (i + 1) / splits;
    MeteredSplit(in, mq, options.meter, b, e, &parts[i], &acc[i * d],
                 want_tokens ? &lg[b] : nullptr, want_tokens ? &ep[b] : nullptr);
  }
  // Log-sum-exp merge (§5): the bound's partials and the output accumulators.
  meter::CertPartial merged;
  for (int64_t i = 0; i < splits; ++i) merged = meter::MergePartials(merged, parts[i]);
  float z = 0.0f;
  for (int64_t i = 0; i < splits; ++i) {
    float f = std::exp(parts[i].m - merged.m);
    z += parts[i].z * f;
    for (int32_t c = 0; c < d; ++c) out[c] += acc[i * d + c] * f;
  }
  float inv_z = 1.0f / z;
  double norm2 = 0.0;
  for (int32_t c = 0; c < d; ++c) {
    out[c] *= inv_z;
    norm2 += static_cast<double>(out[c]) * out[c];
  }
  result->out_norm = static_cast<float>(std::sqrt(norm2));
  if (!options.meter) {
    result->bound = meter::CertBound();
    result->bound.tv = NAN;  // no meter: no certificate
    return;
  }
  result->bound = meter::FinalizeCert(merged, static_cast<int32_t>(splits));
  if (want_tokens) {
    for (int64_t t = 0; t < s; ++t) {
      token_risk[t] = ep[t] > 0.0f ? std::exp(lg[t] - merged.m) * inv_z * std::expm1(ep[t]) : 0.0f;
    }
  }
}

}  // namespace witcert
