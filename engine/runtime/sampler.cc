#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "kernels/cpu/vector_exp.h"

namespace witcert {
namespace {

// log-softmax value of every logit, returned as (max, log Σ exp(l - max)).
std::pair<float, double> LogSumExpParts(absl::Span<const float> logits) {
  const int64_t n = static_cast<int64_t>(logits.size());
  const float max_logit = MaxValue(logits.data(), n);
  return {max_logit, std::log(ExpShiftedSumOnly(logits.data(), n, max_logit, 1.0f))};
}

}  // namespace

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed ? *params.seed : std::random_device{}()) {}

double Sampler::NextUniform() {
  if (params_.temperature <= 0.0f) return 0.0;
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
}

SampledToken Sampler::Sample(absl::Span<float> logits, absl::Span<const int32_t> generated,
                             absl::Span<const int32_t> sequence, absl::Span<const int32_t> banned) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  SampledToken result;

  // Logprobs are reported for the model's distribution, before any request shaping. The
  // normalizer costs an exp per vocabulary entry, so it is computed only when asked for.
  const bool want_logprobs = params_.logprobs || params_.top_logprobs > 0;
  const auto lse_parts =
      want_logprobs ? LogSumExpParts(logits) : std::pair<float, double>{0.0f, 0.0};
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
    for (int32_t i = 0; i < k; ++i) {
      // A token masked out before sampling (JSON mode, guided choice) is no alternative.
      if (logits[ids[i]] == -std::numeric_limits<float>::infinity()) break;
      top.push_back({ids[i], raw_logprob(ids[i])});
    }
  }

  absl::flat_hash_map<int32_t, float> raw_penalized;  // original logits of shaped tokens
  for (const auto& [t, bias] : params_.logit_bias) {  // OpenAI logit_bias
    if (t < 0 || t >= vocab) continue;
    raw_penalized.emplace(t, logits[t]);
    logits[t] += bias;
  }
  // Repetition penalty (HF / vLLM) over every token the sequence holds.
  if (params_.repetition_penalty != 1.0f) {
    if (seen_.size() != static_cast<size_t>(vocab)) {
      seen_.assign(vocab, 0);
      seen_list_.clear();
      absorbed_ = 0;
    }
    for (; absorbed_ < sequence.size(); ++absorbed_) {
      const int32_t t = sequence[absorbed_];
      if (t >= 0 && t < vocab && !seen_[t]) {
        seen_[t] = 1;
        seen_list_.push_back(t);
      }
    }
    for (int32_t t : seen_list_) {
      raw_penalized.emplace(t, logits[t]);
      logits[t] = logits[t] > 0.0f ? logits[t] / params_.repetition_penalty : logits[t] * params_.repetition_penalty;
    }
  }
  // Penalties (OpenAI): logit -= presence · [count > 0] + frequency · count.
  if ((params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) &&
      !generated.empty()) {
    absl::flat_hash_map<int32_t, int32_t> counts;
    for (int32_t t : generated) ++counts[t];
    for (auto [t, c] : counts) {
      if (t < 0 || t >= vocab) continue;
      raw_penalized.emplace(t, logits[t]);  // keeps the first (raw) value of a biased token
      logits[t] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(c);
    }
  }

  for (int32_t t : banned) {
    if (t < 0 || t >= vocab) continue;
    raw_penalized.emplace(t, logits[t]);
    logits[t] = -std::numeric_limits<float>::infinity();
  }

  int32_t chosen = 0;
  if (params_.temperature <= 0.0f) {
    chosen = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    // Candidates: the top-k when asked (sorted), else the whole vocabulary (unsorted: a full
    // sort of 50k-150k logits per token would cost more than the sampling itself).
    candidates_.resize(vocab);
    std::iota(candidates_.begin(), candidates_.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    bool sorted = false;
    if (params_.top_k > 0 && params_.top_k < vocab) {
      std::partial_sort(candidates_.begin(), candidates_.begin() + params_.top_k,
                        candidates_.end(), by_logit);
      candidates_.resize(params_.top_k);
      sorted = true;
    }
    // Softmax at temperature over the candidates, relative to the largest logit. Unsorted
    // candidates are the whole vocabulary in id order: one vectorized pass over the logits.
    const float inv_t = 1.0f / params_.temperature;
    probs_.resize(candidates_.size());
    double total = 0.0;
    if (sorted) {
      const float top_logit = logits[candidates_[0]];
      for (size_t i = 0; i < candidates_.size(); ++i) {
        probs_[i] = ExpF((logits[candidates_[i]] - top_logit) * inv_t);
        total += probs_[i];
      }
    } else {
      const float top_logit = MaxValue(logits.data(), vocab);
      total = ExpShiftedSum(logits.data(), vocab, top_logit, inv_t, probs_.data());
    }
    // min-p: drop tokens below min_p times the most likely one (p_max ∝ 1 here).
    if (params_.min_p > 0.0f) {
      size_t kept = 0;
      for (size_t i = 0; i < candidates_.size(); ++i) {
        if (probs_[i] >= params_.min_p) {
          candidates_[kept] = candidates_[i];
          probs_[kept++] = probs_[i];
        }
      }
      candidates_.resize(kept);
      probs_.resize(kept);
      total = 0.0;
      for (float p : probs_) total += p;
    }
    size_t n = candidates_.size();
    // top-p: the smallest most-likely prefix whose mass reaches top_p. Sort only as far as
    // needed: the nucleus is usually a few dozen tokens.
    if (params_.top_p < 1.0f) {
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      auto by_prob = [&](size_t a, size_t b) {
        return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b);
      };
      const double target = params_.top_p * total;
      size_t k = std::min<size_t>(n, 64), cut = n;
      while (true) {
        if (!sorted) std::partial_sort(order.begin(), order.begin() + k, order.end(), by_prob);
        double mass = 0.0;
        for (size_t i = 0; i < k; ++i) {
          mass += probs_[order[i]];
          if (mass >= target) {
            cut = i + 1;
            break;
          }
        }
        if (cut < n || k == n) break;
        k = std::min(n, k * 4);
      }
      std::vector<int32_t> nucleus_tokens(cut);
      std::vector<float> nucleus_probs(cut);
      total = 0.0;
      for (size_t i = 0; i < cut; ++i) {
        nucleus_tokens[i] = candidates_[order[i]];
        nucleus_probs[i] = probs_[order[i]];
        total += nucleus_probs[i];
      }
      candidates_ = std::move(nucleus_tokens);
      probs_ = std::move(nucleus_probs);
      n = cut;
    }
    std::uniform_real_distribution<double> uniform(0.0, total);
    const double r = uniform(rng_);
    double acc = 0.0;
    chosen = candidates_[n - 1];
    for (size_t i = 0; i < n; ++i) {
      acc += probs_[i];
      if (r < acc) {
        chosen = candidates_[i];
        break;
      }
    }
  }
  result.token = chosen;
  const auto raw = raw_penalized.find(chosen);
  const float raw_logit = raw == raw_penalized.end() ? logits[chosen] : raw->second;
  result.logprob = want_logprobs ? static_cast<float>(raw_logit - raw_max - raw_log_sum) : 0.0f;
  result.top = std::move(top);
  return result;
}

}  // namespace witcert
