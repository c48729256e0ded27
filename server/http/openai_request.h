// Parsing and validating OpenAI request bodies (/v1/chat/completions, /v1/completions) into
// what the engine needs. Pure: no engine, no sockets, so it is unit tested and fuzzed alone.
//
// Every rejection names the offending parameter (`param` in the error body), the way
// OpenAI's API does. Parameters WitCert does not implement (tools, logit_bias, n > 1, batch
// prompts, echo, suffix, best_of > 1, non-text response_format) are rejected, never silently
// ignored; unknown extra fields are ignored as vLLM does, so newer clients keep working.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/request.h"
#include "engine/runtime/sampling_params.h"
#include "engine/tokenizer/chat_template.h"
#include "server/http/api_error.h"

namespace witcert::http {

enum class Endpoint { kChat, kCompletion };

// The request's `witcert` object: asks to tighten the gate policy in force.
struct GateRequest {
  std::optional<std::string> mode;  // "off" | "observe" | "repair" (validated)
  std::optional<double> tv_threshold;
  std::optional<double> v_threshold;
  std::optional<double> delta;
  std::optional<int32_t> pagein_budget;
  std::optional<std::string> tier_b_form;  // "per-token" | "scale-only" | "split-max" (validated)
  bool any() const {
    return mode || tv_threshold || v_threshold || delta || pagein_budget || tier_b_form;
  }
};

// One prompt of a completions request: text, or token ids.
struct CompletionPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  bool is_tokens = false;
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                       // "" when absent
  std::vector<ChatMessage> messages;       // chat
  bool add_generation_prompt = true;       // chat: end with the assistant's header
  bool continue_final_message = false;     // chat: continue the final (assistant) message
  std::vector<CompletionPrompt> prompts;   // completions: one, or a batch (choices per prompt)
  int32_t n = 1;                           // choices: n engine requests on one prompt
  bool echo = false;                       // completions: the prompt's text before each choice's
  bool stream = false;
  bool include_usage = false;
  SamplingParams sampling;
  StopCondition stop;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  GateRequest gate;
};

// Most choices one request may ask for (`n`). The lists' limits (stop strings, logit_bias, …)
// are the engine's (engine/runtime/request.h).
inline constexpr int32_t kMaxChoices = 16;
// Most prompts one completions request may batch, and most choices (prompts × n) in all.
inline constexpr int32_t kMaxPrompts = 16;
inline constexpr int32_t kMaxChoicesPerResponse = 64;

struct ParseLimits {
  // What unset sampling fields take (LoadedEngine::sampling_defaults: the checkpoint's
  // generation_config.json, as vLLM applies it).
  SamplingParams sampling_defaults;
  int32_t max_tokens_limit = 4096;
  int32_t default_max_tokens = 256;
  int32_t max_stop_strings = static_cast<int32_t>(kMaxStopStrings);  // at most the engine's
  int32_t max_messages = 4096;
};

// Returns true and fills `out`, or false and fills `error` (always a 4xx).
bool ParseGenerationRequest(std::string_view body, Endpoint endpoint, const ParseLimits& limits,
                            GenerationRequest* out, ApiError* error);

// A chat request's prompt text: the template with a generation prompt (or not), or continuing
// the final assistant message (continue_final_message).
absl::StatusOr<std::string> RenderChatPrompt(const ChatTemplate& chat_template, const GenerationRequest& request);

// Parses `body` as a JSON object; false with a 400 error for malformed JSON, invalid UTF-8
// or a non-object.
bool ParseJsonObject(std::string_view body, nlohmann::json* out, ApiError* error);

}  // namespace witcert::http
