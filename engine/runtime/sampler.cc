#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"

namespace witcert {
namespace {

// log-softmax value of every logit, returned as (max, log Σ exp(l - max)).
std::pair<float, double> LogSumExpParts(absl::Span<const float> logits) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, l);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_logit));
  return {max_logit, std::log(sum)};
}

}  // namespace

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed ? *params.seed : std::random_device{}()) {}

SampledToken Sampler::Sample(absl::Span<float> logits, absl::Span<const int32_t> generated) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  SampledToken result;

  // Logprobs are reported for the model's distribution, before any request shaping.
  const auto lse_parts = LogSumExpParts(logits);
  const float raw_max = lse_parts.first;
  const double raw_log_sum = lse_parts.second;
  auto raw_logprob = [&](int32_t t) {
    return static_cast<float>(logits[t] - raw_max - raw_log_sum);
  };
  std::vector<TokenLogprob> top;
  if (params_.top_logprobs > 0) {
    const int32_t k = std::min(params_.top_logprobs, vocab);
    std::vector<int32_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (int32_t i = 0; i < k; ++i) top.push_back({ids[i], raw_logprob(ids[i])});
  }

  absl::flat_hash_map<int32_t, float> raw_penalized;  // original logits of penalized tokens
  // Penalties (OpenAI): logit -= presence · [count > 0] + frequency · count.
  if ((params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) &&
      !generated.empty()) {
    absl::flat_hash_map<int32_t, int32_t> counts;
    for (int32_t t : generated) ++counts[t];
    for (auto [t, c] : counts) {
      if (t < 0 || t >= vocab) continue;
      raw_penalized.emplace(t, logits[t]);
      logits[t] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(c);
    }
  }

  int32_t chosen = 0;
  if (params_.temperature <= 0.0f) {
    chosen = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    // Candidates sorted by logit, truncated by top-k.
    candidates_.resize(vocab);
    std::iota(candidates_.begin(), candidates_.end(), 0);
    int32_t keep = vocab;
    if (params_.top_k > 0 && params_.top_k < vocab) keep = params_.top_k;
    auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b]; };
    if (keep < vocab) {
      std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(),
                        by_logit);
      candidates_.resize(keep);
    } else {
      std::sort(candidates_.begin(), candidates_.end(), by_logit);
    }
    // Softmax at temperature over the candidates.
    const float inv_t = 1.0f / params_.temperature;
    const float top_logit = logits[candidates_[0]];
    probs_.resize(candidates_.size());
    double total = 0.0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      probs_[i] = std::exp((logits[candidates_[i]] - top_logit) * inv_t);
      total += probs_[i];
    }
    for (float& p : probs_) p = static_cast<float>(p / total);
    size_t n = candidates_.size();
    // top-p: smallest prefix whose mass reaches top_p (at least one token).
    if (params_.top_p < 1.0f) {
      double mass = 0.0;
      size_t cut = n;
      for (size_t i = 0; i < n; ++i) {
        mass += probs_[i];
        if (mass >= params_.top_p) { cut = i + 1; break; }
      }
      n = std::max<size_t>(1, cut);
    }
    // min-p: relative to the most likely token.
    if (params_.min_p > 0.0f) {
      const float floor_p = params_.min_p * probs_[0];
      size_t cut = 1;
      while (cut < n && probs_[cut] >= floor_p) ++cut;
      n = cut;
    }
    double kept = 0.0;
    for (size_t i = 0; i < n; ++i) kept += probs_[i];
    std::uniform_real_distribution<double> uniform(0.0, kept);
    const double r = uniform(rng_);
    double acc = 0.0;
    chosen = candidates_[n - 1];
    for (size_t i = 0; i < n; ++i) {
      acc += probs_[i];
      if (r < acc) { chosen = candidates_[i]; break; }
    }
  }
  result.token = chosen;
  const auto raw = raw_penalized.find(chosen);
  const float raw_logit = raw == raw_penalized.end() ? logits[chosen] : raw->second;
  result.logprob = static_cast<float>(raw_logit - raw_max - raw_log_sum);
  result.top = std::move(top);
  return result;
}

}  // namespace witcert
