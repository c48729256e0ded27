#include "server/http/openai_response.h"

#include "server/http/api_error.h"

namespace witcert::http {
namespace {

using nlohmann::json;

json BytesArray(const std::string& bytes) {
  json a = json::array();
  for (unsigned char c : bytes) a.push_back(static_cast<int>(c));
  return a;
}

const char* ObjectName(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

json Header(Endpoint endpoint, const ResponseMeta& meta, bool chunk) {
  return {{"id", meta.id},
          {"object", ObjectName(endpoint, chunk)},
          {"created", meta.created},
          {"model", meta.model},
          {"system_fingerprint", "witcert"}};
}

json NullOr(const char* s) { return s == nullptr ? json(nullptr) : json(s); }

}  // namespace

const char* OpenAiFinishReason(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

json UsageJson(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json ChatLogprobs(const std::vector<SampledToken>& tokens, const Tokenizer& tokenizer) {
  json content = json::array();
  for (const SampledToken& t : tokens) {
    const std::string bytes = tokenizer.TokenBytes(t.token);
    json top = json::array();
    for (const TokenLogprob& alt : t.top) {
      const std::string alt_bytes = tokenizer.TokenBytes(alt.token);
      top.push_back({{"token", alt_bytes}, {"logprob", alt.logprob}, {"bytes", BytesArray(alt_bytes)}});
    }
    content.push_back({{"token", bytes},
                       {"logprob", t.logprob},
                       {"bytes", BytesArray(bytes)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json CompletionLogprobs(const std::vector<SampledToken>& tokens, const Tokenizer& tokenizer,
                        int64_t text_offset) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const SampledToken& t : tokens) {
    const std::string bytes = tokenizer.TokenBytes(t.token);
    toks.push_back(bytes);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob& alt : t.top) top[tokenizer.TokenBytes(alt.token)] = alt.logprob;
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(bytes.size());
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json FullResponse(Endpoint endpoint, const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                  const Usage& usage, const json& witcert) {
  json r = Header(endpoint, meta, /*chunk=*/false);
  r["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json choice = {{"index", i}, {"logprobs", c.logprobs}, {"finish_reason", NullOr(c.finish_reason)}};
    if (endpoint == Endpoint::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    if (!c.witcert.is_null()) choice["witcert"] = c.witcert;
    r["choices"].push_back(std::move(choice));
  }
  r["usage"] = UsageJson(usage);
  r["witcert"] = witcert;
  return r;
}

json StreamChunk(Endpoint endpoint, const ResponseMeta& meta, int32_t index, const std::string& text,
                 bool role, const json& logprobs, const char* finish_reason) {
  json r = Header(endpoint, meta, /*chunk=*/true);
  json choice = {{"index", index}, {"logprobs", logprobs}, {"finish_reason", NullOr(finish_reason)}};
  if (endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (!text.empty() || role) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  r["choices"] = json::array({choice});
  return r;
}

json UsageChunk(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage) {
  json r = Header(endpoint, meta, /*chunk=*/true);
  r["choices"] = json::array();
  r["usage"] = UsageJson(usage);
  return r;
}

std::string SseEvent(const json& payload) { return "data: " + DumpJson(payload) + "\n\n"; }

}  // namespace witcert::http
