// The attention certificate's arithmetic, shared by the CPU reference and CUDA kernels.
//
// certificates.md §1-§5 in code: the Tier A logit bound ε_t, the Tier B bound u_t, the
// per-split partial sums (m, z, A−1 numerator, value sums), their log-sum-exp merge, and the
// final TV / value bounds. Everything the kernel computes in fp32 is made sound by explicit
// inflation (§4); the derivation is written next to each factor so a reviewer can re-check it.
//
// Floating-point model (u = 2^-24, fp32 round-to-nearest; expf/logf/expm1f/tanhf within
// 2 ulp, which glibc and CUDA's non-intrinsic functions meet; __expf-style fast-math
// intrinsics are NOT covered and must not be used with this header):
//  * ε_t: sums of non-negative terms, a scaled sqrt norm and products. Relative error
//    ≤ γ_k with k = d/B + B + 10 (band length, band count, roundings); we multiply by
//    EpsInflation = 1 + 2·k·u, which covers γ_k/(1−γ_k) and the multiply itself.
//  * The kernel's logits ℓ̂_t = fl(q·k̃_t)·fl(1/√d) differ from ℓ̃_t = q·k̃_t/√d by at most
//    η_t = 1.02·(d+4)·u·Σ_c|q_c k̃_c|/√d (γ_d for the dot, 2u for the scaling, 2% for the
//    computed Σ|q k̃| and d ≤ 16384). This is not quantization error (an uncompressed fp32
//    engine rounds alike), but p̂ = softmax(ℓ̂) weights A: since p̃_t/p̂_t ≤ e^{2η_max},
//    Σ p̃_t(e^{ε_t}−1) ≤ e^{2η_max}·Σ p̂_t(e^{ε_t}−1). So exact tokens (ε = 0) keep A−1 = 0.
//  * Exponentials: every term is expf(arg) with |arg| ≤ 104 for terms that do not
//    underflow and an argument rounding ≤ 324u (ulp budget of d1 = ℓ̂−m ≥ −168, λ = log
//    expm1(ε̂) with ε̂ ≤ kEpsCap, and their sum) → relative term error ≤ κ = 1024u.
//    Terms below the fp32 range contribute ≤ 2^-149 each (z ≥ 1 because the max term is
//    exactly e^0): an absolute slack (S + P)·2^-148 on A−1.
//  * Sums: a chain of n non-negative terms has relative error ≤ γ_n; the split merge adds
//    one κ (rescale) and γ_P. With θ = (1+κ)²(1+γ_n)(1+γ_P) − 1 on both the numerator b and
//    the denominator z, A−1 ≤ (b̂/ẑ)·(1+θ)/(1−θ); the final roundings add 8u.
//  * ε̂_t > kEpsCap (a logit error of 64 nats) makes the A form vacuous (returns inf): it
//    keeps every exponent argument in range. tanh(ε̂_max/2) still applies (it is 1 there).
#pragma once

#include <math.h>
#include <stdint.h>

#include "kernels/meter/dither_hash.h"
#include "kernels/meter/hd.h"

namespace witcert::meter {

constexpr float kUnitRoundoff = 5.9604644775390625e-8f;  // 2^-24
constexpr float kEpsCap = 64.0f;
constexpr double kKappa = 1024.0 * 5.9604644775390625e-8;

// Smallest float ≥ x (x finite or inf).
WITCERT_HD inline float RoundUpToFloat(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) < x) f = nextafterf(f, INFINITY);
  return f;
}

WITCERT_HD inline float EpsInflation(int32_t head_dim, int32_t num_bands) {
  return 1.0f + 2.0f * static_cast<float>(head_dim / num_bands + num_bands + 10) * kUnitRoundoff;
}

// Factor η_t / (Σ_c |q_c k̃_c| / √d): the kernel's own logit rounding (see above).
WITCERT_HD inline float EtaFactor(int32_t head_dim) {
  return 1.02f * static_cast<float>(head_dim + 4) * kUnitRoundoff;
}

// The pipelined CUDA kernel's η in Cauchy–Schwarz form (certificates.md): over one lane's 8
// channels Σ_c |q_c x_c|·s ≤ ‖q_lane‖·s‖x_lane‖, each norm taken as EtaLaneFactor of a sum of
// squares computed as below.
// Σ x_i² of 8 values, one fma step each (8 roundings of non-negative terms).
WITCERT_HD inline float LaneSquares(const float* x) {
  float s = 0.0f;
  for (int32_t i = 0; i < 8; ++i) s = fmaf(x[i], x[i], s);
  return s;
}
// s²·Σ x_i² of a key lane in its code domain (|x| ≤ 448 for scaled codecs; s = 1 otherwise).
WITCERT_HD inline float KeyLaneSquares(const float* x, float scale) { return (scale * scale) * LaneSquares(x); }
// An upper bound on √y for such a sum y: ≤ 10 roundings of non-negative terms (≤ 10u relative,
// down at worst) and the sqrt's one; 1 + 64u covers them with room. 2⁻⁶³ covers what products
// below the normal range can lose (a scaled codec's s² < 2⁻¹²⁶ with s²·‖x‖² ≤ 8·448²·s²: under
// 2⁻¹²⁷ absolute, whose square root is under 2⁻⁶³; unscaled codecs have s = 1 and fp16 squares stay
// normal). inf stays inf (an overflowing key or query makes η vacuous, never unsound); NaN stays
// NaN (the kernel's fmaxf drops it as the per-head path does; the logit marks the cell bad).
WITCERT_HD inline float EtaLaneFactor(float sum_squares) {
  return fmaf(sqrtf(sum_squares), 1.0f + 64.0f * kUnitRoundoff, 0x1p-63f);
}

// ‖x‖₂ of `n` values at stride `stride`, scaled so squares neither overflow nor underflow.
WITCERT_HD inline float ScaledNorm(const float* x, int32_t n) {
  float amax = 0.0f;
  for (int32_t i = 0; i < n; ++i) amax = MaxAcc(amax, fabsf(x[i]));
  if (amax == 0.0f || !(amax <= 3.0e38f)) return amax;  // 0, inf or NaN
  float inv = 1.0f / amax;
  float s = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    float y = x[i] * inv;
    s += y * y;
  }
  return amax * sqrtf(s);
}

// Band norms ‖q_b‖ of a query [d] under the band map (bands.h); `tmp` holds d/B floats.
// Pairs of band b are pairs [b·P, (b+1)·P), P = d/(2B).
WITCERT_HD inline void QueryBandNorms(const float* q, int32_t head_dim, int32_t num_bands,
                                      bool interleaved, float* tmp, float* out) {
  int32_t half = head_dim / 2;
  int32_t pairs_per_band = half / num_bands;
  for (int32_t b = 0; b < num_bands; ++b) {
    int32_t n = 0;
    for (int32_t p = b * pairs_per_band; p < (b + 1) * pairs_per_band; ++p) {
      int32_t d0 = interleaved ? 2 * p : p;
      int32_t d1 = interleaved ? 2 * p + 1 : p + half;
      tmp[n++] = q[d0];
      tmp[n++] = q[d1];
    }
    out[b] = ScaledNorm(tmp, n);
  }
}

// Tier A: ε_t = (1/√d)·Σ_b ‖q_b‖·w_{t,b}, inflated so it is ≥ the real-number value.
// `q_band_norm` [B], `witness` [B] (already decoded, rounded up).
WITCERT_HD inline float TierAEpsilon(const float* q_band_norm, const float* witness,
                                     int32_t num_bands, float inv_sqrt_d, float inflation) {
  float s = 0.0f;
  for (int32_t b = 0; b < num_bands; ++b) s += q_band_norm[b] * witness[b];
  return s * inv_sqrt_d * inflation;
}

// Tier B (§2): u_t = s_t·C with C = ‖q‖₂·sqrt(ln(2S/δ)/(6d)) (from ς² = s²‖q‖²/(12d)),
// plus the dither grid's bias (≤ kDitherBias·s per channel, dither_hash.h) and the fp32
// decode rounding of x̂ = s(m−ξ) (≤ 2u·127.5·s per channel), both times ‖q‖₁/√d.
// Returns C; u_t = C·s_t. δ_loc ∈ (0, 1).
WITCERT_HD inline float TierBCoefficient(float q_norm2, float q_norm1, int32_t head_dim,
                                         int64_t num_tokens, double delta_loc) {
  double log_term = log(2.0 * static_cast<double>(num_tokens) / delta_loc);
  double c = static_cast<double>(q_norm2) * sqrt(log_term / (6.0 * head_dim)) *
             (1.0 + 64.0 * kUnitRoundoff);
  c += (kDitherBias + 260.0 * kUnitRoundoff) * static_cast<double>(q_norm1) /
       sqrt(static_cast<double>(head_dim));
  return RoundUpToFloat(c);
}

// −ln δ_loc rounded up to float: TierBCoefficientF's δ part, computed once per launch on the host.
inline float TierBNegLogDelta(double delta_loc) {
  return delta_loc > 0.0 ? RoundUpToFloat(-log(delta_loc) * (1.0 + 1e-15)) : 0.0f;
}

// TierBCoefficient in fp32, for the tensor-core decode kernel's prologue (its double log, sqrt
// and divisions ran on one lane a head, on every CTA's serial path: bench/RESULTS.md thirtieth
// session). Never below TierBCoefficient's real-number value (tested against it): `neg_log_delta`
// ≥ −ln δ (TierBNegLogDelta), and no fast math in this build, so ÷ and sqrtf round correctly
// (≤ u relative) and logf is within 2 ulp.
//  * fl(S) ≥ S(1 − u), so logf(fl(S)) ≥ (ln S − 2u)(1 − 4u) for S ≥ 1 (ln S ≥ 0), and
//    fmaf(·, 1 + 16u, 4u) ≥ ln S. ln 2 is rounded up (0.693147182f). The sum of the three
//    non-negative terms rounds twice: ×(1 + 4u).
//  * ÷(6d), sqrtf and two products: ≤ 4u below, inside the ×(1 + 64u) the double form carries
//    plus 8u.
//  * The bias term: ‖q‖₁ × (kDitherBias + 260u, rounded up: 0.0019838812f) × fl(1/fl(√d)) (≤ 2u
//    below) and two products: ×(1 + 8u). The final sum: ×(1 + 4u).
WITCERT_HD inline float TierBCoefficientF(float q_norm2, float q_norm1, int32_t head_dim, int64_t num_tokens,
                                          float neg_log_delta) {
  const float u = kUnitRoundoff;
  const float ln_s = fmaf(logf(static_cast<float>(num_tokens)), 1.0f + 16.0f * u, 4.0f * u);
  const float log_term = ((ln_s + 0.693147182f) + neg_log_delta) * (1.0f + 4.0f * u);
  const float c1 = q_norm2 * sqrtf(log_term / (6.0f * static_cast<float>(head_dim))) * (1.0f + 72.0f * u);
  const float c2 = q_norm1 * 0.0019838812f * (1.0f / sqrtf(static_cast<float>(head_dim))) * (1.0f + 8.0f * u);
  return (c1 + c2) * (1.0f + 4.0f * u);
}

// log(expm1(ε)) for 0 < ε ≤ kEpsCap, accurate to a few ulp (errors budgeted in κ).
WITCERT_HD inline float LogExpm1(float eps) {
  if (eps < 1e-3f) return logf(eps) + 0.5f * eps + eps * eps * (1.0f / 24.0f);
  return logf(expm1f(eps));
}

// One split's running sums over tokens, relative to the split's max logit m.
struct CertPartial {
  float m = -INFINITY;  // max ℓ̂ over the split
  float z = 0.0f;       // Σ e^{ℓ̂−m}
  float b = 0.0f;       // Σ e^{ℓ̂−m}·(e^{ε̂}−1)      (A−1 numerator)
  float c = 0.0f;       // Σ e^{ℓ̂−m}·‖ρ‖            (value-residual numerator)
  float eps_max = 0.0f; // max ε̂
  float vmax = 0.0f;    // max ‖ṽ‖ + ‖ρ‖
  float eta_max = 0.0f; // max η (kernel logit rounding)
  int64_t count = 0;    // tokens
  int64_t chain = 0;    // longest summation chain (tokens summed sequentially)
  int32_t merges = 0;   // merge depth
  bool bad = false;     // a non-finite logit: certificate vacuous
};

// Adds one token to a partial whose `m` was already set to the split max (two-pass split).
WITCERT_HD inline void PartialAddToken(CertPartial* p, float logit, float eps_hat,
                                       float rho_norm, float vnorm_plus_rho, float eta) {
  if (!(fabsf(logit) <= 3.0e38f)) { p->bad = true; return; }
  float d1 = logit - p->m;
  float w = expf(d1);
  p->z += w;
  if (eps_hat > 0.0f) {
    if (eps_hat > kEpsCap || !(eps_hat == eps_hat)) {
      p->b = INFINITY;
    } else {
      p->b += expf(d1 + LogExpm1(eps_hat));
    }
  }
  if (rho_norm > 0.0f) p->c += w * rho_norm;
  p->eps_max = MaxAcc(p->eps_max, eps_hat);
  if (!(eps_hat == eps_hat)) p->eps_max = INFINITY;
  p->vmax = MaxAcc(p->vmax, vnorm_plus_rho);
  p->eta_max = MaxAcc(p->eta_max, eta);
  p->count += 1;
  p->chain += 1;
}

// x·e^{shift} for x ≥ 0 as one exponential (no intermediate underflow).
WITCERT_HD inline float ScaledTerm(float x, float shift) {
  if (x == 0.0f) return 0.0f;
  if (shift == 0.0f || !(x <= 3.0e38f)) return x;  // the max split stays exact; inf stays inf
  return expf(shift + logf(x));
}

// Log-sum-exp merge of two partials (§5); either may be empty.
WITCERT_HD inline CertPartial MergePartials(const CertPartial& x, const CertPartial& y) {
  if (x.count == 0) return y;
  if (y.count == 0) return x;
  CertPartial r;
  r.m = fmaxf(x.m, y.m);
  float sx = x.m - r.m, sy = y.m - r.m;
  r.z = ScaledTerm(x.z, sx) + ScaledTerm(y.z, sy);
  r.b = ScaledTerm(x.b, sx) + ScaledTerm(y.b, sy);
  r.c = ScaledTerm(x.c, sx) + ScaledTerm(y.c, sy);
  r.eps_max = fmaxf(x.eps_max, y.eps_max);
  r.vmax = fmaxf(x.vmax, y.vmax);
  r.eta_max = fmaxf(x.eta_max, y.eta_max);
  r.count = x.count + y.count;
  r.chain = x.chain > y.chain ? x.chain : y.chain;
  r.merges = (x.merges > y.merges ? x.merges : y.merges) + 1;
  r.bad = x.bad || y.bad;
  return r;
}

struct CertBound {
  float tv = 1.0f;          // min(1, (A²−1)/2, tanh(ε̂_max/2)), rounded up
  float a_minus_1 = 0.0f;   // A − 1 (sound upper bound)
  float tv_a_form = 0.0f;   // (A²−1)/2
  float tv_tanh_form = 0.0f;// tanh(ε̂_max/2)
  float v_bound = 0.0f;     // ‖o − õ‖ ≤ 2·TV·max(‖ṽ‖+‖ρ‖) + Σ p̃‖ρ‖
  float v_resid_sum = 0.0f; // Σ p̃‖ρ‖
};

// (1+θ)/(1−θ)·(1+8u) for a merged partial (see the header comment).
WITCERT_HD inline double SumInflation(int64_t chain, int32_t merges) {
  const double u = kUnitRoundoff;
  double gn = chain * u / (1.0 - chain * u);
  double gp = (merges + 1) * u / (1.0 - (merges + 1) * u);
  double theta = (1.0 + kKappa) * (1.0 + kKappa) * (1.0 + gn) * (1.0 + gp);
  for (int32_t i = 0; i < merges; ++i) theta *= 1.0 + kKappa;
  theta -= 1.0;
  return (1.0 + theta) / (1.0 - theta) * (1.0 + 8.0 * u);
}

// Final certificate of a fully merged partial. `num_splits` = P (leaves merged).
WITCERT_HD inline CertBound FinalizeCert(const CertPartial& p, int32_t num_splits) {
  CertBound r;
  if (p.count == 0) {
    r.tv = 0.0f;
    return r;
  }
  if (p.bad || !(p.z >= 1.0f)) {
    r.tv = 1.0f;
    r.a_minus_1 = INFINITY;
    r.tv_a_form = INFINITY;
    r.tv_tanh_form = 1.0f;
    r.v_bound = INFINITY;
    r.v_resid_sum = INFINITY;
    return r;
  }
  double f = SumInflation(p.chain, p.merges) * exp(2.0 * static_cast<double>(p.eta_max)) *
             (1.0 + 8.0 * kUnitRoundoff);
  double slack = static_cast<double>(p.count + num_splits) * 2.8e-45;  // (S+P)·2^-148
  double am1 = 0.0;
  if (p.b > 0.0f || p.eps_max > 0.0f) am1 = static_cast<double>(p.b) / p.z * f + slack;
  double tv_a = am1 + 0.5 * am1 * am1;
  double tv_tanh = tanh(0.5 * static_cast<double>(p.eps_max)) * (1.0 + 8.0 * kUnitRoundoff);
  double tv = tv_a < tv_tanh ? tv_a : tv_tanh;
  if (!(tv <= 1.0)) tv = 1.0;  // also catches NaN
  double vsum = 0.0;
  if (p.c > 0.0f) {
    vsum = static_cast<double>(p.c) / p.z * f + slack * p.vmax;
  }
  double vb = (2.0 * tv * p.vmax + vsum) * (1.0 + 8.0 * kUnitRoundoff);
  r.a_minus_1 = RoundUpToFloat(am1);
  r.tv_a_form = RoundUpToFloat(tv_a);
  r.tv_tanh_form = RoundUpToFloat(tv_tanh);
  r.tv = RoundUpToFloat(tv);
  if (r.tv > 1.0f) r.tv = 1.0f;
  r.v_resid_sum = RoundUpToFloat(vsum);
  r.v_bound = RoundUpToFloat(vb);
  return r;
}

// ‖o − õ‖'s bound relative to ‖õ‖ (what the gate's v_threshold is compared with): ∞ when õ = 0
// and the bound is not.
WITCERT_HD inline float RelativeValueBound(float v_bound, float out_norm) {
  return out_norm > 0.0f ? v_bound / out_norm : (v_bound > 0.0f ? INFINITY : 0.0f);
}

// The gate's rule (certificates.md §6): certified when TV ≤ tv_threshold and, if v_threshold > 0,
// the relative value bound ≤ v_threshold. A NaN bound is never certified.
WITCERT_HD inline bool CellCertified(float tv, float rel_v, float tv_threshold, float v_threshold) {
  return tv <= tv_threshold && (v_threshold <= 0.0f || rel_v <= v_threshold);
}

}  // namespace witcert::meter
