#include "engine/runtime/sampler.h"

#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace witcert {
namespace {

std::vector<float> Logits() { return {1.0f, 3.0f, 2.0f, -1.0f, 2.5f}; }

int32_t SampleOnce(const SamplingParams& p, std::vector<int32_t> generated = {}) {
  Sampler s(p);
  std::vector<float> l = Logits();
  return s.Sample(absl::MakeSpan(l), generated).token;
}

TEST(SamplerTest, GreedyPicksArgmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(SampleOnce(p), 1);
}

TEST(SamplerTest, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  Sampler a(p), b(p);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> la = Logits(), lb = Logits();
    EXPECT_EQ(a.Sample(absl::MakeSpan(la), {}).token, b.Sample(absl::MakeSpan(lb), {}).token);
  }
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    p.seed = seed;
    EXPECT_EQ(SampleOnce(p), 1);
  }
}

TEST(SamplerTest, TopPKeepsOnlyTheNucleus) {
  // Probabilities at T=1: token 1 has the largest mass (~0.47) → top_p 0.3 keeps only it.
  SamplingParams p;
  p.top_p = 0.3f;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    p.seed = seed;
    EXPECT_EQ(SampleOnce(p), 1);
  }
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  // p(4)/p(1) = e^-0.5 ≈ 0.61, p(2)/p(1) = e^-1 ≈ 0.37: min_p 0.5 keeps tokens 1 and 4.
  SamplingParams p;
  p.min_p = 0.5f;
  std::map<int32_t, int> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    p.seed = seed;
    ++seen[SampleOnce(p)];
  }
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[4], 0);
  EXPECT_EQ(seen.size(), 2u);
}

TEST(SamplerTest, EmpiricalFrequenciesFollowSoftmax) {
  SamplingParams p;
  p.seed = 7;
  Sampler s(p);
  const std::vector<float> base = Logits();
  double z = 0;
  for (float l : base) z += std::exp(l);
  std::vector<int> counts(base.size());
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = base;
    ++counts[s.Sample(absl::MakeSpan(l), {}).token];
  }
  for (size_t t = 0; t < base.size(); ++t) {
    const double expected = std::exp(base[t]) / z;
    // 5 standard deviations of a binomial proportion.
    const double sd = std::sqrt(expected * (1 - expected) / n);
    EXPECT_NEAR(counts[t] / static_cast<double>(n), expected, 5 * sd + 1e-4) << "token " << t;
  }
}

TEST(SamplerTest, PenaltiesDemoteGeneratedTokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.frequency_penalty = 0.6f;
  // Token 1 (logit 3) generated twice: 3 - 1.2 = 1.8 < 2.5 → token 4 wins.
  EXPECT_EQ(SampleOnce(p, {1, 1}), 4);
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.4f;
  // Presence only: 3 - 0.4 = 2.6 > 2.5 → token 1 still wins.
  EXPECT_EQ(SampleOnce(p, {1, 1}), 1);
}

TEST(SamplerTest, LogprobsAreOfTheRawDistribution) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = true;
  p.top_logprobs = 3;
  p.frequency_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> l = Logits();
  SampledToken t = s.Sample(absl::MakeSpan(l), {1});
  double z = 0;
  for (float x : Logits()) z += std::exp(x);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].token, 1);
  EXPECT_NEAR(t.top[0].logprob, 3.0 - std::log(z), 1e-5);
  EXPECT_EQ(t.top[1].token, 4);
  // The chosen token (penalties moved it to 4) reports its raw log-probability.
  EXPECT_EQ(t.token, 4);
  EXPECT_NEAR(t.logprob, 2.5 - std::log(z), 1e-5);
}

// logit_bias (OpenAI): added to the logits before the penalties. Logits {1, 3, 2, -1, 2.5}:
// +1 on token 2 makes it 3.0, tying token 1 (argmax keeps the first, 1); +1.5 makes it 3.5 and
// it wins; −100 on token 1 leaves 2.5 (token 4) on top; ids outside the vocabulary are
// ignored. Bias and penalties stack (token 4: 2.5 + 1 − 2·0.6 = 2.3 < 2 + 0.5 = 2.5 for token
// 2). The chosen token's logprob stays the raw distribution's, and device sampling is off.
TEST(SamplerTest, LogitBiasShiftsLogitsBeforePenalties) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logit_bias = {{2, 1.0f}};
  EXPECT_EQ(SampleOnce(p), 1);
  p.logit_bias = {{2, 1.5f}};
  EXPECT_EQ(SampleOnce(p), 2);
  p.logit_bias = {{1, -100.0f}, {99, 50.0f}, {-3, 50.0f}};
  EXPECT_EQ(SampleOnce(p), 4);
  p.logit_bias = {{1, -100.0f}, {4, 1.0f}, {2, 0.5f}};
  p.frequency_penalty = 0.6f;
  EXPECT_EQ(SampleOnce(p, {4, 4}), 2);
  EXPECT_FALSE(Sampler(p).CanSampleOnDevice());

  SamplingParams lp;
  lp.temperature = 0.0f;
  lp.logprobs = true;
  lp.logit_bias = {{3, 10.0f}};  // −1 + 10 = 9: token 3 forced
  Sampler s(lp);
  std::vector<float> l = Logits();
  SampledToken t = s.Sample(absl::MakeSpan(l), {});
  double z = 0;
  for (float x : Logits()) z += std::exp(x);
  EXPECT_EQ(t.token, 3);
  EXPECT_NEAR(t.logprob, -1.0 - std::log(z), 1e-5);
}

// Repetition penalty (HF / vLLM) over the whole sequence, prompt included: logits {1, 3, 2, −1,
// 2.5}; with penalty 2 and token 1 in the prompt, 3 / 2 = 1.5 < 2.5: token 4 wins; once token 4
// is generated too, 2.5 / 2 = 1.25 < 2 (token 2) wins; a negative logit is multiplied (token 3:
// −1 → −2, still last). The penalty keeps its token set as the sequence grows between calls.
TEST(SamplerTest, RepetitionPenaltyCoversPromptAndOutput) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  std::vector<int32_t> sequence = {1, 3};  // the prompt
  std::vector<float> l = Logits();
  EXPECT_EQ(s.Sample(absl::MakeSpan(l), {}, sequence).token, 4);
  sequence.push_back(4);
  l = Logits();
  EXPECT_EQ(s.Sample(absl::MakeSpan(l), {4}, sequence).token, 2);
  EXPECT_FALSE(s.CanSampleOnDevice());
  p.repetition_penalty = 1.0f;
  EXPECT_EQ(SampleOnce(p, {}), 1);  // 1 → off
}

// Banned tokens (min_tokens: end-of-generation not yet allowed) are never picked, greedy or not,
// and report their raw logprob if asked.
TEST(SamplerTest, BannedTokensAreNeverPicked) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler greedy(p);
  std::vector<float> l = Logits();
  EXPECT_EQ(greedy.Sample(absl::MakeSpan(l), {}, {}, std::vector<int32_t>{1, 4}).token, 2);
  p.temperature = 1.0f;
  p.seed = 3;
  Sampler s(p);
  for (int i = 0; i < 200; ++i) {
    l = Logits();
    const int32_t t = s.Sample(absl::MakeSpan(l), {}, {}, std::vector<int32_t>{1, 2, 4}).token;
    EXPECT_TRUE(t == 0 || t == 3) << t;
  }
}

// Tokens masked out before sampling (logit −inf: JSON mode, guided choice) are not listed as
// alternatives, so top_logprobs never reports −inf.
TEST(SamplerTest, MaskedTokensAreNoAlternatives) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = true;
  p.top_logprobs = 5;
  Sampler s(p);
  std::vector<float> l = Logits();
  l[1] = l[3] = -std::numeric_limits<float>::infinity();
  const SampledToken t = s.Sample(absl::MakeSpan(l), {});
  ASSERT_EQ(t.top.size(), 3u);
  for (const TokenLogprob& alt : t.top) EXPECT_TRUE(std::isfinite(alt.logprob)) << alt.token;
  EXPECT_EQ(t.token, 4);
}

}  // namespace
}  // namespace witcert
