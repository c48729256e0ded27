// Tier A's ε in the tensor-core decode's integer form (kernels/cuda/tier_a_digits.cuh) against
// Σ_b f_b·c_b·U in fp64: never below it (the bound must stay sound), and above it by no more than
// the digits' rounding (< 1 digit unit a band) and the three upward roundings. Random heads and
// the edges: a largest factor whose digit rounds up to 2^16 (the exponent moves up), factors
// spread over 2^200, subnormal and all-zero heads, units of 0 and near the fp32 maximum, codes 0
// and 255; a non-finite factor gives a non-finite ε.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/cuda/tier_a_digits_cuda.h"

namespace witcert {
namespace {

float Bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Random heads (factors over a few decades) and the edge heads the tests share.
std::vector<std::vector<float>> TestHeads(std::mt19937& rng) {
  std::vector<std::vector<float>> heads;
  std::uniform_real_distribution<float> unit01(0.0f, 1.0f);
  for (int h = 0; h < 400; ++h) {  // random: factors over a few decades
    std::vector<float> f(8);
    const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
    for (float& x : f) x = scale * std::pow(10.0f, -3.0f * unit01(rng));
    heads.push_back(f);
  }
  heads.push_back({Bits(0x3f7fffff), 0.5f, 0.25f, 1e-3f, 0.0f, 0.9f, Bits(0x3f7ffffe), 0.1f});  // digit → 2^16
  heads.push_back({Bits(0x477fffff), 1.0f, 1e-12f, 0.0f, 0.0f, 3.0f, 7.0f, 65535.0f});
  heads.push_back({1e30f, 1e-30f, 1.0f, 0.0f, 1e10f, 1e-10f, 1e20f, 2.0f});             // a spread of 2^200
  heads.push_back({1e-40f, 3e-42f, 0.0f, 1e-45f, 2e-39f, 0.0f, 5e-41f, 1e-44f});       // subnormal
  heads.push_back({1e-37f, 1e-45f, 2e-38f, 0.0f, 1.2e-38f, 3e-39f, 0.0f, 1e-40f});      // around 2^-126
  heads.push_back({0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
  return heads;
}

TEST(TierADigits, EpsilonIsNeverBelowTheExactSumAndBarelyAbove) {
  WITCERT_SKIP_WITHOUT_GPU();
  std::mt19937 rng(2026);
  std::uniform_real_distribution<float> unit01(0.0f, 1.0f);
  const std::vector<std::vector<float>> heads = TestHeads(rng);
  const int64_t tokens = 24;
  std::vector<float> factors;
  std::vector<uint8_t> codes;
  std::vector<float> units;
  for (const auto& f : heads) {
    factors.insert(factors.end(), f.begin(), f.end());
    for (int64_t t = 0; t < tokens; ++t) {
      for (int b = 0; b < 8; ++b) {
        const uint32_t r = rng() % 8;
        codes.push_back(static_cast<uint8_t>(r == 0 ? 0 : (r == 1 ? 255 : rng() % 256)));
      }
      const uint32_t r = rng() % 10;
      units.push_back(r == 0 ? 0.0f : (r == 1 ? 1e30f : (r == 2 ? 1e-30f : std::ldexp(unit01(rng), -8))));
    }
  }
  std::vector<float> eps;
  ASSERT_CUDA_OK(testing::TierAEpsilonOfDigitsCuda(factors, codes, units, tokens, &eps));
  int64_t checked = 0;
  std::vector<double> excess;  // relative, where the sum is a normal fp32
  for (size_t h = 0; h < heads.size(); ++h) {
    double fmax = 0.0;
    for (float x : heads[h]) fmax = std::max(fmax, static_cast<double>(x));
    // One digit unit: fmax·2^-15 (or less), at least the least fp32 below 2^-134.
    const double digit_unit = std::max(fmax * std::ldexp(1.0, -15), std::ldexp(1.0, -149));
    for (int64_t t = 0; t < tokens; ++t) {
      const size_t i = h * tokens + t;
      double exact = 0.0, code_sum = 0.0;
      for (int b = 0; b < 8; ++b) {
        exact += static_cast<double>(heads[h][b]) * codes[i * 8 + b];
        code_sum += codes[i * 8 + b];
      }
      exact *= units[i];
      const double e = eps[i];
      SCOPED_TRACE("head " + std::to_string(h) + " token " + std::to_string(t));
      if (exact > 3.4e38) {  // beyond fp32: the bound must be +inf
        EXPECT_EQ(e, std::numeric_limits<float>::infinity());
        continue;
      }
      ASSERT_GE(e, exact * (1.0 - 1e-15)) << "below the exact sum (exact " << exact << ")";
      const double allowed = (exact + code_sum * digit_unit * units[i]) * (1.0 + 4.0 * std::ldexp(1.0, -23)) +
                             2.0 * std::ldexp(1.0, -149);
      if (std::isinf(e)) {
        EXPECT_GT(allowed, 3.4028234663852886e38) << "exact " << exact;  // rounded up past the fp32 range
      } else {
        EXPECT_LE(e, allowed) << "exact " << exact;
      }
      if (exact > 1e-30) excess.push_back(e / exact - 1.0);
      ++checked;
    }
  }
  EXPECT_GT(checked, 9000);
  // 16-bit digits: the median token's ε is within 1e-3 of the exact sum (8-bit digits would be
  // ~100× looser on these heads).
  ASSERT_GT(excess.size(), 5000u);
  std::nth_element(excess.begin(), excess.begin() + excess.size() / 2, excess.end());
  EXPECT_LT(excess[excess.size() / 2], 1e-3);
}

// The prefill kernels' tensor-core form gives the dp2a form's ε bit for bit (NaN where it is NaN):
// the digits split 32·hi + lo, the codes as fp16, two MMAs, one rounding up. Codes 255 against
// digits near 2^16 are the largest sums the MMAs must keep exact.
TEST(TierADigits, TensorCoreFormEqualsTheDp2aForm) {
  WITCERT_SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  std::vector<std::vector<float>> heads = TestHeads(rng);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  heads.push_back({1.0f, inf, 2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
  heads.push_back({nan, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
  heads.push_back({1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f});  // every digit 65535 or near it
  while (heads.size() % 16 != 0) heads.push_back(heads[rng() % heads.size()]);
  const int64_t tokens = 64;
  std::vector<float> factors;
  for (const auto& f : heads) factors.insert(factors.end(), f.begin(), f.end());
  std::vector<uint8_t> codes;
  std::vector<float> units;
  std::uniform_real_distribution<float> unit01(0.0f, 1.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int b = 0; b < 8; ++b) {
      const uint32_t r = rng() % 6;
      codes.push_back(static_cast<uint8_t>(t < 8 || r == 1 ? 255 : (r == 0 ? 0 : rng() % 256)));
    }
    const uint32_t r = rng() % 10;
    units.push_back(r == 0 ? 0.0f : (r == 1 ? 1e30f : (r == 2 ? 1e-30f : std::ldexp(unit01(rng), -8))));
  }
  std::vector<float> dp2a, mma;
  ASSERT_CUDA_OK(testing::TierAEpsilonBothFormsCuda(factors, codes, units, &dp2a, &mma));
  ASSERT_EQ(dp2a.size(), heads.size() * tokens);
  int64_t nans = 0, positive = 0;
  for (size_t i = 0; i < dp2a.size(); ++i) {
    SCOPED_TRACE("row " + std::to_string(i / tokens) + " token " + std::to_string(i % tokens));
    if (std::isnan(dp2a[i])) {
      EXPECT_TRUE(std::isnan(mma[i])) << mma[i];
      ++nans;
    } else {
      ASSERT_EQ(std::memcmp(&dp2a[i], &mma[i], 4), 0) << dp2a[i] << " vs " << mma[i];
      positive += dp2a[i] > 0.0f;
    }
  }
  EXPECT_GT(nans, 0);
  EXPECT_GT(positive, static_cast<int64_t>(dp2a.size()) / 2);
}

TEST(TierADigits, NonFiniteFactorGivesNonFiniteEpsilon) {
  WITCERT_SKIP_WITHOUT_GPU();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> factors = {1.0f, inf, 2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
                                      nan,  1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<uint8_t> codes = {1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9, 9, 9, 9, 9};
  std::vector<float> eps;
  ASSERT_CUDA_OK(testing::TierAEpsilonOfDigitsCuda(factors, codes, {0.5f, 0.5f}, 1, &eps));
  for (float e : eps) EXPECT_FALSE(std::isfinite(e)) << e;
}

}  // namespace
}  // namespace witcert
