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

// Qwen2.5-7B with the yarn block Qwen's model card adds for 128k: head_dim 128, rope_theta 10^6,
// factor 4 over an original window of 32768. Worked by hand: the pair turning 32 times over
// 32768 tokens sits at i = 128·ln(32768/(2π·32)) / (2·ln 10^6) = 23.6, the pair turning once
// at 39.7; rounded outwards the ramp runs from pair 23 to pair 40 (17 pairs). Pairs ≤ 23 keep
// their frequency (f = 1), pairs ≥ 40 are slowed 4×; pair 30 keeps e = 10/17 of its frequency,
// f = 1/((7/17)/4 + 10/17) = 68/47, and pair 35 keeps e = 5/17, f = 1/((12/17)/4 + 5/17) = 17/8.
TEST(RopeScaling, YarnFactorsOfQwen25) {
  std::vector<float> f;
  ASSERT_TRUE(YarnRopeFactors({.factor = 4.0, .original_context = 32768.0}, 1e6, 128, &f).ok());
  ASSERT_EQ(f.size(), 64u);
  for (int i = 0; i <= 23; ++i) EXPECT_EQ(f[i], 1.0f) << i;
  for (int i = 40; i < 64; ++i) EXPECT_EQ(f[i], 4.0f) << i;
  EXPECT_FLOAT_EQ(f[30], 68.0f / 47.0f);
  EXPECT_FLOAT_EQ(f[35], 17.0f / 8.0f);
  for (int i = 1; i < 64; ++i) EXPECT_GE(f[i], f[i - 1]) << i;
  EXPECT_TRUE(ValidateRopeFactors(f, 128).ok());
  EXPECT_NEAR(YarnAttentionFactor(4.0), 1.0 + 0.1 * std::log(4.0), 1e-15);
  EXPECT_NEAR(YarnAttentionFactor(4.0), 1.1386294, 1e-7);
  EXPECT_EQ(YarnAttentionFactor(1.0), 1.0);
  EXPECT_EQ(YarnAttentionFactor(0.5), 1.0);
  EXPECT_NEAR(YarnAttentionFactor(40.0, 0.707), 1.0 + 0.0707 * std::log(40.0), 1e-15);
}

// Without truncation the ramp keeps its fractional ends: head_dim 64, θ 10^4, factor 8, original
// window 2048 puts them at 8.064 and 20.105. The values below came from a separate evaluation of
// the published formula in double (Python). An extrapolation factor of 0 slows every pair by the
// full factor; 1/2 halves each pair's kept share.
TEST(RopeScaling, YarnUntruncatedRampAndExtrapolation) {
  std::vector<float> f;
  YarnRopeScaling s{.factor = 8.0, .original_context = 2048.0, .truncate = false};
  ASSERT_TRUE(YarnRopeFactors(s, 10000.0, 64, &f).ok());
  EXPECT_EQ(f[8], 1.0f);
  EXPECT_NEAR(f[10], 1.1637157, 1e-6);
  EXPECT_NEAR(f[12], 1.4005954, 1e-6);
  EXPECT_NEAR(f[20], 7.5389404, 2e-6);
  EXPECT_EQ(f[21], 8.0f);
  s.extrapolation = 0.0;
  ASSERT_TRUE(YarnRopeFactors(s, 10000.0, 64, &f).ok());
  for (float x : f) EXPECT_EQ(x, 8.0f);
  s.extrapolation = 0.5;
  ASSERT_TRUE(YarnRopeFactors(s, 10000.0, 64, &f).ok());
  EXPECT_FLOAT_EQ(f[0], 1.0f / (0.5f / 8.0f + 0.5f));
}

TEST(RopeScaling, IdentityScalingIsDropped) {
  std::vector<float> f(8, 1.0f);
  DropIdentityRopeScaling(1.1f, &f);
  EXPECT_EQ(f.size(), 8u);  // the attention factor still changes the model
  DropIdentityRopeScaling(1.0f, &f);
  EXPECT_TRUE(f.empty());
  f = {1.0f, 2.0f};
  DropIdentityRopeScaling(1.0f, &f);
  EXPECT_EQ(f.size(), 2u);
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
  EXPECT_FALSE(YarnRopeFactors({.factor = 0.5}, 1e6, 128, &f).ok());
  EXPECT_FALSE(YarnRopeFactors({.beta_fast = 1.0, .beta_slow = 1.0}, 1e6, 128, &f).ok());
  EXPECT_FALSE(YarnRopeFactors({.beta_slow = 0.0}, 1e6, 128, &f).ok());
  EXPECT_FALSE(YarnRopeFactors({.original_context = 0.0}, 1e6, 128, &f).ok());
  EXPECT_FALSE(YarnRopeFactors({.extrapolation = 1.5}, 1e6, 128, &f).ok());
  EXPECT_FALSE(YarnRopeFactors({}, 1.0, 128, &f).ok());  // θ = 1: no frequencies to ramp
  EXPECT_FALSE(ValidateRopeAttnFactor(0.0f).ok());
  EXPECT_FALSE(ValidateRopeAttnFactor(NAN).ok());
  EXPECT_TRUE(ValidateRopeAttnFactor(1.1386294f).ok());
  EXPECT_TRUE(ValidateRopeFactors({}, 64).ok());
  const std::vector<float> short_list(31, 1.0f), with_zero = {1.0f, 0.0f}, with_nan = {1.0f, NAN};
  EXPECT_FALSE(ValidateRopeFactors(short_list, 64).ok());
  EXPECT_FALSE(ValidateRopeFactors(with_zero, 4).ok());
  EXPECT_FALSE(ValidateRopeFactors(with_nan, 4).ok());
}

}  // namespace
}  // namespace witcert
