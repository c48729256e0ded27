// libFuzzer entry point for the OpenAI request parser: any bytes must yield either a parsed
// request satisfying the limits or a 4xx error whose body is valid JSON; never a crash, an
// exception or an out-of-range value.
#include <cstdint>
#include <algorithm>
#include <string_view>

#include "engine/gate/gate_policy.h"
#include "server/http/openai_request.h"
#include "tests/testing/fuzz_check.h"

using witcert::testing::FuzzCheck;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace witcert::http;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const ParseLimits limits;
  for (Endpoint endpoint : {Endpoint::kChat, Endpoint::kCompletion}) {
    GenerationRequest out;
    ApiError error;
    if (ParseGenerationRequest(body, endpoint, limits, &out, &error)) {
      FuzzCheck(out.stop.max_tokens >= 1 && out.stop.max_tokens <= limits.max_tokens_limit);
      FuzzCheck(out.stop.stop.size() <= static_cast<size_t>(limits.max_stop_strings));
      FuzzCheck(out.sampling.temperature >= 0.0f && out.sampling.temperature <= 2.0f);
      FuzzCheck(out.sampling.top_p > 0.0f && out.sampling.top_p <= 1.0f);
      FuzzCheck(out.sampling.top_logprobs >= 0 && out.sampling.top_logprobs <= 20);
      if (endpoint == Endpoint::kChat) FuzzCheck(!out.messages.empty());
      else FuzzCheck(!out.prompts.empty() && out.prompts.size() <= static_cast<size_t>(kMaxPrompts));
      for (const CompletionPrompt& p : out.prompts) {
        FuzzCheck(p.is_tokens ? !p.tokens.empty() : !p.text.empty());
        for (int32_t t : p.tokens) FuzzCheck(t >= 0);
      }
      FuzzCheck(out.n >= 1 && out.n * std::max<size_t>(1, out.prompts.size()) <= kMaxChoicesPerResponse);
      FuzzCheck(out.stop.min_tokens >= 0 && out.stop.min_tokens <= out.stop.max_tokens);
      FuzzCheck(!out.gate.tier_b_form || witcert::ParseTierBForm(*out.gate.tier_b_form).ok());
    } else {
      FuzzCheck(error.http_status >= 400 && error.http_status < 500);
      FuzzCheck(!error.message.empty());
      FuzzCheck(nlohmann::json::accept(error.Body()));
    }
  }
  return 0;
}
