// The constants of kernels/cuda/tc_logit_eta.cuh re-derived from the model and the digit bounds
// (CPU only, runs in CI): a constant edited below what its derivation needs fails here, before
// any device sees it. The model itself is checked on the device by mma_rounding_model_test.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cuda/f16_digits.cuh"
#include "kernels/cuda/tc8_layout.h"
#include "kernels/cuda/tc_logit_eta.cuh"

namespace witcert {
namespace {

constexpr long double kU = 5.9604644775390625e-8L;  // 2^-24, fp32 round-to-nearest
constexpr int kD = 128;

// A chain of n MMAs errs by ≤ μ·Σ_j (|C_j| + T_j) with |C_j| ≤ (1+μ)^j·Σ_{i<j} T_i, so by
// ≤ μ·T·(1 + (n−1)(1+μ)^(n−1)): the factor the header writes as 4.01 (n = 4) and 8.02 (n = 8).
long double ChainFactor(int n) {
  return 1.0L + (n - 1) * std::pow(1.0L + static_cast<long double>(cuda_kv::kTcMu), n - 1);
}

struct DigitBound {
  long double rho, alpha, kmax;  // |x − hi − lo| ≤ ρ|x| + α; the largest finite key
};

// extra_products: fp32 products after the chains beyond the unscale's (scaled fp8: the K scale).
template <bool BF16>
void CheckConstants(const DigitBound& db, int extra_products = 0) {
  const long double mu = cuda_kv::kTcMu, nu = cuda_kv::kTcNu;
  const long double rel = (ChainFactor(4) * mu + (8 + extra_products) * kU + db.rho * (1 + 2 * db.rho)) *
                          (1 + ChainFactor(8) * mu + 2 * kU) * (1 + 4 * kU);
  const long double abs = kD * db.alpha * db.kmax * (1 + 2 * db.rho) + 24 * nu;
  EXPECT_GE(static_cast<long double>(cuda_kv::TcLogitEta<BF16>::kRel), rel);
  EXPECT_GE(static_cast<long double>(cuda_kv::TcLogitEta<BF16>::kAbs), abs);
  // Not needlessly loose either: within 2% of the relative need.
  EXPECT_LE(static_cast<long double>(cuda_kv::TcLogitEta<BF16>::kRel), rel * 1.02L);
}

TEST(TcLogitEta, ChainFactorsAreTheHeaders) {
  EXPECT_LE(ChainFactor(4), 4.01L);
  EXPECT_LE(ChainFactor(8), 8.02L);
}

TEST(TcLogitEta, Fp16ConstantsCoverTheirDerivation) {
  CheckConstants<false>({std::ldexp(1.0L, -22), std::ldexp(1.0L, -25), 65504.0L});
}

TEST(TcLogitEta, Bf16ConstantsCoverTheirDerivation) {
  const long double bf16_max = (2.0L - std::ldexp(1.0L, -7)) * std::ldexp(1.0L, 127);
  CheckConstants<true>({std::ldexp(1.0L, -16), std::ldexp(1.0L, -134), bf16_max});
}

// fp8-e4m3 keys on the fp16 path: codes ≤ 448, the fp16 query digits, one product more (the token's
// K scale), and the fp16 constants still cover it (TcLogitEtaScaledOf).
TEST(TcLogitEta, Fp8ScaledKeysFitTheFp16Constants) {
  CheckConstants<false>({std::ldexp(1.0L, -22), std::ldexp(1.0L, -25), 448.0L}, /*extra_products=*/1);
}

TEST(TcLogitEta, ScaledFormNeverBelowItsFormula) {
  const float us = 0.01f;
  for (float t : {0.0f, 1e-30f, 1.0f, 1e3f, 1e10f, 1e30f}) {
    for (float sc : {0.0f, 1e-20f, 0.5f, 3.0f, 1e20f}) {
      const float e = cuda_kv::TcLogitEtaScaledOf<false>(t, sc, us);
      EXPECT_GE(static_cast<double>(e), (6.25e-5 * t + 0.25 * sc) * us) << t << " " << sc;
    }
  }
  EXPECT_TRUE(std::isinf(cuda_kv::TcLogitEtaScaledOf<false>(1.0f, std::numeric_limits<float>::infinity(), us)));
  EXPECT_TRUE(std::isnan(cuda_kv::TcLogitEtaScaledOf<false>(std::nanf(""), 1.0f, us)));
}

// Scaled fp8 without the T̂ chain (TcLogitEtaFp8CodeBoundOf): for digits summed in fp32 the way
// the kernel sums them (8 lanes of 32 channels in sequence, then a butterfly over the lanes) and
// any e4m3 codes (|code| ≤ 448, all at 448 being the worst case) and K scales, η is never below
// the chain form's formula evaluated with the exact max_t T_t·s_t.
TEST(TcLogitEta, Fp8CodeBoundCoversEveryTokensSum) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto f16 = [](float x) {  // round to 11 significant bits (an fp16 digit's value)
    int e = 0;
    std::frexp(x, &e);
    return std::ldexp(std::nearbyint(std::ldexp(x, 11 - e)), e - 11);
  };
  for (int trial = 0; trial < 300; ++trial) {
    float digit[kD][2];  // [channel, hi / lo]
    const int spread = trial % 30;
    for (int c = 0; c < kD; ++c) {
      digit[c][0] = f16(unit(rng) * std::ldexp(1.0f, 14 - (c * spread) % 31));
      digit[c][1] = f16(unit(rng) * std::ldexp(1.0f, -(c % 17)));
    }
    float lane[8];  // lane = (tig, digit): 32 channels each
    for (int l = 0; l < 8; ++l) {
      lane[l] = 0.0f;
      for (int c = (l % 4) * 32; c < (l % 4) * 32 + 32; ++c) lane[l] += std::fabs(digit[c][l / 4]);
    }
    for (int o = 1; o <= 4; o <<= 1) {
      float next[8];
      for (int l = 0; l < 8; ++l) next[l] = lane[l] + lane[l ^ o];
      std::copy(next, next + 8, lane);
    }
    long double max_ts = 0, smax = 0;
    for (int t = 0; t < 16; ++t) {
      const float s = std::ldexp(0.5f + 0.5f * std::fabs(unit(rng)), -(t * trial) % 40);
      long double tt = 0;
      for (int c = 0; c < kD; ++c) {
        const long double code = t == 0 ? 448.0L : std::nearbyint(448.0f * unit(rng));
        tt += (std::fabs(static_cast<long double>(digit[c][0])) + std::fabs(static_cast<long double>(digit[c][1]))) *
              std::fabs(code);
      }
      max_ts = std::max(max_ts, tt * s);
      smax = std::max(smax, static_cast<long double>(s));
    }
    const float us = std::ldexp(1.0f, -14 - trial % 5) * 0.08838834764f;
    const long double need = (static_cast<long double>(cuda_kv::TcLogitEta<false>::kRel) * max_ts +
                              static_cast<long double>(cuda_kv::TcLogitEta<false>::kAbs) * smax) * us;
    EXPECT_GE(static_cast<long double>(cuda_kv::TcLogitEtaFp8CodeBoundOf(lane[0], static_cast<float>(smax), us)), need)
        << trial;
  }
}

TEST(TcLogitEta, MonotoneAndNeverSmallOnBadInput) {
  const float us = 0.01f;
  float prev = 0.0f;
  for (float t : {0.0f, 1e-30f, 1.0f, 1e3f, 1e10f, 1e30f}) {
    const float e = cuda_kv::TcLogitEtaOf<false>(t, us);
    EXPECT_GE(e, prev) << t;
    EXPECT_GE(static_cast<double>(e), (6.25e-5 * t + 0.25) * us) << t;  // never below the real-number formula
    prev = e;
  }
  EXPECT_TRUE(std::isinf(cuda_kv::TcLogitEtaOf<true>(std::numeric_limits<float>::infinity(), us)));
  EXPECT_TRUE(std::isnan(cuda_kv::TcLogitEtaOf<false>(std::nanf(""), us)));
}

// kivi2's constants (TcLogitEtaKivi2): chains of up to 8 MMAs, nine additions, the unscale's product
// and its own error, the stored key's rounding; keys |z| + 3|s| ≤ 4·65504 in the absolute term. W
// is bounded from the channels' largest parameters (no chain of its own), so no second chain factor.
TEST(TcLogitEta, Kivi2ConstantsCoverTheirDerivation) {
  const long double mu = cuda_kv::kTcMu, nu = cuda_kv::kTcNu, rho = std::ldexp(1.0L, -22), alpha = std::ldexp(1.0L, -25);
  const long double rel = (ChainFactor(8) * mu + 14 * kU + rho * (1 + 2 * rho)) * (1 + 2 * kU);
  const long double abs = kD * alpha * 4 * 65504.0L * (1 + 2 * rho) * (1 + std::ldexp(1.0L, -20)) + 48 * nu;
  EXPECT_GE(static_cast<long double>(cuda_kv::TcLogitEtaKivi2::kRel), rel);
  EXPECT_LE(static_cast<long double>(cuda_kv::TcLogitEtaKivi2::kRel), rel * 1.03L);
  EXPECT_GE(static_cast<long double>(cuda_kv::TcLogitEtaKivi2::kAbs), abs);
}

float HalfBitsToFloat(uint32_t bits16) {
  return static_cast<float>(__half2float(__ushort_as_half(static_cast<unsigned short>(bits16 & 0xffffu))));
}

// One fp32 accumulator element of an MMA under the model: the exact C + Σ products, rounded to
// fp32, pushed by `push`·μ·(|C| + Σ|products|) (|push| < 1).
float ModelMma(float c, const long double* products, int n, long double push) {
  long double exact = c, abs_sum = std::fabs(static_cast<long double>(c));
  for (int i = 0; i < n; ++i) {
    exact += products[i];
    abs_sum += std::fabs(products[i]);
  }
  return static_cast<float>(exact + push * static_cast<long double>(cuda_kv::kTcMu) * abs_sum);
}

// kivi2's K pass replayed on the CPU (pipe_tc_kivi2_keys.cuh): the query's fp16 digits under the
// head's power-of-two scale as pipe_tc_query.cuh forms them, the k-steps' channels as
// Tc8KeyChannel maps them, the code planes into chains ca (even k-steps) and cb (odd), the zeros into cz,
// every MMA element pushed by up to 0.99μ of its absolute sum, the kernel's own Kivi2TcDot; η from
// the bound sum over the channel pairs' (c, c ^ 2) largest |z|, |s| (Kivi2TcBoundSum's terms, summed in
// fp32 in the kernel's order) and TcLogitEtaKivi2Of. Against long double over the stored keys
// k̃_c = fl(z_c + fl(s_c·m_c)) on blocks built to hurt: random, cancelling (k̃ ≈ 0 while z and s·m
// are large), outlier channels, tiny (subnormal fp16) parameters, one-signed with every push in
// the error's direction. Returns the worst |ℓ̂ − ℓ| / η.
double Kivi2WorstShareOfEta(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto f16 = [](float x) { return static_cast<float>(__half2float(__float2half_rn(x))); };
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(kD));
  double worst = 0.0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int pattern = trial % 5;
    float q[kD], z[kD], s[kD];
    int m[kD];
    const int qe = static_cast<int>(rng() % 41) - 20;
    for (int c = 0; c < kD; ++c) {
      const float qu = pattern == 4 ? std::fabs(unit(rng)) : unit(rng);
      q[c] = std::ldexp(qu, qe + (pattern == 2 ? static_cast<int>(rng() % 16) : 0));
      m[c] = pattern == 4 ? 3 : static_cast<int>(rng() % 4);
      switch (pattern) {
        case 0: s[c] = f16(std::fabs(unit(rng))); z[c] = f16(2.0f * unit(rng)); break;
        case 1:  // z + s·m ≈ 0 at the token's code
          s[c] = f16(std::fabs(unit(rng)) * 300.0f + 0.01f);
          z[c] = f16(-s[c] * static_cast<float>(m[c]) * (1.0f + 1e-3f * unit(rng)));
          break;
        case 2:
          s[c] = f16(c % 17 == 0 ? 3000.0f * std::fabs(unit(rng)) : 1e-3f * std::fabs(unit(rng)));
          z[c] = f16(c % 17 == 0 ? -4000.0f * std::fabs(unit(rng)) : 1e-3f * unit(rng));
          break;
        case 3: s[c] = f16(std::ldexp(std::fabs(unit(rng)), -20)); z[c] = f16(std::ldexp(unit(rng), -18)); break;
        default: s[c] = f16(std::fabs(unit(rng)) * 1000.0f); z[c] = f16(std::fabs(unit(rng)) * 1000.0f); break;
      }
    }
    long double truth = 0;
    for (int c = 0; c < kD; ++c) {
      const float sm = s[c] * static_cast<float>(m[c]);
      const float kt = z[c] + sm;  // fl(z + fl(s·m)), as every decoder of the stored key
      truth += static_cast<long double>(q[c]) * kt;
    }
    truth *= 1.0L / std::sqrt(static_cast<long double>(kD));
    // The query's digits (pipe_tc_query.cuh): max|q| < 2^e, x = q·2^(14−e).
    float amax = 0.0f;
    for (float v : q) amax = std::max(amax, std::fabs(v));
    int e = 0;
    if (amax > 0.0f) std::frexp(amax, &e);
    e = std::max(e, -100);
    const float scale = std::ldexp(1.0f, 14 - e);
    float hi[kD], lo[kD];
    for (int c = 0; c < kD; ++c) {
      const uint32_t dp = cuda_kv::F16DigitPair(q[c] * scale);
      hi[c] = HalfBitsToFloat(dp);
      lo[c] = HalfBitsToFloat(dp >> 16);
    }
    const float unscale = (1.0f / scale) * inv_sqrt_d;
    // Pushes: pattern 4 (every term one-signed) pushes every MMA up; the rest at random.
    auto push = [&]() -> long double {
      if (pattern == 4) return 0.99L;
      return (static_cast<long double>(rng() % 1999) / 1000.0L - 0.999L) * 0.99L;
    };
    float ca[4] = {}, cb[4] = {}, cz[4] = {};  // [row gid hi, lo, row gid + 8 hi, lo]
    for (int ks = 0; ks < 8; ++ks) {
      float* acc = (ks & 1) ? cb : ca;
      long double plane[4][16], zero[4][16];  // zero rows gid + 8: the scales (unused)
      int i = 0;
      for (int tig = 0; tig < 4; ++tig) {
        for (int j = 0; j < 4; ++j, ++i) {
          const int c = cuda_kv::Tc8KeyChannel(ks, tig, j);
          const long double dg[2] = {hi[c], lo[c]};
          for (int col = 0; col < 2; ++col) {
            plane[col][i] = dg[col] * static_cast<long double>(s[c]) * (m[c] & 1);
            plane[2 + col][i] = dg[col] * static_cast<long double>(s[c]) * (m[c] >> 1);
            zero[col][i] = dg[col] * static_cast<long double>(z[c]);
            zero[2 + col][i] = dg[col] * static_cast<long double>(s[c]);
          }
        }
      }
      for (int el = 0; el < 4; ++el) acc[el] = ModelMma(acc[el], plane[el], 16, push());
      for (int el = 0; el < 4; ++el) cz[el] = ModelMma(cz[el], zero[el], 16, push());
    }
    // Kivi2TcBoundSum: lane (gid, tig) sums, k-step by k-step, its digit at channels c..c + 3 times
    // Z + 3S of the channel and its partner c ^ 2 (one fma each); then tig, then digits.
    float bound[kD];
    for (int c = 0; c < kD; ++c) {
      const float zm = std::max(std::fabs(z[c]), std::fabs(z[c ^ 2]));
      const float sm = std::max(std::fabs(s[c]), std::fabs(s[c ^ 2]));
      bound[c] = std::fma(3.0f, sm, zm);
    }
    float lane_sum[2][4];  // [digit][tig]
    for (int dgt = 0; dgt < 2; ++dgt) {
      for (int tig = 0; tig < 4; ++tig) {
        float acc = 0.0f;
        for (int ks = 0; ks < 8; ++ks) {
          for (int j = 0; j < 4; ++j) {
            const int c = cuda_kv::Tc8KeyChannel(ks, tig, j);
            acc = std::fma(std::fabs(dgt == 0 ? hi[c] : lo[c]), bound[c], acc);
          }
        }
        lane_sum[dgt][tig] = acc;
      }
    }
    float w_sum[2];
    for (int dgt = 0; dgt < 2; ++dgt) {
      w_sum[dgt] = (lane_sum[dgt][0] + lane_sum[dgt][1]) + (lane_sum[dgt][2] + lane_sum[dgt][3]);
    }
    const float l = cuda_kv::Kivi2TcDot(ca, cb, cz) * unscale;
    const float eta = cuda_kv::TcLogitEtaKivi2Of(w_sum[0] + w_sum[1], unscale);
    worst = std::max(worst, static_cast<double>(std::fabs(static_cast<long double>(l) - truth) / eta));
  }
  return worst;
}

TEST(TcLogitEta, Kivi2PlanesCoverTheStoredKeysDot) {
  double worst = 0.0;
  for (uint64_t seed : {3u, 11u, 29u}) worst = std::max(worst, Kivi2WorstShareOfEta(seed));
  EXPECT_LE(worst, 1.0);
  // The replay is not vacuous: the pushes and roundings use a visible part of η.
  EXPECT_GT(worst, 0.02);
  std::printf("kivi2 on tensor cores: worst error %.3f of η\n", worst);
}

// The model against an emulated accumulator of the kind published for NVIDIA tensor cores: exact
// products, every term (C included) aligned to the largest exponent and truncated toward zero to
// `bits` significant bits, an exact sum, the result truncated to fp32. Returns the largest
// |D − exact| / (|C| + Σ|a·b|) over adversarial fp16-valued groups of 16 products.
double WorstRelativeError(int bits, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto fp16_value = [&](int emin, int emax) {  // a random normal fp16 value with exponent in [emin, emax]
    const int e = std::uniform_int_distribution<int>(emin, emax)(rng);
    const double m = 1.0 + static_cast<double>(rng() & 0x3ff) / 1024.0;
    return std::ldexp((rng() & 1) ? -m : m, e);
  };
  double worst = 0.0;
  for (int trial = 0; trial < 200000; ++trial) {
    double t[17];
    const int pattern = trial % 3;
    for (int k = 0; k < 16; ++k) {
      // 0: the full range; 1: one dominant product and small ones with busy low bits; 2: alike terms.
      const double a = pattern == 1 ? (k == 0 ? fp16_value(10, 15) : fp16_value(-8, -2)) : fp16_value(pattern == 0 ? -14 : -1, pattern == 0 ? 15 : 1);
      const double b = pattern == 1 ? fp16_value(-2, 2) : fp16_value(pattern == 0 ? -14 : -1, pattern == 0 ? 15 : 1);
      // Pattern 1's small products share one sign, so their truncations add up instead of cancelling.
      t[k] = pattern == 1 && k > 0 ? std::fabs(a * b) : a * b;  // exact: 22 significant bits
    }
    t[16] = pattern == 2 ? static_cast<float>(fp16_value(3, 6)) : 0.0;  // C
    double mx = 0.0, abs_sum = 0.0, exact = 0.0;
    for (double x : t) {
      mx = std::max(mx, std::fabs(x));
      abs_sum += std::fabs(x);
    }
    if (mx == 0.0) continue;
    int e_max = 0;
    std::frexp(mx, &e_max);  // mx < 2^e_max
    const double unit = std::ldexp(1.0, e_max - bits);  // `bits` bits below the largest term's top
    double aligned = 0.0;
    for (double x : t) {
      exact += x;  // not exact in general; the error is ≤ 17·2^-53 of abs_sum, far below what is measured
      aligned += std::trunc(x / unit) * unit;
    }
    float d = static_cast<float>(aligned);  // round to nearest, then toward zero if that rounded away
    if (std::fabs(static_cast<double>(d)) > std::fabs(aligned)) d = std::nextafterf(d, 0.0f);
    worst = std::max(worst, std::fabs(static_cast<double>(d) - exact) / abs_sum);
  }
  return worst;
}

TEST(TcLogitEta, ModelCoversATruncatingAccumulatorOf23Bits) {
  // A truncating accumulator errs by < 1 unit per term plus fp32's final truncation: with 17 terms and
  // 23 bits, < 17·2^-22 + 2^-23 of the largest term, inside μ = 2^-16 (the measured H200 sits at
  // ≤ 2.3·2^-23, mma_rounding_model_test).
  const double worst = WorstRelativeError(23, 7);
  EXPECT_LE(worst, cuda_kv::kTcMu);
  EXPECT_GT(worst, 0.0);
  std::printf("a 23-bit truncating accumulator: worst error %.3g of the absolute sum (the model allows %.3g)\n", worst,
              cuda_kv::kTcMu);
}

TEST(TcLogitEta, ModelRejectsAnAccumulatorOf20Bits) {
  // The emulation finds a violation where the model does not hold, so the test above can fail.
  EXPECT_GT(WorstRelativeError(20, 7), cuda_kv::kTcMu);
}

}  // namespace
}  // namespace witcert
