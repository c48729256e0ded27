// RoPE frequency scaling as per-pair factors (engine/model/rope_scaling.h).
#include "engine/model/rope_scaling.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace witcert {
namespace {

// Llama 3.1 8B's config.json: rope_theta 500000, head_dim 128, rope_scaling {factor 8,
// low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192}. The expected
// factors were evaluated separately, in double, from transformers' _compute_llama3_parameters
// (θ_i' = θ_i/factor for wavelengths above 8192, θ_i for those below 2048, the blend between):
// pairs 0-28 keep their frequency, 35-63 are slowed 8×, and for example pair 29 (wavelength
// 2401.7) by 1.2074839, pair 32 (4442.9) by 2.6945297, pair 34 (6695.1) by 5.2573266.
TEST(RopeScaling, Llama3FactorsOfLlama31) {
  std::vector<float> f;
  ASSERT_TRUE(Llama3RopeFactors({8.0, 1.0, 4.0, 8192.0}, 500000.0, 128, &f).ok());
  ASSERT_EQ(f.size(), 64u);
  for (int i = 0; i <= 28; ++i) EXPECT_EQ(f[i], 1.0f) << i;
  for (int i = 35; i < 64; ++i) EXPECT_EQ(f[i], 8.0f) << i;
  EXPECT_NEAR(f[29], 1.2074839, 1e-6);
  EXPECT_NEAR(f[32], 2.6945297, 1e-6);
  EXPECT_NEAR(f[34], 5.2573266, 1e-6);
  for (int i = 1; i < 64; ++i) EXPECT_GE(f[i], f[i - 1]) << i;  // slower pairs are slowed more
  EXPECT_TRUE(ValidateRopeFactors(f, 128).ok());
}

TEST(RopeScaling, LinearIsOneFactorForEveryPair) {
  std::vector<float> f;
  ASSERT_TRUE(LinearRopeFactors(4.0, 64, &f).ok());
  ASSERT_EQ(f.size(), 32u);
  for (float x : f) EXPECT_EQ(x, 4.0f);
}

TEST(RopeScaling, BadParametersAreRefused) {
  std::vector<float> f;
  EXPECT_FALSE(Llama3RopeFactors({0.5, 1.0, 4.0, 8192.0}, 500000.0, 128, &f).ok());  // factor < 1
  EXPECT_FALSE(Llama3RopeFactors({8.0, 4.0, 4.0, 8192.0}, 500000.0, 128, &f).ok());  // low = high
  EXPECT_FALSE(Llama3RopeFactors({8.0, 1.0, 4.0, 0.0}, 500000.0, 128, &f).ok());
  EXPECT_FALSE(Llama3RopeFactors({NAN, 1.0, 4.0, 8192.0}, 500000.0, 128, &f).ok());
  EXPECT_FALSE(Llama3RopeFactors({8.0, 1.0, 4.0, 8192.0}, 500000.0, 127, &f).ok());
  EXPECT_FALSE(LinearRopeFactors(0.5, 64, &f).ok());
  EXPECT_FALSE(LinearRopeFactors(INFINITY, 64, &f).ok());
  EXPECT_TRUE(ValidateRopeFactors({}, 64).ok());
  const std::vector<float> short_list(31, 1.0f), with_zero = {1.0f, 0.0f}, with_nan = {1.0f, NAN};
  EXPECT_FALSE(ValidateRopeFactors(short_list, 64).ok());
  EXPECT_FALSE(ValidateRopeFactors(with_zero, 4).ok());
  EXPECT_FALSE(ValidateRopeFactors(with_nan, 4).ok());
}

}  // namespace
}  // namespace witcert
