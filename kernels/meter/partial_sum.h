// Helpers a parallel kernel needs on top of cert_math.h, kept beside it so CPU tests can
// check them against the serial forms.
//
// SumPartialsSameMax: a split reduced by many threads gives each thread a CertPartial over a
// subset of the split's tokens, all relative to the SAME split max m (set before the first
// PartialAddToken). Adding their sums is a re-association of the split's sums: recursive
// summation of n non-negative terms in any order/tree has relative error ≤ γ_{n−1}, so the
// combined chain = Σ chains (= the token count) keeps SumInflation's γ_chain sound and the
// result is the same leaf the serial two-pass split produces (merges unchanged, no rescale).
//
// (The dither's DitherTokenHash / DitherFromTokenHash live in dither_hash.h, which this
// header includes for the kernels that use them.)
#pragma once

#include <math.h>
#include <stdint.h>

#include "kernels/meter/cert_math.h"
#include "kernels/meter/dither_hash.h"
#include "kernels/meter/hd.h"

namespace witcert::meter {

// x and y must share m (or be empty).
WITCERT_HD inline CertPartial SumPartialsSameMax(const CertPartial& x, const CertPartial& y) {
  if (x.count == 0) return y;
  if (y.count == 0) return x;
  CertPartial r = x;
  r.z = x.z + y.z;
  r.b = x.b + y.b;
  r.c = x.c + y.c;
  r.eps_max = fmaxf(x.eps_max, y.eps_max);
  r.vmax = fmaxf(x.vmax, y.vmax);
  r.eta_max = fmaxf(x.eta_max, y.eta_max);
  r.count = x.count + y.count;
  r.chain = x.chain + y.chain;
  r.merges = x.merges > y.merges ? x.merges : y.merges;
  r.bad = x.bad || y.bad;
  return r;
}

// An upper bound on expm1(ε) for 0 ≤ ε ≤ 1/2 in five fmas (the tensor-core kernel's A−1 term;
// expm1f costs about four times as many instructions). Taylor: expm1(ε) = ε + ε²/2 + ε³/6 +
// ε⁴/24 + ε⁵e^ξ/120 with ξ ≤ ε ≤ ½, so P(ε) = ε(1 + ε(½ + ε(1/6 + ε(1/24 + ε·c5)))) with
// c5 ≥ e^½/120 and every coefficient rounded up is ≥ expm1(ε). All terms are non-negative,
// so each of the five roundings is relative (≤ u): the computed value is ≥ P·(1−u)^5, and the
// final ×(1 + 8u) (itself rounded) restores ≥ P. Overshoot: ≤ ε⁴(e^½−1)/120 + 14u relative,
// i.e. ≤ 0.04% at ε = ½ (tested against long double). A subnormal ε·h can fall short of the
// true value by < 2^-149, inside cert_math.h's per-term absolute slack.
WITCERT_HD inline float Expm1UpperSmall(float eps) {
  float h = fmaf(eps, 0.013739594f, 0.041666672f);  // e^½/120 and 1/24, rounded up
  h = fmaf(eps, h, 0.16666667f);                    // 1/6 rounded up
  h = fmaf(eps, h, 0.5f);
  h = fmaf(eps, h, 1.0f);
  return (eps * h) * (1.0f + 8.0f * kUnitRoundoff);
}

// The A−1 terms of a thread's common tokens (0 ≤ ε̂ ≤ ½, w ≥ 2^-100) as three running power sums
// instead of one rounded term each: the tensor-core decode kernel's per-token step is then two
// products, two additions and an fma instead of Expm1UpperSmall's five fmas and three products and
// an addition. For 0 ≤ ε ≤ ½, expm1(ε) ≤ ε + ε²/2 + C3·ε³ with C3 = 8(e^½ − 1 − ½ − ⅛): the
// remainder (expm1(ε) − ε − ε²/2)/ε³ increases with ε. So Σ_t w_t·expm1(ε_t) ≤ S1 + S2/2 + C3·S3,
// S_k = Σ_t w_t·ε_t^k. Overshoot against expm1: ≤ (C3 − ⅙)·ε² ≤ 0.58% of the term at ε = ½, and
// 0.06% at ε = 0.16 (Expm1UpperSmall's: 0.04% at ½).
// Rounding: each S_k is a recursive sum of non-negative terms, so its chain error is SumInflation's
// γ, as for the single sum it replaces (a term's path through its thread's sum and the reduction
// tree still has at most count − 1 additions). The terms themselves fall short by ≤ 2u (the
// rounded products w·ε and (w·ε)·ε; the last product is exact inside the fma), and Bound()
// rounds three times more (two fmas, one product), so (1 − u)^5·(1 + 8u) ≥ 1 restores an upper
// bound. A subnormal product loses < 2^-150 absolute; all of a token's together stay < 2^-148,
// cert_math.h's per-term absolute slack.
constexpr float kExpm1CubeCoef = 0.189770177f;  // 8(e^½ − 13/8) rounded up
struct EpsPowerSums {
  float s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  // w = 0 and ε = 0 (a skipped or masked token, selected to zeros by the caller) add exact zeros.
  WITCERT_HD void Add(float w, float eps) {
    const float a = w * eps;
    const float b = a * eps;
    s1 += a;
    s2 += b;
    s3 = fmaf(b, eps, s3);
  }
  // ≥ Σ_t w_t·expm1(ε_t) over the added tokens (up to the chain's γ, as above).
  WITCERT_HD float Bound() const {
    return fmaf(kExpm1CubeCoef, s3, fmaf(0.5f, s2, s1)) * (1.0f + 8.0f * kUnitRoundoff);
  }
};

// The CPU reference's upper bound on expm1(ε) for 0 ≤ ε ≤ 1/2: Expm1UpperSmall's argument
// carried to ε⁶, so it overshoots by ≤ ε⁶·e^½/5040 + 18u relative (≤ 4·10⁻⁶ at ε = ½,
// tested against long double) instead of 0.04%, in six fmas (expm1f costs ~45 instructions
// a call; this one runs eight lanes at a time). Taylor: expm1(ε) = Σ_{k≤6} ε^k/k! +
// ε⁷e^ξ/5040, ξ ≤ ½, so P(ε) = ε(1 + ε(½ + ε(1/6 + ε(1/24 + ε(1/120 + ε(1/720 + ε·c7))))))
// with c7 ≥ e^½/5040 and every coefficient rounded up is ≥ expm1(ε). All terms are ≥ 0, so
// the seven roundings are relative (≤ u each) and the final ×(1 + 10u) (exact in float,
// itself rounded once more) restores ≥ P: (1−u)^8·(1+10u) > 1. A subnormal ε·h can fall
// short by < 2^-149, inside cert_math.h's per-term absolute slack.
// Its coefficients (Horner order, highest first), named so an eight-lane copy of the
// polynomial uses the very same values.
constexpr float kTightC7 = 3.2713e-4f;     // e^½/5040 rounded up
constexpr float kTightC6 = 1.3888900e-3f;  // 1/720 rounded up
constexpr float kTightC5 = 8.3333340e-3f;  // 1/120 rounded up
constexpr float kTightC4 = 0.041666672f;   // 1/24 rounded up
constexpr float kTightC3 = 0.16666667f;    // 1/6 rounded up
constexpr float kTightFinal = 1.0f + 10.0f * kUnitRoundoff;
WITCERT_HD inline float Expm1UpperTight(float eps) {
  float h = fmaf(eps, kTightC7, kTightC6);
  h = fmaf(eps, h, kTightC5);
  h = fmaf(eps, h, kTightC4);
  h = fmaf(eps, h, kTightC3);
  h = fmaf(eps, h, 0.5f);
  h = fmaf(eps, h, 1.0f);
  return (eps * h) * kTightFinal;
}

// ≥ e^ε − 1 for every ε ≥ 0: Expm1UpperTight up to ½; above, expm1f (within 2 ulp, this
// header's function model: ≤ 4u relative) times (1 + 8u), which also covers the product's own
// rounding. ∞ past kEpsCap or for NaN (a vacuous A form, as PartialAddToken makes it).
WITCERT_HD inline float Expm1Upper(float eps) {
  if (!(eps <= kEpsCap)) return INFINITY;
  if (eps <= 0.5f) return Expm1UpperTight(eps > 0.0f ? eps : 0.0f);
  return expm1f(eps) * (1.0f + 8.0f * kUnitRoundoff);
}

// Tier B's split-max form. Where every token of a split has ε̂_t ≤ eps_max and ρ_t ≤ rho_max,
// Σ_t w_t·(e^{ε̂_t} − 1) ≤ z·expm1(eps_max) and Σ_t w_t·ρ_t ≤ z·rho_max for the very weights
// w_t that make z. So the split's b and c follow from its z and two maxima, with no per-token
// A − 1 or value term. FinalizeCert divides by the same z, so A − 1 ≥ expm1(eps_max) there,
// which is ≥ the per-token sum's A − 1 for any weights. With eps_max = C·max_t s_t (Tier B's
// u_t from the split's largest key scale) the tensor-core int8-dither kernel gets the
// certificate from the scale maximum it takes anyway for η. It is looser than the per-token
// sum where the largest scales carry little attention weight.
// Rounding: b and c are products of non-negative floats, each rounded to nearest (≤ u
// relative while normal; z ≥ 1 for a split that ran), then ×(1 + 4u): ≥ the exact products.
// `p` must hold the split's z and its eps_max (NaN: ∞, vacuous).
WITCERT_HD inline void SetSplitMaxSums(CertPartial* p, float eps_max, float rho_max) {
  if (!(eps_max == eps_max)) eps_max = INFINITY;
  p->eps_max = eps_max;
  const float x = Expm1Upper(eps_max);
  p->b = x == INFINITY ? INFINITY : (p->z * x) * (1.0f + 4.0f * kUnitRoundoff);
  p->c = rho_max > 0.0f ? (p->z * rho_max) * (1.0f + 4.0f * kUnitRoundoff) : 0.0f;
}

// PartialAddToken (cert_math.h) for a caller that already holds w = expf(logit − p->m), the
// very value PartialAddToken would compute (the pipelined kernel computes it once for the
// output weights and the certificate). max(‖ṽ‖+‖ρ‖) is left to the caller (p->vmax).
//
// The A−1 term e^{d1}·(e^{ε̂}−1) is formed as fl(w·expm1f(ε̂)) instead of
// expf(d1 + log(expm1(ε̂))) when w ≥ 2^-100: two transcendental calls fewer. Soundness
// against cert_math.h's budget κ = 1024u per term: d1 = fl(ℓ̂ − m) with |d1| ≤ 168 for
// terms that matter carries ≤ 168u absolute error, i.e. a factor e^{±168u}; expf and expm1f
// are within 2 ulp (≤ 4u relative each); the product rounds once (u): in all ≤ 178u(1+u) <
// κ. w ≥ 2^-100 keeps w normal, so these relative bounds hold; the product itself can only
// underflow when the true term is < 2^-126·(1+κ), and an underflowed term is off by ≤ 2^-149,
// the absolute slack cert_math.h already grants every term. Below 2^-100 the original form
// is used.
//
// WeightedEpsTerm is that term alone (INFINITY when ε̂ > kEpsCap or NaN: the A form is then
// vacuous). For ε̂ ≤ ½ the factor expm1(ε̂) may come from a polynomial upper bound instead of
// expm1f: kUpperSmall (Expm1UpperSmall, the tensor-core kernels) or kUpperTight
// (Expm1UpperTight, the CPU reference). Both are ≥ expm1, so the term then errs below the
// truth only by w's and the product's rounding, which κ's budget covers.
enum class Expm1Form { kLibm, kUpperSmall, kUpperTight };
constexpr float kMinDirectWeight = 7.888609052210118e-31f;  // 2^-100: below, the log form

template <Expm1Form kForm = Expm1Form::kLibm>
WITCERT_HD inline float WeightedEpsTerm(float logit, float m, float w, float eps_hat) {
  if (eps_hat > kEpsCap || !(eps_hat == eps_hat)) return INFINITY;
  if (w >= kMinDirectWeight) {
    if (kForm == Expm1Form::kUpperSmall && eps_hat <= 0.5f) return w * Expm1UpperSmall(eps_hat);
    if (kForm == Expm1Form::kUpperTight && eps_hat <= 0.5f) return w * Expm1UpperTight(eps_hat);
    return w * expm1f(eps_hat);
  }
  return expf((logit - m) + LogExpm1(eps_hat));
}

template <Expm1Form kForm = Expm1Form::kLibm>
WITCERT_HD inline void PartialAddTokenWeighted(CertPartial* p, float logit, float w, float eps_hat,
                                               float rho_norm, float eta) {
  if (!(fabsf(logit) <= 3.0e38f)) { p->bad = true; return; }
  p->z += w;
  if (eps_hat > 0.0f) p->b += WeightedEpsTerm<kForm>(logit, p->m, w, eps_hat);
  if (rho_norm > 0.0f) p->c += w * rho_norm;
  p->eps_max = MaxAcc(p->eps_max, eps_hat);
  if (!(eps_hat == eps_hat)) p->eps_max = INFINITY;
  p->eta_max = MaxAcc(p->eta_max, eta);
  p->count += 1;
  p->chain += 1;
}

// Whether a token takes WeightedEpsTerm's common case: a finite logit, 0 ≤ ε̂ ≤ ½ and, where
// ε̂ > 0, a weight in the direct form (w ≥ 2^-100, not the log form). NaN fails every comparison.
// (direct_weight: the weight is in the direct form, however the caller knows it.)
WITCERT_HD inline bool TokenIsCommon(float logit, float eps_hat, bool direct_weight) {
  return fabsf(logit) <= 3.0e38f && eps_hat >= 0.0f && eps_hat <= 0.5f && (eps_hat == 0.0f || direct_weight);
}
WITCERT_HD inline bool WeightedTokenIsCommon(float logit, float w, float eps_hat) {
  return TokenIsCommon(logit, eps_hat, w >= kMinDirectWeight);
}

// WeightedTokenIsCommon for w = expf(gap), gap = logit − m, decided from the gap instead of the
// weight, so the GPU kernels' per-token test does not wait for the exponential: gap ≥ −69
// gives w ≥ e^-69 ≈ 1.08·10⁻³⁰ > 2^-100 with a 37% margin over expf's few-ulp error, so a token
// this calls common is common; the few it calls rare (gap in [−69.3, −69)) take the general
// arithmetic, which is right for any token (tested against WeightedTokenIsCommon).
constexpr float kMinDirectGap = -69.0f;
WITCERT_HD inline bool WeightedTokenIsCommonAtGap(float logit, float gap, float eps_hat) {
  return TokenIsCommon(logit, eps_hat, gap >= kMinDirectGap);
}

// A token past the common case only by its ε̂: a finite logit, ½ < ε̂ ≤ kEpsCap and a direct weight
// (gap ≥ kMinDirectGap). Its A−1 term is w·expm1(ε̂), which Expm1Mid forms without expm1f's
// branches: fl(expf(ε̂) − 1). expf errs by ≤ 2 ulp (≤ 4u of e^ε̂) and e^ε̂ ≥ e^½, so the difference
// errs by ≤ 4u·e^½/(e^½ − 1) + u < 11.2u of expm1(ε̂) against expm1f's 4u: the term's budget
// (WeightedEpsTerm above: ≤ 178u of κ = 1024u) becomes ≤ 186u. The GPU kernels take these tokens
// branch-free too (kivi2's ε̂ is mostly past ½: they had been most of its rare tokens).
WITCERT_HD inline bool WeightedTokenIsMidAtGap(float logit, float gap, float eps_hat) {
  return fabsf(logit) <= 3.0e38f && eps_hat > 0.5f && eps_hat <= kEpsCap && gap >= kMinDirectGap;
}
WITCERT_HD inline float Expm1Mid(float eps_hat) { return expf(eps_hat) - 1.0f; }

// PartialAddTokenWeighted<kUpperSmall>(p, logit, w, eps_hat, rho, 0) for a token where
// WeightedTokenIsCommon holds, or nothing where !active, without branches (the GPU kernels'
// per-token step): a skipped term is selected to +0, and x + 0 = x for the non-negative sums.
// An inactive token's ε̂ and ρ may be garbage (inf, NaN): they are selected away before any
// product, so no 0·inf reaches the sums.
WITCERT_HD inline void PartialAddTokenCommon(CertPartial* p, bool active, float w, float eps_hat, float rho) {
  const float wz = active ? w : 0.0f;
  const float ez = active ? eps_hat : 0.0f;
  const float rz = active && rho > 0.0f ? rho : 0.0f;
  p->z += wz;
  p->b += wz * Expm1UpperSmall(ez);
  p->c += wz * rz;
  p->eps_max = active ? MaxAcc(p->eps_max, eps_hat) : p->eps_max;
  p->count += active ? 1 : 0;
  p->chain += active ? 1 : 0;
}

}  // namespace witcert::meter
