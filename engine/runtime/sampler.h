// Picks the next token from logits: penalties → temperature → top-k → top-p → min-p → draw.
//
// Each sequence owns a Sampler whose RNG is seeded once, so a fixed seed reproduces the same
// tokens for the same logits regardless of how requests are batched.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "engine/runtime/sampling_params.h"

namespace witcert {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;  // log-softmax of the raw logits (before penalties and temperature)
};

struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // params.top_logprobs alternatives, most likely first
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // `logits` [vocab] is consumed as scratch. `generated` holds the tokens this sequence has
  // produced so far (penalties apply to them only, as in OpenAI's API).
  SampledToken Sample(absl::Span<float> logits, absl::Span<const int32_t> generated);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> candidates_;  // scratch: token ids
  std::vector<float> probs_;         // scratch: their probabilities
};

}  // namespace witcert
