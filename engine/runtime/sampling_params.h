// What a request says about how to pick each next token, and when to stop.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace witcert {

struct SamplingParams {
  float temperature = 1.0f;  // 0 → greedy (argmax)
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  int32_t top_k = 0;         // 0 → off
  float min_p = 0.0f;        // drop tokens with p < min_p · p_max; 0 → off
  float presence_penalty = 0.0f;   // OpenAI semantics, subtracted from logits of seen tokens
  float frequency_penalty = 0.0f;  // times the count of each generated token
  // (token, bias) added to that token's logit before the penalties (OpenAI logit_bias; ±100
  // bans or forces a token). Ids outside the vocabulary are ignored.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // HF / vLLM repetition penalty over every token of the sequence (prompt and generated): a
  // positive logit is divided by it, a negative one multiplied; 1 → off.
  float repetition_penalty = 1.0f;
  // JSON mode (response_format json_object): only tokens that keep the output a prefix of one
  // JSON object, then end-of-generation (engine/runtime/json_prefix.h).
  bool json_object = false;
  // vLLM's guided_choice: the output is exactly one of these (engine/runtime/choice_constraint.h).
  std::vector<std::string> guided_choice;
  std::optional<uint64_t> seed;    // unset → seeded from a random device
  int32_t top_logprobs = 0;        // return this many alternatives per token (0..20)
  bool logprobs = false;           // fill SampledToken::logprob (else it is 0)
};

struct StopCondition {
  int32_t max_tokens = 256;            // generated tokens
  std::vector<std::string> stop;       // stop strings; the match is not emitted
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids; // more tokens that end generation as EOS does (vLLM)
  // End-of-generation tokens and stop_token_ids cannot be sampled before this many tokens
  // (vLLM's min_tokens); 0 → no floor.
  int32_t min_tokens = 0;
};

}  // namespace witcert
