// Exact integer dot products for int8 codes: the arithmetic of the tensor-core decode kernel
// (kernels/cuda/metered_decode_int8_mma.cuh), shared with the CPU tests that check its bound.
//
// Why digits: int8 tensor-core MMAs (s8 × s8 → s32) are exact, but the query is fp32. Write
// each query channel, after a power-of-two scaling, as four signed base-128 digits,
//   q̄_c = q_c · 2^{6−k} = d0 + d1/128 + d2/128² + d3/128³ + r_c,   |r_c| ≤ 2^-22,
// where 2^{k−1} ≤ max|q| < 2^k (so |q̄| < 64 and every digit fits in int8). Then
// D_j = Σ_c d_{j,c} x_c is an exact int32 for int8 codes x (|D_j| ≤ 128·64·128 < 2^24, so it
// is also exact as a float), and the kernel's logit is
//   ℓ̂ = fl(fl(T̂ · s) · qscale),  T̂ = fl-Horner((D3·2^-7 + D2)·2^-7 + D1)·2^-7 + D0 (3 fmas),
// with qscale = 2^{k−6}·fl(1/√d) and s the token's bf16 key scale.
//
// The bound (η of cert_math.h, the kernel's own logit rounding): against ℓ̃ = s·(q·x)/√d,
//  * digit truncation: |Σ_c r_c x_c| ≤ 2^-22·‖x‖₁;
//  * Horner with fmas: |T̂ − T| ≤ γ_3·Σ_j |D_j|·128^{-j} ≤ γ_3·Σ_c |x_c|(|q̄_c| + 1.004)
//    (|d0| ≤ |q̄| + ½, |d1|/128 ≤ ½, |d2|/128² ≤ 2^-8, |d3|/128³ ≤ 2^-15);
//  * the two products and fl(1/√d): relative (1+u)²(1+2u) on |T̂|; an underflowed product
//    adds ≤ 2^-149 (times qscale for the first).
// With |x_c| ≤ 128 (an int8 code; RTN writes ≤ 127) and ‖q̄‖₁ = 2^{6−k}‖q‖₁:
//   η ≤ s/√d · 128 · [7.1u·(‖q‖₁ + 1.004·d·2^{k−6}) + 2^{k−28}·d] + 2^-149·(1 + qscale)·2,
// where 7.1u ≥ γ_3 + 4.01u·(1+γ_3). It grows with s, so the maximum key scale of a split
// gives one η for the whole split (cert_math.h only uses max_t η_t).
#pragma once

#include <math.h>
#include <stdint.h>

#include "kernels/meter/cert_math.h"
#include "kernels/meter/hd.h"

namespace witcert::meter {

// Exponents outside this range make the kernel mark its certificate vacuous (bad): the
// scalings below then stay normal floats and no product overflows.
constexpr int32_t kDigitExpMin = -90, kDigitExpMax = 120;

// k with 2^{k−1} ≤ amax < 2^k (amax > 0, finite).
WITCERT_HD inline int32_t DigitExponent(float amax) {
  int32_t k = 0;
  frexpf(amax, &k);
  return k;
}

// The first `n` base-128 digits of x (|x| < 64, n ≤ 6); every step is exact in double. After
// n digits the residual x − Σ_j d_j·128^{-j} is at most ½·128^{1−n} in magnitude.
WITCERT_HD inline void SplitIntoDigitsN(double x, int32_t n, int8_t* d) {
  double r = x;
  for (int32_t j = 0; j < n; ++j) {
    const double dj = rint(r);
    d[j] = static_cast<int8_t>(dj);
    r = (r - dj) * 128.0;
  }
}

// The four base-128 digits of x (|x| < 64).
WITCERT_HD inline void SplitIntoDigits(double x, int8_t* d) { SplitIntoDigitsN(x, 4, d); }

// T̂ from the four exact digit dots, in the kernel's order (lanes holding D2, D3 form the
// first fma and pass it on).
WITCERT_HD inline float CombineDigitDots(int32_t d0, int32_t d1, int32_t d2, int32_t d3) {
  const float p23 = fmaf(static_cast<float>(d3), 0.0078125f, static_cast<float>(d2));
  return fmaf(fmaf(p23, 0.0078125f, static_cast<float>(d1)), 0.0078125f, static_cast<float>(d0));
}

// The three-digit variant (a kernel that keeps fewer query registers): digits d0..d2, residual
// ≤ 2^-15 per channel, T̂ = fl-Horner((D2·2^-7 + D1)·2^-7 + D0) with two fmas. Its η is up to
// ~1.5× the fp32 dot's on dense codes (tests/kernels/meter/int_digit_dot_test.cc), where four
// digits are ~8× below it: no kernel uses it yet.
WITCERT_HD inline float CombineDigitDots3(int32_t d0, int32_t d1, int32_t d2) {
  return fmaf(fmaf(static_cast<float>(d2), 0.0078125f, static_cast<float>(d1)), 0.0078125f,
              static_cast<float>(d0));
}

// qscale = 2^{k−6}·fl(1/√d).
WITCERT_HD inline float DigitQueryScale(int32_t k, float inv_sqrt_d) {
  return ldexpf(inv_sqrt_d, k - 6);
}

// η for every token of a split whose key scales are ≤ smax, for a query split into `digits`
// digits (4: the header comment's bound; 3: truncation 2^{k−21}·d instead of 2^{k−28}·d, the
// residual being 2^-15 instead of 2^-22, and Horner γ_2 instead of γ_3: with the products'
// roundings 6.1u ≥ γ_2 + 4.01u·(1+γ_2)).
//   η ≤ s/√d · 128 · [c·u·(‖q‖₁ + 1.004·d·2^{k−6}) + 2^{k−7·digits}·d] + 2^-149·(1 + qscale)·2
// with c = `horner_c` (7.1 four digits, 6.1 three, 8.2 the dither keys' terms below).
// η is affine in s, so a kernel that knows the query before the split's scale maximum takes
// the query's part first (IntDigitEtaCoefficients, double) and finishes it with one fma
// (IntDigitEtaAt): η = RoundUp((s·a + b)·(1 + 10^-6)). The 10^-6 covers the few double roundings
// of either grouping (each ≤ 2^-53 relative).
constexpr double kIntDigitHornerC4 = 7.1, kIntDigitHornerC3 = 6.1, kIntDigitHornerCDither = 8.2;
// Keys of at most kIntDigitKeyMaxInt8 in magnitude (int8 codes; the bound's "128"), or
// kIntDigitKeyMaxInt4 (int4-rtn's n − 8 ∈ [−8, 7], IntDigitEtaInt4 below).
constexpr double kIntDigitKeyMaxInt8 = 128.0, kIntDigitKeyMaxInt4 = 8.0;
struct IntDigitEtaCoef {
  double a = 0.0;  // per unit of key scale
  double b = 0.0;  // the subnormal slack; 0 only for a zero query (η = 0)
};
WITCERT_HD inline IntDigitEtaCoef IntDigitEtaCoefficients(double horner_c, int32_t digits, double q_norm1,
                                                          int32_t k, int32_t head_dim, float qscale,
                                                          double key_max = kIntDigitKeyMaxInt8) {
  IntDigitEtaCoef r;
  if (qscale == 0.0f) return r;  // a zero query: every logit is exactly 0
  const double u = kUnitRoundoff;
  const double p = ldexp(1.0, k - 6);
  r.a = key_max / sqrt(static_cast<double>(head_dim)) *
        (horner_c * u * (q_norm1 + 1.004 * head_dim * p) + ldexp(1.0, k - 7 * digits) * head_dim);
  r.b = 2.0 * 1.401298464324817e-45 * (1.0 + static_cast<double>(qscale));
  return r;
}
WITCERT_HD inline float IntDigitEtaAt(const IntDigitEtaCoef& c, float smax) {
  if (c.b == 0.0) return 0.0f;
  return RoundUpToFloat(fma(static_cast<double>(smax), c.a, c.b) * (1.0 + 1e-6));
}
WITCERT_HD inline float IntDigitEtaWith(double horner_c, int32_t digits, double q_norm1, int32_t k,
                                        int32_t head_dim, float smax, float qscale) {
  return IntDigitEtaAt(IntDigitEtaCoefficients(horner_c, digits, q_norm1, k, head_dim, qscale), smax);
}
WITCERT_HD inline float IntDigitEtaN(int32_t digits, double q_norm1, int32_t k, int32_t head_dim,
                                     float smax, float qscale) {
  return IntDigitEtaWith(digits == 4 ? kIntDigitHornerC4 : kIntDigitHornerC3, digits, q_norm1, k, head_dim,
                         smax, qscale);
}

// int8-dither keys (dither_hash.h): x_c = m_c − ξ_c with ξ_c = (b_c + ½)/256 − ½ = (e_c + ½)/256,
// e_c = b_c − 128 an int8 (the dither byte with its top bit flipped). So 512·x_c = 512·m_c − 2·e_c − 1
// and, with the digit dots Dm_j = Σ_c d_{j,c} m_c, De_j = Σ_c d_{j,c} e_c (both exact int8 MMAs)
// and the digit sums S_j = Σ_c d_{j,c},
//   F_j = 512·Dm_j − 2·De_j − S_j   (exact in int32: |F_j| ≤ 128·64·(512·127 + 257) < 2^30)
// gives Σ_j F_j·128^{-j} = 512·Σ_c (q̄_c − r_c)·x_c. The kernel combines the F_j exactly as
// CombineDigitDots combines the D_j and scales by qscale·2^-9 (DitherQueryScale, exact). The
// bound is IntDigitEta's with |x_c| ≤ 127.5 < 128, plus the conversions fl(F_j), no longer exact:
// u·Σ_j |F_j|·128^{-j} more, so c = 8.2 ≥ 7.1 + u(1 + γ_4)/u.
WITCERT_HD inline int32_t DitherDigitTerm(int32_t dot_codes, int32_t dot_dither, int32_t digit_sum) {
  return dot_codes * 512 - 2 * dot_dither - digit_sum;
}
WITCERT_HD inline float DitherQueryScale(float qscale) { return qscale * 0.001953125f; }
WITCERT_HD inline float IntDigitEtaDither(double q_norm1, int32_t k, int32_t head_dim, float smax,
                                          float qscale) {
  return IntDigitEtaWith(kIntDigitHornerCDither, 4, q_norm1, k, head_dim, smax, qscale);
}

// int4-rtn keys (group scales, 32 channels a group): x_c = s_g·n_c with n_c ∈ [−8, 7] and a bf16
// s_g per (token, group g). A kernel forms, per group, the exact digit dots D_{g,j} = Σ_{c∈g}
// d_{j,c}·n_c (int8 MMAs, |D| ≤ 32·64·8) and T̂_g = CombineDigitDots(D_g), then
//   L̂ = fma(s_3, T̂_3, fma(s_2, T̂_2, fma(s_1, T̂_1, fl(s_0·T̂_0)))),   ℓ̂ = fl(L̂·qscale)
// (Int4GroupLogitSum). Against ℓ̃ = 2^{k−6}/√d·Σ_g s_g Σ_{c∈g} q̄_c n_c, with s = max_g s_g:
//  * digit truncation: Σ_g s_g Σ_{c∈g} |r_c|·|n_c| ≤ s·8·d·2^-22;
//  * each group's Horner: γ_3·Σ_j |D_{g,j}|·128^{-j} ≤ γ_3·Σ_{c∈g} |n_c|(|q̄_c| + 1.004), times s_g;
//  * the group chain: ≤ γ_4·Σ_g s_g·|T̂_g| ≤ γ_4(1 + γ_3)·s·8·Σ_c (|q̄_c| + 2^-22);
//  * the product with qscale and fl(1/√d): ≤ 3u(1 + γ_4)(1 + γ_3) of the same;
// so IntDigitEta's form with |x| ≤ 8 and c·u ≥ γ_3 + γ_4(1 + γ_3) + 3u(1 + γ_4)(1 + γ_3):
// c = 10.1 (taken as 10.2). η grows with s, so the largest group scale a kernel read gives one η.
constexpr double kIntDigitHornerCInt4 = 10.2;
WITCERT_HD inline float Int4GroupLogitSum(const float (&t_hat)[4], const float (&s)[4]) {
  float l = s[0] * t_hat[0];
  l = fmaf(s[1], t_hat[1], l);
  l = fmaf(s[2], t_hat[2], l);
  return fmaf(s[3], t_hat[3], l);
}
WITCERT_HD inline float IntDigitEtaInt4(double q_norm1, int32_t k, int32_t head_dim, float smax, float qscale) {
  return IntDigitEtaAt(IntDigitEtaCoefficients(kIntDigitHornerCInt4, 4, q_norm1, k, head_dim, qscale,
                                               kIntDigitKeyMaxInt4),
                       smax);
}

// The four-digit η of the tensor-core kernels.
WITCERT_HD inline float IntDigitEta(double q_norm1, int32_t k, int32_t head_dim, float smax,
                                    float qscale) {
  return IntDigitEtaN(4, q_norm1, k, head_dim, smax, qscale);
}

}  // namespace witcert::meter
