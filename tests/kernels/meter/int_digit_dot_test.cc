// The tensor-core kernel's logit arithmetic (kernels/meter/int_digit_dot.h), replayed on the
// CPU operation for operation: digit split, exact int dots, the three fmas, the two products.
// Property: |ℓ̂ − s·(q·x)/√d| ≤ IntDigitEta for every query/code/scale drawn, including
// adversarial ones (outlier channels, tiny and huge magnitudes, saturated codes, mixed signs);
// truth in long double. And the bound is informative: far below the fp32 dot's η.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/dither_hash.h"
#include "kernels/meter/int_digit_dot.h"
#include "kernels/meter/partial_sum.h"

namespace witcert::meter {
namespace {

float Bf16Round(float x) {  // nearest bf16 (the scales the write path stores are bf16)
  uint32_t b;
  std::memcpy(&b, &x, 4);
  b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &b, 4);
  return r;
}

struct Replay {
  float logit;       // what the kernel computes
  long double truth; // s·(q·x)/√d
  float eta;
};

// The query's scalars as the kernels take them: max|q|, ‖q‖₁, the digit exponent k and the
// scaling 2^{6−k} (0 for a zero query), fl(1/√d).
struct QueryScalars {
  float amax = 0.0f;
  double n1 = 0.0;
  int k = 0;
  double sc = 0.0;
  float inv_sqrt_d = 0.0f;
};
QueryScalars ScalarsOf(const std::vector<float>& q) {
  QueryScalars r;
  for (float v : q) {
    r.amax = std::fmax(r.amax, std::fabs(v));
    r.n1 += std::fabs(static_cast<double>(v));
  }
  r.inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(q.size()));
  r.k = r.amax > 0.0f ? DigitExponent(r.amax) : 0;
  r.sc = r.amax > 0.0f ? std::ldexp(1.0, 6 - r.k) : 0.0;
  return r;
}

// `digits` 4: the tensor-core kernels' arithmetic; 3: the three-digit variant.
Replay ReplayKernelLogit(const std::vector<float>& q, const std::vector<int8_t>& x, float s,
                         int digits = 4) {
  const int d = static_cast<int>(q.size());
  const QueryScalars qs = ScalarsOf(q);
  const float amax = qs.amax, inv_sqrt_d = qs.inv_sqrt_d;
  const double n1 = qs.n1, sc = qs.sc;
  const int k = qs.k;
  int64_t D[4] = {0, 0, 0, 0};
  for (int c = 0; c < d; ++c) {
    int8_t dg[4] = {0, 0, 0, 0};
    SplitIntoDigitsN(q[c] * sc, digits, dg);
    for (int j = 0; j < digits; ++j) D[j] += static_cast<int64_t>(dg[j]) * x[c];
  }
  const float qscale = amax > 0.0f ? DigitQueryScale(k, inv_sqrt_d) : 0.0f;
  const float t = digits == 4
                      ? CombineDigitDots(static_cast<int32_t>(D[0]), static_cast<int32_t>(D[1]),
                                         static_cast<int32_t>(D[2]), static_cast<int32_t>(D[3]))
                      : CombineDigitDots3(static_cast<int32_t>(D[0]), static_cast<int32_t>(D[1]),
                                          static_cast<int32_t>(D[2]));
  Replay r;
  r.logit = (t * s) * qscale;
  long double dot = 0.0L;
  for (int c = 0; c < d; ++c) dot += static_cast<long double>(q[c]) * x[c];
  r.truth = dot * s / std::sqrt(static_cast<long double>(d));
  r.eta = digits == 4 ? IntDigitEta(n1, k, d, s, qscale) : IntDigitEtaN(3, n1, k, d, s, qscale);
  return r;
}

TEST(IntDigitDot, DigitsReconstructTheQueryTo2PowMinus22) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-64.0, 64.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = (i % 3 == 0) ? u(rng) * std::exp2(-static_cast<int>(rng() % 40)) : u(rng);
    if (!(std::fabs(x) < 64.0)) continue;
    int8_t d[4];
    SplitIntoDigits(x, d);
    ASSERT_LE(std::abs(d[0]), 64);
    for (int j = 1; j < 4; ++j) ASSERT_LE(std::abs(d[j]), 64);
    const double back = d[0] + d[1] / 128.0 + d[2] / 16384.0 + d[3] / 2097152.0;
    ASSERT_LE(std::fabs(back - x), std::ldexp(1.0, -22)) << x;
  }
}

class IntDigitDotDigits : public ::testing::TestWithParam<int> {};

TEST_P(IntDigitDotDigits, EtaBoundsTheKernelLogitError) {
  const int digits = GetParam();
  std::mt19937 rng(11 + digits);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> code(-127, 127);
  double worst = 0.0, tight = 0.0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int d = (trial % 2) ? 128 : 64;
    std::vector<float> q(d);
    std::vector<int8_t> x(d);
    const float qmag = std::exp2(static_cast<float>(static_cast<int>(rng() % 60) - 30));
    for (int c = 0; c < d; ++c) {
      q[c] = g(rng) * qmag;
      x[c] = static_cast<int8_t>(code(rng));
    }
    switch (trial % 7) {
      case 0: q[rng() % d] *= 1000.0f; break;                       // outlier query channel
      case 1: for (auto& v : x) v = (rng() & 1) ? 127 : -128; break;  // saturated codes
      case 2: for (int c = 0; c < d; ++c) x[c] = q[c] > 0 ? 127 : -127; break;  // aligned: |q·x| = 127‖q‖₁
      case 3: for (int c = 0; c < d; c += 2) q[c] *= 1e-6f; break;   // tiny channels beside large
      case 4: for (int c = 0; c < d; ++c) x[c] = static_cast<int8_t>(c % 2 ? 127 : -127); break;  // cancellation
      default: break;
    }
    const float s = Bf16Round(std::exp2(static_cast<float>(static_cast<int>(rng() % 40) - 20)) * (1.0f + (rng() % 128) / 128.0f));
    const Replay r = ReplayKernelLogit(q, x, s, digits);
    const long double err = std::fabs(static_cast<long double>(r.logit) - r.truth);
    ASSERT_LE(err, static_cast<long double>(r.eta)) << "trial " << trial;
    worst = std::max(worst, static_cast<double>(err / r.eta));
    // Informative: η below the fp32 dot's own η (cert_math.h EtaFactor · Σ|q k̃|/√d) whenever
    // the codes are not mostly tiny.
    if (trial % 7 == 1 || trial % 7 == 2) {
      double sabs = 0.0;
      for (int c = 0; c < d; ++c) sabs += std::fabs(static_cast<double>(q[c]) * x[c]) * s;
      const double fp32_eta = EtaFactor(d) * sabs / std::sqrt(static_cast<double>(d));
      tight = std::max(tight, r.eta / fp32_eta);
    }
  }
  EXPECT_GT(worst, 0.0);  // the replay really rounds
  // Informative: four digits are ≥ 5× tighter than the fp32 dot's bound on dense codes; three
  // (truncation 2^-15 per channel) give that up: measured up to 1.51× the fp32 dot's η there,
  // so a kernel that switches to three digits trades η (a factor e^{2η} on A − 1) for registers.
  EXPECT_LT(tight, digits == 4 ? 0.2 : 2.0) << "worst η / fp32 η " << tight;
  std::printf("%d digits: worst error / η %.3g, worst η / fp32 η %.3g\n", digits, worst, tight);
}

INSTANTIATE_TEST_SUITE_P(Digits, IntDigitDotDigits, ::testing::Values(4, 3));

TEST(IntDigitDot, ThreeDigitsReconstructTheQueryTo2PowMinus15) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> u(-64.0, 64.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = u(rng) * std::exp2(-static_cast<int>(rng() % 20));
    if (!(std::fabs(x) < 64.0)) continue;
    int8_t d[3];
    SplitIntoDigitsN(x, 3, d);
    const double back = d[0] + d[1] / 128.0 + d[2] / 16384.0;
    ASSERT_LE(std::fabs(back - x), std::ldexp(1.0, -15)) << x;
  }
}

// int8-dither keys: x_c = m_c − ξ_c with ξ_c = DitherFromByte(b_c). The replay runs the
// tensor-core kernel's dither path (F_j = DitherDigitTerm of the code and dither digit dots and
// the digit sum, CombineDigitDots, qscale·2^-9) and checks it against IntDigitEtaDither, with
// saturated codes and extreme dither bytes (|x_c| up to 127.5) among the cases. A wrong F_j
// (the dither's sign or scale, a missing digit sum) misses the truth by far more than η.
TEST(IntDigitDot, DitherTermsStayWithinTheirEta) {
  std::mt19937 rng(21);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> code(-127, 127), byte(0, 255);
  double worst = 0.0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int d = 128;
    std::vector<float> q(d);
    std::vector<int> m(d), b(d);
    const float qmag = std::exp2(static_cast<float>(static_cast<int>(rng() % 60) - 30));
    for (int c = 0; c < d; ++c) {
      q[c] = g(rng) * qmag;
      m[c] = code(rng);
      b[c] = byte(rng);
    }
    switch (trial % 5) {
      case 0: q[rng() % d] *= 1000.0f; break;
      case 1: for (int c = 0; c < d; ++c) { m[c] = q[c] > 0 ? 127 : -127; b[c] = q[c] > 0 ? 0 : 255; } break;  // |x| = 127.498
      case 2: for (int c = 0; c < d; ++c) { m[c] = c % 2 ? 127 : -127; b[c] = c % 2 ? 0 : 255; } break;
      default: break;
    }
    const QueryScalars qs = ScalarsOf(q);
    const double n1 = qs.n1, sc = qs.sc;
    const int k = qs.k;
    const float inv_sqrt_d = qs.inv_sqrt_d;
    int64_t dm[4] = {0, 0, 0, 0}, de[4] = {0, 0, 0, 0}, ds[4] = {0, 0, 0, 0};
    long double dot = 0.0L;
    for (int c = 0; c < d; ++c) {
      int8_t dg[4];
      SplitIntoDigits(q[c] * sc, dg);
      for (int j = 0; j < 4; ++j) {
        dm[j] += int64_t{dg[j]} * m[c];
        de[j] += int64_t{dg[j]} * (b[c] - 128);
        ds[j] += dg[j];
      }
      dot += static_cast<long double>(q[c]) * (m[c] - static_cast<long double>(DitherFromByte(b[c])));
    }
    int32_t f[4];
    for (int j = 0; j < 4; ++j) {
      f[j] = DitherDigitTerm(static_cast<int32_t>(dm[j]), static_cast<int32_t>(de[j]), static_cast<int32_t>(ds[j]));
      ASSERT_EQ(int64_t{f[j]}, 512 * dm[j] - 2 * de[j] - ds[j]);  // no int32 overflow
    }
    const float s = Bf16Round(std::exp2(static_cast<float>(static_cast<int>(rng() % 40) - 20)) * (1.0f + (rng() % 128) / 128.0f));
    const float qscale = DigitQueryScale(k, inv_sqrt_d);
    const float logit = (CombineDigitDots(f[0], f[1], f[2], f[3]) * s) * DitherQueryScale(qscale);
    const long double truth = dot * s / std::sqrt(static_cast<long double>(d));
    const long double err = std::fabs(static_cast<long double>(logit) - truth);
    const float eta = IntDigitEtaDither(n1, k, d, s, qscale);
    ASSERT_LE(err, static_cast<long double>(eta)) << "trial " << trial;
    worst = std::max(worst, static_cast<double>(err / eta));
  }
  EXPECT_GT(worst, 0.0);
  std::printf("dither: worst error / η %.3g\n", worst);
}

// int4-rtn keys with group scales: the replay runs a kernel's grouped arithmetic (exact digit dots
// per 32-channel group, CombineDigitDots per group, Int4GroupLogitSum over the bf16 group scales,
// one product with qscale) and checks it against IntDigitEtaInt4 with the largest group scale, on
// saturated and aligned codes, group scales spread 2^±20 apart, and outlier query channels. A
// scale applied to the wrong group or a dropped group misses the truth by far more than η.
TEST(IntDigitDot, Int4GroupTermsStayWithinTheirEta) {
  std::mt19937 rng(23);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> code(-8, 7);
  double worst = 0.0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int d = 128;
    std::vector<float> q(d);
    std::vector<int> n(d);
    const float qmag = std::exp2(static_cast<float>(static_cast<int>(rng() % 60) - 30));
    for (int c = 0; c < d; ++c) {
      q[c] = g(rng) * qmag;
      n[c] = code(rng);
    }
    float sg[4];
    for (int grp = 0; grp < 4; ++grp) {
      const int spread = trial % 3 == 0 ? static_cast<int>(rng() % 40) - 20 : 0;
      sg[grp] = Bf16Round(std::exp2(static_cast<float>(static_cast<int>(rng() % 40) - 20 + spread)) *
                          (1.0f + (rng() % 128) / 128.0f));
    }
    switch (trial % 5) {
      case 0: q[rng() % d] *= 1000.0f; break;
      case 1: for (int c = 0; c < d; ++c) n[c] = q[c] > 0 ? 7 : -8; break;  // aligned: |q·x| = Σ 8|q|
      case 2: for (int c = 0; c < d; ++c) n[c] = c % 2 ? 7 : -8; break;      // cancellation
      default: break;
    }
    const QueryScalars qs = ScalarsOf(q);
    int64_t dg_dot[4][4] = {};
    long double dot = 0.0L;
    float smax = 0.0f;
    for (int c = 0; c < d; ++c) {
      int8_t dg[4];
      SplitIntoDigits(q[c] * qs.sc, dg);
      for (int j = 0; j < 4; ++j) dg_dot[c / 32][j] += int64_t{dg[j]} * n[c];
      dot += static_cast<long double>(q[c]) * sg[c / 32] * n[c];
    }
    float t_hat[4];
    for (int grp = 0; grp < 4; ++grp) {
      t_hat[grp] = CombineDigitDots(static_cast<int32_t>(dg_dot[grp][0]), static_cast<int32_t>(dg_dot[grp][1]),
                                    static_cast<int32_t>(dg_dot[grp][2]), static_cast<int32_t>(dg_dot[grp][3]));
      smax = std::max(smax, sg[grp]);
    }
    const float qscale = DigitQueryScale(qs.k, qs.inv_sqrt_d);
    const float logit = Int4GroupLogitSum(t_hat, sg) * qscale;
    const long double truth = dot / std::sqrt(static_cast<long double>(d));
    const long double err = std::fabs(static_cast<long double>(logit) - truth);
    const float eta = IntDigitEtaInt4(qs.n1, qs.k, d, smax, qscale);
    ASSERT_LE(err, static_cast<long double>(eta)) << "trial " << trial;
    worst = std::max(worst, static_cast<double>(err / eta));
  }
  EXPECT_GT(worst, 0.0);
  std::printf("int4 groups: worst error / η %.3g\n", worst);
}

TEST(IntDigitDot, ZeroQueryGivesZeroLogit) {
  std::vector<float> q(128, 0.0f);
  std::vector<int8_t> x(128, 100);
  const Replay r = ReplayKernelLogit(q, x, 1.0f);
  EXPECT_EQ(r.logit, 0.0f);
  EXPECT_LT(r.eta, 1e-40f);
}

}  // namespace
}  // namespace witcert::meter

namespace witcert::meter {
namespace {

// The largest relative overshoot of `bound` over expm1 (long double) on 10⁶ points of
// (0, ½] (a quarter of them scaled down to 2^-100, plus ½, just below ½ and the smallest
// subnormal), asserting on the way that it is never below expm1, nor below expm1f by more
// than two roundings (the form it replaces in A−1's terms).
double WorstExpm1Overshoot(float (*bound)(float), uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 0.5f);
  double worst = 0.0;
  for (int i = 0; i < 1000000; ++i) {
    float e = (i % 4 == 0) ? std::ldexp(u(rng), -static_cast<int>(rng() % 100)) : u(rng);
    if (i == 0) e = 0.5f;
    if (i == 1) e = std::nextafter(0.0f, 1.0f);
    if (i == 2) e = std::nextafter(0.5f, 0.0f);
    const long double truth = std::expm1(static_cast<long double>(e));
    const float b = bound(e);
    EXPECT_GE(static_cast<long double>(b), truth) << e;
    if (e > 1e-30f) {
      EXPECT_GE(b, std::expm1f(e) * (1.0f - 4.0f * kUnitRoundoff)) << e;
    }
    if (truth > 0) worst = std::max(worst, static_cast<double>(b / truth - 1.0L));
  }
  EXPECT_EQ(bound(0.0f), 0.0f);
  return worst;
}

// The tensor-core kernel's expm1 for ε ≤ ½ (partial_sum.h): at most 0.05% above expm1.
TEST(Expm1UpperSmall, BoundsExpm1FromAboveAndTightly) {
  EXPECT_LT(WorstExpm1Overshoot(Expm1UpperSmall, 9), 5e-4);
}

// The CPU reference's: at most ~4e-6 above, and its coefficients are the Taylor ones
// rounded up.
TEST(Expm1UpperTight, BoundsExpm1FromAboveWithinFourMillionths) {
  const double worst = WorstExpm1Overshoot(Expm1UpperTight, 10);
  EXPECT_LT(worst, 5e-6);
  EXPECT_GT(worst, 0.0);
  const long double fact[] = {1, 1, 2, 6, 24, 120, 720, 5040};
  EXPECT_GE(static_cast<long double>(3.2713e-4f), std::exp(0.5L) / fact[7]);
  EXPECT_GE(static_cast<long double>(1.3888900e-3f), 1.0L / fact[6]);
  EXPECT_GE(static_cast<long double>(8.3333340e-3f), 1.0L / fact[5]);
  EXPECT_GE(static_cast<long double>(0.041666672f), 1.0L / fact[4]);
  EXPECT_GE(static_cast<long double>(0.16666667f), 1.0L / fact[3]);
}

}  // namespace
}  // namespace witcert::meter
