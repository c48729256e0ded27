// Picks the next token from logits: logit bias → penalties (repetition, presence, frequency) →
// banned tokens → temperature → top-k → top-p → min-p → draw.
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
  // produced so far (the presence and frequency penalties apply to them only, as in OpenAI's
  // API); `sequence` all its tokens, prompt first (the repetition penalty's; it only grows
  // between calls); `banned` ids that must not be picked (vLLM's min_tokens).
  SampledToken Sample(absl::Span<float> logits, absl::Span<const int32_t> generated,
                      absl::Span<const int32_t> sequence = {}, absl::Span<const int32_t> banned = {});

  // Device sampling (Backend::SamplesOnDevice): true when the device can pick this sequence's
  // tokens (no logprobs asked for: they need the host's full distribution).
  // Logit bias and the repetition penalty too are applied on the host only.
  bool CanSampleOnDevice() const {
    return !params_.logprobs && params_.top_logprobs == 0 && params_.logit_bias.empty() &&
           params_.repetition_penalty == 1.0f && !params_.json_object && params_.guided_choice.empty();
  }
  // The next token's uniform draw U[0, 1) from this sequence's RNG, consumed as Sample would
  // (one draw per token, none when greedy), so a seed fixes the draws on either path.
  double NextUniform();
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> candidates_;  // scratch: token ids
  std::vector<float> probs_;         // scratch: their probabilities
  // The repetition penalty's token set, grown from `sequence` as it grows.
  std::vector<uint8_t> seen_;        // [vocab] 1 when the token occurred
  std::vector<int32_t> seen_list_;   // those tokens, in first-seen order
  size_t absorbed_ = 0;              // sequence tokens folded into seen_
};

}  // namespace witcert
