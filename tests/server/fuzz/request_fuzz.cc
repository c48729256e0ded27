// libFuzzer entry point for the OpenAI request parser: any bytes must yield either a parsed
// request satisfying the limits or a 4xx error whose body is valid JSON; never a crash, an
// exception or an out-of-range value.
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <string_view>

#include "engine/gate/gate_policy.h"
#include "server/http/openai_request.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();  // a fuzz target reports an invariant failure by crashing
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace witcert::http;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const ParseLimits limits;
  for (Endpoint endpoint : {Endpoint::kChat, Endpoint::kCompletion}) {
    GenerationRequest out;
    ApiError error;
    if (ParseGenerationRequest(body, endpoint, limits, &out, &error)) {
      Check(out.stop.max_tokens >= 1 && out.stop.max_tokens <= limits.max_tokens_limit);
      Check(out.stop.stop.size() <= static_cast<size_t>(limits.max_stop_strings));
      Check(out.sampling.temperature >= 0.0f && out.sampling.temperature <= 2.0f);
      Check(out.sampling.top_p > 0.0f && out.sampling.top_p <= 1.0f);
      Check(out.sampling.top_logprobs >= 0 && out.sampling.top_logprobs <= 20);
      if (endpoint == Endpoint::kChat) Check(!out.messages.empty());
      else Check(!out.prompts.empty() && out.prompts.size() <= static_cast<size_t>(kMaxPrompts));
      for (const CompletionPrompt& p : out.prompts) {
        Check(p.is_tokens ? !p.tokens.empty() : !p.text.empty());
        for (int32_t t : p.tokens) Check(t >= 0);
      }
      Check(out.n >= 1 && out.n * std::max<size_t>(1, out.prompts.size()) <= kMaxChoicesPerResponse);
      Check(out.stop.min_tokens >= 0 && out.stop.min_tokens <= out.stop.max_tokens);
      Check(!out.gate.tier_b_form || witcert::ParseTierBForm(*out.gate.tier_b_form).ok());
    } else {
      Check(error.http_status >= 400 && error.http_status < 500);
      Check(!error.message.empty());
      Check(nlohmann::json::accept(error.Body()));
    }
  }
  return 0;
}
