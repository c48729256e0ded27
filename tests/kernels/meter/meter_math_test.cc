// Bit-level helpers of kernels/meter: float formats, the dither hash, band layout, the
// Cauchy–Schwarz lane factors of the pipelined kernel's η.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/meter/bands.h"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/dither_hash.h"
#include "kernels/meter/float_formats.h"
#include "kernels/meter/partial_sum.h"

namespace witcert::meter {
namespace {

TEST(FloatFormats, HalfRoundTripsEveryFiniteHalf) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7c00u) == 0x7c00u) continue;  // inf / NaN
    float f = HalfToFloat(static_cast<uint16_t>(h));
    uint16_t back = FloatToHalf(f);
    if (f == 0.0f) { EXPECT_EQ(back & 0x7fffu, 0u); continue; }
    EXPECT_EQ(back, h) << h;
  }
}

TEST(FloatFormats, HalfUpIsSmallestHalfAtOrAbove) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> e(-30.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    float x = std::exp2(e(rng)) * (1.0f + (rng() % 1000) / 1000.0f);
    uint16_t h = FloatToHalfUp(x);
    float up = HalfToFloat(h);
    ASSERT_GE(up, x) << x;
    if (h > 0 && h < 0x7c00u) {
      ASSERT_LT(HalfToFloat(static_cast<uint16_t>(h - 1)), x) << x;
    }
    // nearest rounding differs from up-rounding on about half the inputs: check it is nearest
    float near = HalfToFloat(FloatToHalf(x));
    if (near < 65504.0f) {
      ASSERT_LE(std::fabs(near - x), std::fabs(up - x) + 0.0f);
    }
  }
  EXPECT_EQ(FloatToHalfUp(70000.0f), 0x7c00u);  // beyond fp16: +inf, still ≥ value
  EXPECT_EQ(FloatToHalfUp(1e-10f), 0x0001u);    // tiny positive: smallest subnormal, not 0
}

TEST(FloatFormats, Bf16UpAndNearest) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(1e-30f, 1e30f);
  for (int i = 0; i < 100000; ++i) {
    float x = u(rng);
    ASSERT_GE(Bf16ToFloat(FloatToBf16Up(x)), x);
    ASSERT_LE(std::fabs(Bf16ToFloat(FloatToBf16(x)) - x), x * (1.0f / 256.0f));
  }
}

TEST(FloatFormats, Fp8E4M3RoundTripAndSaturation) {
  for (uint32_t b = 0; b < 256; ++b) {
    if ((b & 0x7fu) == 0x7fu) continue;  // NaN
    float f = Fp8E4M3ToFloat(static_cast<uint8_t>(b));
    uint8_t back = FloatToFp8E4M3Sat(f);
    if (f == 0.0f) continue;
    EXPECT_EQ(back, b) << b;
  }
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3Sat(1e9f)), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3Sat(-500.0f)), -448.0f);
  // Nearest: 1.0625 sits between 1.0 and 1.125 (tie → even mantissa 1.0).
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3Sat(1.0625f)), 1.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3Sat(1.07f)), 1.125f);
}

TEST(DitherHash, KeysOnTheGridValuesUndithered) {
  // 10^5 key samples: ξ = (b − 127.5)/256 for a byte b; the mean's standard error is
  // sqrt(1/12/1e5) ≈ 9e-4, allow 5 σ.
  double sum = 0, sum2 = 0;
  const int n = 100000;
  std::vector<int> bytes(256, 0);
  for (int i = 0; i < n; ++i) {
    float x = DitherValue(42, i % 30, i % 3, i / 90, i % 64, false);
    const double b = (static_cast<double>(x) + 0.498046875) * 256.0;
    ASSERT_EQ(b, std::floor(b)) << x;
    ASSERT_GE(b, 0.0);
    ASSERT_LE(b, 255.0);
    ++bytes[static_cast<int>(b)];
    sum += x;
    sum2 += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 5 * 9.2e-4);
  EXPECT_NEAR(sum2 / n, 1.0 / 12.0, 0.003);  // var of x² under U: 1/180 → σ ≈ 2.4e-4
  for (int c : bytes) EXPECT_GT(c, 0);        // every level is used (≈ 390 each)
  EXPECT_EQ(DitherValue(1, 2, 3, 4, 5, false), DitherValue(1, 2, 3, 4, 5, false));
  EXPECT_NE(DitherValue(1, 2, 3, 4, 5, false), DitherValue(2, 2, 3, 4, 5, false));
  EXPECT_EQ(DitherValue(1, 2, 3, 4, 5, true), 0.0f);  // values: round-to-nearest
  // Byte j of group g's word is channel 4g + j.
  const uint64_t th = DitherTokenHash(9, 1, 2, 3);
  for (uint32_t c = 0; c < 128; ++c) {
    EXPECT_EQ(DitherFromTokenHash(th, c, false), DitherFromByte((DitherWord(th, c / 4) >> (8 * (c % 4))) & 0xffu));
  }
}

// Tier B treats the key channels of one vector as independent uniforms. The per-group step is
// a 32-bit finalizer over a Weyl sequence; check what a weak mixer of structured inputs would
// get wrong: uniformity per bin, and correlation between neighbouring channels (one word),
// channels 4 apart (neighbouring words), 64 apart, and one channel at neighbouring positions.
TEST(DitherHash, ChannelsOfOneVectorLookIndependent) {
  const int vectors = 4000, d = 128;
  std::vector<int> bins(64, 0);
  double adj = 0, next_word = 0, far = 0, pos = 0;
  int64_t n = 0, pairs_adj = 0, pairs_next = 0, pairs_far = 0;
  std::vector<float> prev(d, 0.0f);
  for (int t = 0; t < vectors; ++t) {
    std::vector<float> k(d);
    for (int c = 0; c < d; ++c) {
      k[c] = DitherValue(7, 3, 5, t, c, false);
      ++bins[static_cast<int>((k[c] + 0.5f) * 64)];
      ++n;
    }
    for (int c = 0; c + 1 < d; ++c, ++pairs_adj) adj += k[c] * k[c + 1];
    for (int c = 0; c + 4 < d; ++c, ++pairs_next) next_word += k[c] * k[c + 4];
    for (int c = 0; c + 64 < d; ++c, ++pairs_far) far += k[c] * k[c + 64];
    if (t > 0) {
      for (int c = 0; c < d; ++c) pos += k[c] * prev[c];
    }
    prev = k;
  }
  double chi2 = 0;
  const double expect = static_cast<double>(n) / 64;
  for (int b : bins) chi2 += (b - expect) * (b - expect) / expect;
  EXPECT_LT(chi2, 63 + 6 * std::sqrt(2.0 * 63)) << "63 degrees of freedom";
  // E[ξ ξ'] = 0 for independent centred uniforms; one product has sd 1/12.
  const double sd = 1.0 / 12.0;
  EXPECT_LT(std::fabs(adj / pairs_adj), 5 * sd / std::sqrt(static_cast<double>(pairs_adj)));
  EXPECT_LT(std::fabs(next_word / pairs_next), 5 * sd / std::sqrt(static_cast<double>(pairs_next)));
  EXPECT_LT(std::fabs(far / pairs_far), 5 * sd / std::sqrt(static_cast<double>(pairs_far)));
  const double pairs_pos = static_cast<double>(vectors - 1) * d;
  EXPECT_LT(std::fabs(pos / pairs_pos), 5 * sd / std::sqrt(pairs_pos));
}

// The grid's cost in the Tier B bound (dither_hash.h): for any x and scale s, the 256 residuals
// r/s = x/s + ξ_b − m_b, with m_b rounded as the codec rounds fl(fl(x/s) + ξ_b), stay within
// ½ + 2^-16, have a mean within kDitherBias and a centred second moment ≤ 1/12. Fails if the
// grid moves off (b − 127.5)/256 (a mean of up to 1/256) or if kDitherBias drops the 2^-16.
TEST(DitherHash, ResidualOverTheGridHasBoundedBias) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  double worst_mean = 0.0;
  for (int i = 0; i < 20000; ++i) {
    const float s = std::ldexp(1.0f + std::fabs(unit(rng)), -(i % 40));
    float y = unit(rng) * 126.0f;
    if (i % 5 == 0) y = std::round(y * 512.0f) / 512.0f;  // on or near the grid's ties
    if (i % 7 == 0) y = std::nextafter(y, 200.0f);
    const float x = y * s;
    const float xs = x / s;
    long double mean = 0, m2 = 0, rmax = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const float xi = DitherFromByte(b);
      const float m = std::nearbyint(xs + xi);
      const long double r = static_cast<long double>(x) / s + xi - m;
      rmax = std::max(rmax, std::fabs(r));
      mean += r / 256;
      m2 += r * r / 256;
    }
    ASSERT_LE(rmax, 0.5L + 1.0L / 65536) << x << " " << s;
    ASSERT_LE(std::fabs(mean), static_cast<long double>(kDitherBias)) << x << " " << s;
    ASSERT_LE(m2 - mean * mean, 1.0L / 12) << x << " " << s;
    worst_mean = std::max(worst_mean, static_cast<double>(std::fabs(mean)));
  }
  EXPECT_GT(worst_mean, 0.9 / 512);  // the sweep reaches the bias the bound allows for
}

TEST(Bands, EachBandHoldsWholePairs) {
  for (bool inter : {true, false}) {
    const int d = 64, nb = 8;
    std::vector<int> count(nb, 0);
    for (int c = 0; c < d; ++c) {
      int b = BandOfDim(c, d, nb, inter);
      ASSERT_GE(b, 0);
      ASSERT_LT(b, nb);
      ++count[b];
      int partner = inter ? (c ^ 1) : (c < d / 2 ? c + d / 2 : c - d / 2);
      EXPECT_EQ(BandOfDim(partner, d, nb, inter), b);
    }
    for (int b = 0; b < nb; ++b) EXPECT_EQ(count[b], d / nb);
  }
}

// The GPU kernels' branch-free per-token step: on common tokens it is
// PartialAddTokenWeighted<kUpperSmall>, and an inactive token, whatever garbage its ε̂ and ρ
// hold, leaves the partial exactly as it was.
TEST(PartialSum, CommonTokenStepMatchesTheGeneralAdd) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> logit(-30.0f, 0.0f), eps(0.0f, 0.5f), rho(0.0f, 4.0f);
  CertPartial general, common;
  general.m = common.m = 0.0f;
  const float garbage[] = {INFINITY, -INFINITY, NAN, 1e30f, -1.0f};
  int added = 0;
  for (int i = 0; i < 4000; ++i) {
    const float l = logit(rng), w = std::exp(l);
    const float e = (i % 5 == 0) ? 0.0f : eps(rng), r = (i % 7 == 0) ? 0.0f : rho(rng);
    ASSERT_TRUE(WeightedTokenIsCommon(l, w, e)) << l << " " << e;
    PartialAddTokenWeighted<Expm1Form::kUpperSmall>(&general, l, w, e, r, 0.0f);
    PartialAddTokenCommon(&common, true, w, e, r);
    ++added;
    // A masked token between every two, with garbage inputs.
    const float g = garbage[i % 5];
    PartialAddTokenCommon(&common, false, g, g, g);
  }
  // z and the maxima are the same additions; b and c may differ by the contraction of a
  // term's product into its add (-ffp-contract, FMA), one rounding per term at most.
  EXPECT_EQ(common.z, general.z);
  EXPECT_NEAR(common.b, general.b, 1e-5 * general.b);
  EXPECT_NEAR(common.c, general.c, 1e-5 * general.c);
  EXPECT_EQ(common.eps_max, general.eps_max);
  EXPECT_EQ(common.count, added);
  EXPECT_EQ(common.chain, general.chain);
  EXPECT_FALSE(common.bad);
  EXPECT_GT(common.b, 0.0f);
  // What is not common: NaN or a large ε̂, a non-finite logit, a log-form weight.
  EXPECT_FALSE(WeightedTokenIsCommon(0.0f, 1.0f, NAN));
  EXPECT_FALSE(WeightedTokenIsCommon(0.0f, 1.0f, 0.75f));
  EXPECT_FALSE(WeightedTokenIsCommon(INFINITY, 1.0f, 0.1f));
  EXPECT_FALSE(WeightedTokenIsCommon(-80.0f, 1e-35f, 0.1f));
  EXPECT_TRUE(WeightedTokenIsCommon(-80.0f, 1e-35f, 0.0f));
}

// WeightedTokenIsCommonAtGap, the GPU kernels' test taken before the exponential, calls a token
// common only where WeightedTokenIsCommon does for w = expf(gap): densely around its threshold
// (every float in [−69.4, −68.9]) and on a grid elsewhere; both answers occur.
TEST(PartialSum, CommonAtGapImpliesCommon) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> eps(1e-6f, 0.5f);
  int common = 0, rare = 0;
  auto check = [&](float gap) {
    const float e = eps(rng), w = std::exp(gap);
    if (WeightedTokenIsCommonAtGap(-1.0f, gap, e)) {
      ASSERT_TRUE(WeightedTokenIsCommon(-1.0f, w, e)) << gap << " " << w;
      ++common;
    } else {
      ++rare;
    }
  };
  for (float gap = -69.4f; gap <= -68.9f; gap = std::nextafter(gap, 0.0f)) check(gap);
  for (int i = 0; i <= 120000; ++i) check(-120.0f + 1e-3f * static_cast<float>(i));
  EXPECT_GT(common, 0);
  EXPECT_GT(rare, 0);
  // Beyond the threshold the two agree: ε̂ = 0 is common at any gap; NaN or large ε̂ and a
  // non-finite logit are not.
  EXPECT_TRUE(WeightedTokenIsCommonAtGap(-80.0f, -80.0f, 0.0f));
  EXPECT_FALSE(WeightedTokenIsCommonAtGap(-80.0f, -80.0f, 0.1f));
  EXPECT_FALSE(WeightedTokenIsCommonAtGap(0.0f, 0.0f, NAN));
  EXPECT_FALSE(WeightedTokenIsCommonAtGap(0.0f, 0.0f, 0.75f));
  EXPECT_FALSE(WeightedTokenIsCommonAtGap(INFINITY, 0.0f, 0.1f));
}

// The GPU kernels' middle class (WeightedTokenIsMidAtGap): exactly the finite-logit, direct-weight
// tokens with ½ < ε̂ ≤ kEpsCap, so with the common class and the rare one every token has one
// place; and Expm1Mid stays within its stated 11.2u of long-double expm1 over (½, kEpsCap] (here
// with the host's expf; the device's is within 2 ulp by CUDA's documentation, the bound's premise).
TEST(PartialSum, MidTokensAndTheirExpm1) {
  EXPECT_TRUE(WeightedTokenIsMidAtGap(-1.0f, -3.0f, 0.75f));
  EXPECT_TRUE(WeightedTokenIsMidAtGap(-1.0f, -3.0f, kEpsCap));
  EXPECT_FALSE(WeightedTokenIsMidAtGap(-1.0f, -3.0f, 0.5f));  // common
  EXPECT_FALSE(WeightedTokenIsMidAtGap(-1.0f, -3.0f, std::nextafter(kEpsCap, INFINITY)));
  EXPECT_FALSE(WeightedTokenIsMidAtGap(-1.0f, -3.0f, NAN));
  EXPECT_FALSE(WeightedTokenIsMidAtGap(-1.0f, -70.0f, 0.75f));  // the log form's weights
  EXPECT_FALSE(WeightedTokenIsMidAtGap(INFINITY, -3.0f, 0.75f));
  for (float e : {0.0f, 0.25f, 0.5f, 0.75f, 3.0f, 64.0f}) {
    EXPECT_FALSE(WeightedTokenIsMidAtGap(-1.0f, -3.0f, e) && WeightedTokenIsCommonAtGap(-1.0f, -3.0f, e)) << e;
  }
  double worst = 0.0;
  for (float e = std::nextafter(0.5f, 1.0f); e <= kEpsCap; e = e < 1.0f ? std::nextafter(e, 2.0f) : e * 1.0001f) {
    const long double truth = std::expm1(static_cast<long double>(e));
    const double rel = static_cast<double>(std::fabs(static_cast<long double>(Expm1Mid(e)) - truth) / truth);
    worst = std::max(worst, rel / 5.9604644775390625e-8);
  }
  EXPECT_LE(worst, 11.2);
  EXPECT_EQ(Expm1Mid(0.0f), 0.0f);  // a masked token adds an exact zero
  std::printf("Expm1Mid: worst error %.2f u over (1/2, %g]\n", worst, static_cast<double>(kEpsCap));
}

// The tensor-core decode kernel's A−1 power sums (EpsPowerSums): over runs of common tokens their
// Bound() is never below the long-double Σ w·expm1(ε) (per-token ε over (0, ½], tiny ε, weights
// over the whole direct range, runs of one token to 2^14), within 0.6% of it, and masked tokens
// (zeros) add nothing. The cube coefficient is 8(e^½ − 13/8) rounded up, and a smaller one breaks
// the bound at ε = ½.
TEST(PartialSum, EpsPowerSumsBoundTheExpm1Sum) {
  EXPECT_GE(static_cast<long double>(kExpm1CubeCoef), 8.0L * (std::exp(0.5L) - 1.625L));
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> eps(0.0f, 0.5f), logit(-60.0f, 0.0f);
  double worst = 0.0;
  for (int run = 0; run < 300; ++run) {
    const int n = run < 20 ? 1 : (1 << (run % 15));
    EpsPowerSums ps;
    long double truth = 0.0L;
    for (int i = 0; i < n; ++i) {
      float e = eps(rng);
      if (i % 3 == 1) e = std::ldexp(e, -static_cast<int>(rng() % 40));
      if (run % 7 == 0) e = 0.5f;
      const float w = run % 5 == 0 ? 1.0f : std::exp(logit(rng));
      ps.Add(w, e);
      ps.Add(0.0f, 0.0f);  // a masked token
      truth += static_cast<long double>(w) * std::expm1(static_cast<long double>(e));
    }
    // The recursive sums' own chain error is SumInflation's (γ_n): take it off before comparing.
    const long double gamma = n * 5.9604644775390625e-8L / (1.0L - n * 5.9604644775390625e-8L);
    const long double b = ps.Bound();
    EXPECT_GE(b * (1.0L + gamma), truth) << run << " n " << n;
    if (truth > 0) worst = std::max(worst, static_cast<double>(b / truth - 1.0L));
  }
  EXPECT_LT(worst, 6e-3);
  EXPECT_EQ(EpsPowerSums{}.Bound(), 0.0f);
  // With C3 one part in 10^3 too small, ε = ½ falls below expm1.
  EpsPowerSums half;
  half.Add(1.0f, 0.5f);
  const float low = std::fma(kExpm1CubeCoef * 0.999f, half.s3, std::fma(0.5f, half.s2, half.s1));
  EXPECT_LT(static_cast<long double>(low), std::expm1(0.5L));
}

// EtaLaneFactor(LaneSquares(·)) and EtaLaneFactor(KeyLaneSquares(·, s)) are never below the
// real norms, so their product bounds the lane's Σ_c |q_c x_c|·s (Cauchy–Schwarz), over the
// ranges the kernel feeds them: queries from 2⁻⁶⁰ to 2⁴⁰, scaled code-domain keys (|x| ≤ 448,
// scales 2⁻⁹⁰…2⁶⁰, squares that underflow included) and unscaled fp16 keys (|x| ≤ 65504);
// lanes with one dominant channel, zeros and subnormal products. Where nothing underflows they
// stay within 10⁻⁵ of the norm (the bound is not vacuous).
TEST(EtaLane, FactorsBoundTheLaneNormsAndTheLaneSum) {
  std::mt19937 rng(2026);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 7), qexp(-60, 40), sexp(-90, 60), kind(0, 3);
  auto exact_norm = [](const float* v, long double s) {
    long double n = 0.0L;
    for (int i = 0; i < 8; ++i) n += static_cast<long double>(v[i]) * v[i] * s * s;
    return std::sqrt(n);
  };
  int checked = 0, underflowed = 0;
  for (int trial = 0; trial < 200000; ++trial) {
    float q[8], x[8];
    const float qs = std::ldexp(1.0f, qexp(rng));
    for (float& v : q) v = g(rng) * qs;
    float s = 1.0f;
    switch (kind(rng)) {
      case 0:  // int8 codes, scaled
        for (float& v : x) v = std::nearbyint(std::fmin(127.0f, std::fmax(-128.0f, g(rng) * 60.0f)));
        s = std::ldexp(1.0f + 0.5f * std::fabs(g(rng)), sexp(rng));
        break;
      case 1:  // fp8-range codes, scaled, one dominant channel
        for (float& v : x) v = g(rng) * 0.01f;
        x[pick(rng)] = 448.0f;
        s = std::ldexp(1.0f, sexp(rng));
        break;
      case 2:  // fp16 keys, unscaled
        for (float& v : x) v = std::fmin(65504.0f, std::fmax(-65504.0f, g(rng) * 3000.0f));
        break;
      default:  // tiny fp16 values and zeros, unscaled
        for (float& v : x) v = (pick(rng) < 3) ? 0.0f : g(rng) * 6e-5f;
        break;
    }
    const long double ks = s;
    const long double xn = exact_norm(x, ks), qn = exact_norm(q, 1.0L);
    const float xf = EtaLaneFactor(KeyLaneSquares(x, s)), qf = EtaLaneFactor(LaneSquares(q));
    if (!std::isfinite(xf)) continue;  // s² overflowed: inf, vacuous (checked below)
    ASSERT_GE(static_cast<long double>(xf), xn) << "trial " << trial << " s " << s;
    ASSERT_GE(static_cast<long double>(qf), qn) << "trial " << trial;
    long double lane_sum = 0.0L;
    for (int i = 0; i < 8; ++i) lane_sum += std::fabs(static_cast<long double>(q[i]) * x[i] * ks);
    ASSERT_GE(static_cast<long double>(xf) * qf, lane_sum) << "trial " << trial;
    const bool normal = static_cast<double>(s) * s >= 0x1p-126 && KeyLaneSquares(x, s) >= 0x1p-100f;
    if (normal) {
      EXPECT_LE(static_cast<long double>(xf), xn * (1.0L + 1e-5L) + 0x1p-63L) << "trial " << trial;
    } else {
      ++underflowed;
    }
    ++checked;
  }
  EXPECT_GT(checked, 150000);
  EXPECT_GT(underflowed, 1000);  // the underflow regime was exercised
  const float big[8] = {448.0f, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_TRUE(std::isinf(EtaLaneFactor(KeyLaneSquares(big, 0x1p100f))));  // inf stays inf
  const float zero[8] = {};
  EXPECT_EQ(EtaLaneFactor(LaneSquares(zero)), 0x1p-63f);
}

// Expm1Upper ≥ expm1 (long double) over [0, kEpsCap], within 1e-5 relative; ∞ past the cap and
// for NaN. SetSplitMaxSums' b and c are ≥ the exact products z·expm1(ε) and z·ρ.
TEST(PartialSum, Expm1UpperAndSplitMaxSums) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const float e = i < 1000 ? static_cast<float>(i) * 1e-3f
                             : (i % 2 ? u01(rng) : std::ldexp(u01(rng), static_cast<int>(rng() % 12) - 5));
    if (!(e <= meter::kEpsCap)) continue;
    const long double truth = std::expm1(static_cast<long double>(e));
    const float up = meter::Expm1Upper(e);
    ASSERT_GE(static_cast<long double>(up), truth) << "eps " << e;
    if (truth > 0) worst = std::max(worst, static_cast<double>((up - truth) / truth));
    meter::CertPartial p;
    p.z = 1.0f + 1000.0f * u01(rng);
    const float rho = u01(rng) * 10.0f;
    meter::SetSplitMaxSums(&p, e, rho);
    ASSERT_GE(static_cast<long double>(p.b), static_cast<long double>(p.z) * truth);
    ASSERT_GE(static_cast<long double>(p.c), static_cast<long double>(p.z) * rho);
    ASSERT_EQ(p.eps_max, e);
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_EQ(meter::Expm1Upper(65.0f), INFINITY);
  EXPECT_EQ(meter::Expm1Upper(NAN), INFINITY);
  meter::CertPartial p;
  p.m = 0.0f;
  p.z = 3.0f;
  p.count = p.chain = 1;
  meter::SetSplitMaxSums(&p, NAN, 1.0f);
  EXPECT_EQ(p.eps_max, INFINITY);
  EXPECT_EQ(p.b, INFINITY);
  EXPECT_EQ(meter::FinalizeCert(p, 1).tv, 1.0f);
}

// TierBCoefficientF (fp32, the tensor-core kernel's prologue) is never below TierBCoefficient
// (double) and within 1e-5 of it, over query norms, head dims, contexts and δ's.
TEST(TierB, Fp32CoefficientBoundsTheDoubleOne) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const int32_t d = (i % 2) ? 128 : 64;
    const float n2 = static_cast<float>(std::ldexp(1.0 + u01(rng), static_cast<int>(rng() % 40) - 20));
    const float n1 = n2 * static_cast<float>(1.0 + u01(rng) * std::sqrt(static_cast<double>(d)));
    const int64_t s = 1 + static_cast<int64_t>(std::ldexp(u01(rng), static_cast<int>(rng() % 28)));
    const double delta = std::pow(10.0, -15.0 * u01(rng)) * 0.5;
    const float ref = meter::TierBCoefficient(n2, n1, d, s, delta);
    const float f32 = meter::TierBCoefficientF(n2, n1, d, s, meter::TierBNegLogDelta(delta));
    ASSERT_GE(f32, ref) << "n2 " << n2 << " n1 " << n1 << " d " << d << " S " << s << " delta " << delta;
    worst = std::max(worst, static_cast<double>(f32) / ref - 1.0);
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_GE(static_cast<double>(0.693147182f), std::log(2.0));
  EXPECT_GE(static_cast<double>(0.0019838812f), meter::kDitherBias + 260.0 * meter::kUnitRoundoff);
  EXPECT_EQ(meter::TierBNegLogDelta(0.0), 0.0f);
}

}  // namespace
}  // namespace witcert::meter
