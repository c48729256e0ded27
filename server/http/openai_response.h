// Building OpenAI response bodies: chat.completion, chat.completion.chunk, text_completion
// (whole and streamed), usage and the two logprobs formats.
//
// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
// Completions logprobs: {"tokens", "token_logprobs", "top_logprobs": [{tok: lp}],
// "text_offset"}. Token text is the token's raw bytes; a token holding part of a UTF-8
// character serializes with U+FFFD and its exact bytes are in "bytes".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/request.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/http/openai_request.h"

namespace witcert::http {

struct ResponseMeta {
  std::string id;       // chatcmpl-… / cmpl-…
  int64_t created = 0;  // unix seconds
  std::string model;
};

// "stop" | "length" (cancelled and error never reach a client as a finish reason).
const char* OpenAiFinishReason(FinishReason reason);

nlohmann::json UsageJson(const Usage& usage);

// Logprobs of `tokens` in the endpoint's format; `text_offset` is where the first token's
// text starts in the completion (completions format only).
nlohmann::json ChatLogprobs(const std::vector<SampledToken>& tokens, const Tokenizer& tokenizer);
nlohmann::json CompletionLogprobs(const std::vector<SampledToken>& tokens,
                                  const Tokenizer& tokenizer, int64_t text_offset);

// One choice of a whole response.
struct ChoiceResult {
  std::string text;
  const char* finish_reason = nullptr;
  nlohmann::json logprobs;  // null when not requested
  nlohmann::json witcert;   // the choice's own report, written into the choice unless null
};

// Whole (non-streaming) response: choices[i] has index i; `witcert` is the response's report.
nlohmann::json FullResponse(Endpoint endpoint, const ResponseMeta& meta,
                            const std::vector<ChoiceResult>& choices, const Usage& usage,
                            const nlohmann::json& witcert);

// One streamed chunk of choice `index`. `text` is the delta; `role` adds {"role":"assistant"}
// (chat's first chunk of each choice); null logprobs / finish_reason are sent as null.
nlohmann::json StreamChunk(Endpoint endpoint, const ResponseMeta& meta, int32_t index,
                           const std::string& text, bool role, const nlohmann::json& logprobs,
                           const char* finish_reason);
// stream_options.include_usage: the final chunk with empty choices.
nlohmann::json UsageChunk(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage);

// `data: <json>\n\n`
std::string SseEvent(const nlohmann::json& payload);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

}  // namespace witcert::http
