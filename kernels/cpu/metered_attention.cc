// CPU reference of metered decode attention (see metered_attention.h).
#include "kernels/cpu/metered_attention.h"

#include <cmath>
#include <algorithm>
#include <cstring>

#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <vector>

#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/transformer_ops.h"
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
    // The lanes hold no NaN (max_ps keeps its second operand for a NaN first one), so the
    // max tree is exact; the sum tree is one more re-association inside γ_{d/8+3}.
    const float amax = matmul_internal::HMax(amax8);
    if (amax == 0.0f || !(amax <= 3.0e38f)) return meter::ScaledNorm(v, head_dim) * inflation;
    const __m256 inv = _mm256_set1_ps(1.0f / amax);
    __m256 sum8 = _mm256_setzero_ps();
    for (int32_t c = 0; c < head_dim; c += 8) {
      const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(v + c), inv);
      sum8 = _mm256_add_ps(sum8, _mm256_mul_ps(y, y));
    }
    return amax * std::sqrt(matmul_internal::HSum(sum8)) * inflation;
  }
#endif
  return meter::ScaledNorm(v, head_dim) * inflation;
}

#ifdef __AVX2__
namespace {

// [q·k_t for t < 4 | Σ_c |q_c k_tc| for t < 4] of 4 consecutive rows k [4, d], d % 8 == 0.
// The 8 lanes are summed as a tree (hadd) rather than a chain: any order stays within the
// γ_d·Σ|q_c k_c| that η covers, and Σ|q k| is off by far less than EtaFactor's 2%.
inline __m256 DotAbs4(const float* q, const float* k, int32_t d) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, a0 = s0, a1 = s0, a2 = s0, a3 = s0;
  for (int32_t c = 0; c < d; c += 8) {
    const __m256 qc = _mm256_loadu_ps(q + c);
    const __m256 p0 = _mm256_mul_ps(qc, _mm256_loadu_ps(k + c));
    const __m256 p1 = _mm256_mul_ps(qc, _mm256_loadu_ps(k + d + c));
    const __m256 p2 = _mm256_mul_ps(qc, _mm256_loadu_ps(k + 2 * d + c));
    const __m256 p3 = _mm256_mul_ps(qc, _mm256_loadu_ps(k + 3 * d + c));
    s0 = _mm256_add_ps(s0, p0);
    s1 = _mm256_add_ps(s1, p1);
    s2 = _mm256_add_ps(s2, p2);
    s3 = _mm256_add_ps(s3, p3);
    a0 = _mm256_add_ps(a0, _mm256_andnot_ps(sign, p0));
    a1 = _mm256_add_ps(a1, _mm256_andnot_ps(sign, p1));
    a2 = _mm256_add_ps(a2, _mm256_andnot_ps(sign, p2));
    a3 = _mm256_add_ps(a3, _mm256_andnot_ps(sign, p3));
  }
  return _mm256_set_m128(matmul_internal::LaneSums4(a0, a1, a2, a3),
                         matmul_internal::LaneSums4(s0, s1, s2, s3));
}

// Σ_b qbn_b·w_tb for 4 consecutive witness rows w [4, 8]. The terms are non-negative, so
// the tree order keeps the relative rounding within EpsInflation's γ_B, as the chain does.
inline __m128 BandDot4(__m256 qbn, const float* w) {
  const __m256 p0 = _mm256_mul_ps(qbn, _mm256_loadu_ps(w));
  const __m256 p1 = _mm256_mul_ps(qbn, _mm256_loadu_ps(w + 8));
  const __m256 p2 = _mm256_mul_ps(qbn, _mm256_loadu_ps(w + 16));
  const __m256 p3 = _mm256_mul_ps(qbn, _mm256_loadu_ps(w + 24));
  return matmul_internal::LaneSums4(p0, p1, p2, p3);
}

}  // namespace
#endif

namespace {

// Σ_t w_t: eight lanes, then across them, then the tail (the same order wherever it is
// used, so the output never depends on whether the meter ran).
float SumWeights(const float* w, int64_t n) {
  int64_t t = 0;
  float z = 0.0f;
#ifdef __AVX2__
  if (n >= 8) {
    __m256 z8 = _mm256_setzero_ps();
    for (; t + 8 <= n; t += 8) z8 = _mm256_add_ps(z8, _mm256_loadu_ps(w + t));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, z8);
    for (float l : lanes) z += l;
  }
#endif
  for (; t < n; ++t) z += w[t];
  return z;
}

#ifdef __AVX2__
// Expm1UpperTight on eight lanes: the scalar function's constants and fma sequence, so the
// same bits.
inline __m256 Expm1UpperTight8(__m256 e) {
  __m256 h = _mm256_fmadd_ps(e, _mm256_set1_ps(meter::kTightC7), _mm256_set1_ps(meter::kTightC6));
  h = _mm256_fmadd_ps(e, h, _mm256_set1_ps(meter::kTightC5));
  h = _mm256_fmadd_ps(e, h, _mm256_set1_ps(meter::kTightC4));
  h = _mm256_fmadd_ps(e, h, _mm256_set1_ps(meter::kTightC3));
  h = _mm256_fmadd_ps(e, h, _mm256_set1_ps(0.5f));
  h = _mm256_fmadd_ps(e, h, _mm256_set1_ps(1.0f));
  return _mm256_mul_ps(_mm256_mul_ps(e, h), _mm256_set1_ps(meter::kTightFinal));
}
#endif

// The CPU reference's A−1 term: WeightedEpsTerm with Expm1UpperTight.
constexpr meter::Expm1Form kReferenceExpm1 = meter::Expm1Form::kUpperTight;

inline float AMinusOneTerm(float logit, float w, float eps, float m) {
  return eps > 0.0f ? meter::WeightedEpsTerm<kReferenceExpm1>(logit, m, w, eps) : 0.0f;
}

// out[t] = AMinusOneTerm of token t, eight tokens at a time where every lane takes the
// polynomial branch (or has no term).
void AMinusOneTerms(const float* lg, const float* wt, const float* ep, float m, int64_t n,
                    float* out) {
  int64_t t = 0;
#ifdef __AVX2__
  const __m256 zero = _mm256_setzero_ps(), half = _mm256_set1_ps(0.5f);
  const __m256 wmin = _mm256_set1_ps(meter::kMinDirectWeight);
  for (; t + 8 <= n; t += 8) {
    const __m256 e = _mm256_loadu_ps(ep + t), w = _mm256_loadu_ps(wt + t);
    const __m256 none = _mm256_cmp_ps(e, zero, _CMP_LE_OQ);  // no term (ε̂ ≤ 0)
    const __m256 poly =
        _mm256_and_ps(_mm256_cmp_ps(e, half, _CMP_LE_OQ), _mm256_cmp_ps(w, wmin, _CMP_GE_OQ));
    if (_mm256_movemask_ps(_mm256_or_ps(none, poly)) != 0xff) {  // NaN, large ε̂ or tiny w
      for (int64_t j = t; j < t + 8; ++j) out[j] = AMinusOneTerm(lg[j], wt[j], ep[j], m);
      continue;
    }
    _mm256_storeu_ps(out + t, _mm256_andnot_ps(none, _mm256_mul_ps(w, Expm1UpperTight8(e))));
  }
#endif
  for (; t < n; ++t) out[t] = AMinusOneTerm(lg[t], wt[t], ep[t], m);
}

// The certificate sums of one split except z (SumWeights), eight tokens per step (AVX2):
// the same terms as PartialAddTokenWeighted<kReferenceExpm1> token by token, summed
// in eight lanes and then across them. That is a re-association of sums of
// non-negative terms: every lane chain plus the combine is at most `count` additions long,
// so chain = count keeps SumInflation's γ_chain an upper bound. The maxima are exact in any
// order. `rho` and `vb` [n] are each row's ρ and ν (RowValueBounds). Returns false (nothing
// touched) where it does not apply: no AVX2, fewer than 8 tokens, or a non-finite logit in
// the split.
bool MeterSumsVector(int64_t n, const float* lg, const float* wt, const float* ep, const float* eta,
                     const float* rho, const float* vb, meter::CertPartial* p) {
#ifdef __AVX2__
  if (n < 8) return false;
  for (int64_t t = 0; t < n; ++t) {
    if (!(std::fabs(lg[t]) <= 3.0e38f)) return false;  // the scalar path marks the partial bad
  }
  thread_local std::vector<float> bt;  // [n] A−1 terms
  bt.resize(n);
  AMinusOneTerms(lg, wt, ep, p->m, n, bt.data());
  const __m256 zero = _mm256_setzero_ps();
  __m256 b8 = zero, c8 = zero, emax8 = zero, etamax8 = zero, vmax8 = zero, nan8 = zero;
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256 w = _mm256_loadu_ps(wt + t);
    const __m256 e = _mm256_loadu_ps(ep + t);
    b8 = _mm256_add_ps(b8, _mm256_loadu_ps(bt.data() + t));
    c8 = _mm256_add_ps(c8, _mm256_mul_ps(w, _mm256_loadu_ps(rho + t)));
    emax8 = _mm256_max_ps(e, emax8);  // NaN lanes of e keep emax8 (MaxAcc)
    nan8 = _mm256_or_ps(nan8, _mm256_cmp_ps(e, e, _CMP_UNORD_Q));
    etamax8 = _mm256_max_ps(_mm256_loadu_ps(eta + t), etamax8);
    vmax8 = _mm256_max_ps(_mm256_loadu_ps(vb + t), vmax8);
  }
  alignas(32) float lb[8], lc[8], le[8], leta[8], lv[8];
  _mm256_store_ps(lb, b8);
  _mm256_store_ps(lc, c8);
  _mm256_store_ps(le, emax8);
  _mm256_store_ps(leta, etamax8);
  _mm256_store_ps(lv, vmax8);
  for (int j = 0; j < 8; ++j) {
    p->b += lb[j];
    p->c += lc[j];
    p->eps_max = meter::MaxAcc(p->eps_max, le[j]);
    p->eta_max = meter::MaxAcc(p->eta_max, leta[j]);
    p->vmax = meter::MaxAcc(p->vmax, lv[j]);
  }
  if (_mm256_movemask_ps(nan8) != 0) p->eps_max = INFINITY;
  for (; t < n; ++t) {  // the tail, token by token
    p->b += bt[t];
    if (rho[t] > 0.0f) p->c += wt[t] * rho[t];
    p->eps_max = meter::MaxAcc(p->eps_max, ep[t]);
    if (!(ep[t] == ep[t])) p->eps_max = INFINITY;
    p->eta_max = meter::MaxAcc(p->eta_max, eta[t]);
    p->vmax = meter::MaxAcc(p->vmax, vb[t]);
  }
  p->count += n;
  p->chain += n;
  return true;
#else
  return false;
#endif
}

// ρ_t and ν_t of rows [begin, begin + n): the stored value summary, or (rows without one:
// values exact, or an exact copy) ρ = 0 and ν = the row's own StoredValueNorm.
void RowValueBounds(const MeteredHeadInputs& in, int64_t begin, int64_t n, float* rho, float* vb) {
  const int32_t d = in.head_dim;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t r = begin + t;
    const bool exact = in.token_exact != nullptr && in.token_exact[r] != 0;
    if (in.v_bound != nullptr && !exact) {
      rho[t] = in.v_rho[r];
      vb[t] = in.v_bound[r];
    } else {
      rho[t] = 0.0f;
      vb[t] = in.v_norm != nullptr ? in.v_norm[r] : StoredValueNorm(in.v + r * d, d);
    }
  }
}

}  // namespace

void MeteredSplit(const MeteredHeadInputs& in, const MeteredQuery& mq, const MeteredAttentionOptions& options,
                  int64_t begin, int64_t end, meter::CertPartial* partial, float* acc, float* logit, float* eps) {
  const int32_t d = in.head_dim;
  const int32_t nb = in.num_bands;
  const bool meter = options.meter;
  const bool tier_b_only = meter && !meter::TierBFormReadsKeyWitness(options.tier_b_form);
  const bool split_max = meter && options.tier_b_form == meter::TierBForm::kSplitMax && mq.tier_b_coef > 0.0f;
  const int64_t n = end - begin;
  std::memset(acc, 0, sizeof(float) * d);
  *partial = meter::CertPartial();
  if (n <= 0) return;
  // Per-thread scratch, reused: this runs per (sequence, layer, head, split) every step.
  thread_local std::vector<float> lg, wt, ep, eta;  // [n] each
  lg.resize(n);
  wt.resize(n);
  ep.resize(meter ? n : 0);
  eta.resize(meter ? n : 0);
  const float* q = mq.q;
  const float* k0 = in.k + begin * d;
  // Pass 1: logits ℓ̂_t (and η_t), four rows at a time where the build has AVX2.
  int64_t i = 0;
#ifdef __AVX2__
  if (d % 8 == 0) {
    const __m128 inv = _mm_set1_ps(mq.inv_sqrt_d), etaf = _mm_set1_ps(mq.eta_factor);
    for (; i + 4 <= n; i += 4) {
      const __m256 da = DotAbs4(q, k0 + i * d, d);
      _mm_storeu_ps(&lg[i], _mm_mul_ps(_mm256_castps256_ps128(da), inv));
      if (meter) {
        _mm_storeu_ps(&eta[i], _mm_mul_ps(_mm_mul_ps(etaf, _mm256_extractf128_ps(da, 1)), inv));
      }
    }
  }
#endif
  for (; i < n; ++i) {
    float dot = 0.0f, absdot = 0.0f;
    DotAndAbsDot(q, k0 + i * d, d, &dot, &absdot);
    lg[i] = dot * mq.inv_sqrt_d;
    if (meter) eta[i] = mq.eta_factor * absdot * mq.inv_sqrt_d;
  }
  float m = -INFINITY;
  for (int64_t t = 0; t < n; ++t) m = meter::MaxAcc(m, lg[t]);
  if (meter) {
    // ε̂_t: the Tier A band bound (0 for exact rows), capped by Tier B's u_t where available.
    // Tier B's scale-only and split-max forms take u_t alone: no Tier A bound to compute.
    const bool tier_a = !(tier_b_only && mq.tier_b_coef > 0.0f);
    const float* kw = in.k_witness != nullptr && tier_a ? in.k_witness + begin * nb : nullptr;
    int64_t t = 0;
#ifdef __AVX2__
    if (kw != nullptr && nb == 8) {
      const __m256 qbn = _mm256_loadu_ps(mq.q_band_norm);
      const __m128 inv = _mm_set1_ps(mq.inv_sqrt_d), infl = _mm_set1_ps(mq.eps_inflation);
      for (; t + 4 <= n; t += 4) {
        _mm_storeu_ps(&ep[t], _mm_mul_ps(_mm_mul_ps(BandDot4(qbn, kw + t * 8), inv), infl));
      }
    }
#endif
    for (; t < n; ++t) {
      ep[t] = kw != nullptr ? meter::TierAEpsilon(mq.q_band_norm, kw + t * nb, nb, mq.inv_sqrt_d,
                                                  mq.eps_inflation)
                            : 0.0f;
    }
    for (t = 0; t < n; ++t) {
      if (in.token_exact != nullptr && in.token_exact[begin + t] != 0) {
        ep[t] = 0.0f;
      } else if (mq.tier_b_coef > 0.0f) {
        float u = mq.tier_b_coef * in.k_dither_scale[begin + t] * (1.0f + 4 * meter::kUnitRoundoff);
        ep[t] = kw != nullptr && !tier_b_only ? std::fmin(ep[t], u) : u;  // scale-only, split-max: u_t alone
      }
    }
  }
  if (!(m > -INFINITY)) m = 0.0f;  // all logits NaN: keep going, the partial is marked bad
  partial->m = m;
  // Pass 2: weights, the output accumulator, the certificate sums.
  for (int64_t t = 0; t < n; ++t) wt[t] = std::exp(lg[t] - m);
  AccumulateRows(wt.data(), in.v + begin * d, d, n, d, acc);
  // z is one sum of the weights whatever the meter does below (it replaces the z of the scalar
  // PartialAddTokenWeighted loop), so metering never changes the served output.
  const float z = SumWeights(wt.data(), n);
  thread_local std::vector<float> rho, vb;  // [n] each (meter)
  if (!meter) {
    partial->count += n;
    partial->chain += n;
  } else {
    rho.resize(n);
    vb.resize(n);
    RowValueBounds(in, begin, n, rho.data(), vb.data());
    if (!options.vector_sums ||
        !MeterSumsVector(n, lg.data(), wt.data(), ep.data(), eta.data(), rho.data(), vb.data(), partial)) {
      for (int64_t t = 0; t < n; ++t) {
        // Same arithmetic as meter::PartialAddToken, reusing w (the GPU kernels do the same).
        meter::PartialAddTokenWeighted<kReferenceExpm1>(partial, lg[t], wt[t], ep[t], rho[t], eta[t]);
        partial->vmax = meter::MaxAcc(partial->vmax, vb[t]);
      }
    }
  }
  partial->z = z;
  if (split_max && !partial->bad) {
    float rho_max = 0.0f;
    for (int64_t t = 0; t < n; ++t) rho_max = meter::MaxAcc(rho_max, rho[t]);
    meter::SetSplitMaxSums(partial, partial->eps_max, rho_max);
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
  const int64_t len = options.split_tokens;
  if (len > 0) splits = (s + len - 1) / len;
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
    int64_t b = len > 0 ? len * i : s * i / splits;
    int64_t e = len > 0 ? std::min(b + len, s) : s * (i + 1) / splits;
    MeteredSplit(in, mq, options, b, e, &parts[i], &acc[i * d],
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
