#include "server/http/openai_request.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/gate/gate_policy.h"

namespace witcert::http {
namespace {

using nlohmann::json;

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::number_float: return "number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    default: return "value";
  }
}

// Reads optional typed fields from the request object; the first error wins.
class Fields {
 public:
  Fields(const json& body, ApiError* error) : body_(body), error_(error) {}
  bool failed() const { return failed_; }

  // Returns the field or nullptr when absent or null.
  const json* Find(const char* key) const {
    auto it = body_.find(key);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool Fail(std::string message, std::string param) {
    if (!failed_) *error_ = InvalidRequest(std::move(message), std::move(param));
    failed_ = true;
    return false;
  }
  bool WrongType(const char* key, const char* want, const json& got) {
    return Fail(absl::StrFormat("'%s' must be %s, got %s", key, want, TypeName(got)), key);
  }

  void Bool(const char* key, bool* out) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_boolean()) return (void)WrongType(key, "a boolean", *v);
    *out = v->get<bool>();
  }
  // Float in [lo, hi] (NaN never is: JSON has none, but be explicit).
  void Number(const char* key, float* out, double lo, double hi, bool lo_open = false) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_number()) return (void)WrongType(key, "a number", *v);
    const double d = v->get<double>();
    if (!(lo_open ? d > lo : d >= lo) || !(d <= hi) || std::isnan(d)) {
      return (void)Fail(absl::StrFormat("'%s' must be in %s%g, %g]: got %g", key,
                                        lo_open ? "(" : "[", lo, hi, d),
                        key);
    }
    *out = static_cast<float>(d);
  }
  // Integer in [lo, hi]; `present` (optional) says whether it was given.
  void Int(const char* key, int64_t* out, int64_t lo, int64_t hi, bool* present = nullptr) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_number_integer()) return (void)WrongType(key, "an integer", *v);
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return (void)Fail(absl::StrFormat("'%s' is out of range", key), key);
    }
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) {
      return (void)Fail(absl::StrFormat("'%s' must be in [%d, %d]: got %d", key, lo, hi, i), key);
    }
    *out = i;
    if (present != nullptr) *present = true;
  }

 private:
  const json& body_;
  ApiError* error_;
  bool failed_ = false;
};

bool ParseContent(const json& content, const std::string& param, std::string* out, Fields& f) {
  if (content.is_null()) return true;
  if (content.is_string()) {
    *out = content.get<std::string>();
    return true;
  }
  if (!content.is_array()) {
    return f.Fail(absl::StrCat("'", param, "' must be a string or an array of text parts, got ",
                               TypeName(content)),
                  param);
  }
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string p = absl::StrCat(param, "[", i, "]");
    if (!part.is_object()) return f.Fail(absl::StrCat("'", p, "' must be an object"), p);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || type->get<std::string>() != "text") {
      return f.Fail(absl::StrCat("'", p, ".type': only \"text\" content parts are supported"),
                    p + ".type");
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return f.Fail(absl::StrCat("'", p, ".text' must be a string"), p + ".text");
    }
    *out += text->get<std::string>();
  }
  return true;
}

bool ParseMessages(const json& body, const ParseLimits& limits, GenerationRequest* out,
                   Fields& f) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return f.Fail("'messages' is required", "messages");
  if (!it->is_array()) return f.WrongType("messages", "an array", *it);
  if (it->empty()) return f.Fail("'messages' must not be empty", "messages");
  if (it->size() > static_cast<size_t>(limits.max_messages)) {
    return f.Fail(absl::StrFormat("'messages' has more than %d entries", limits.max_messages),
                  "messages");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string p = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return f.Fail(absl::StrCat("'", p, "' must be an object"), p);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return f.Fail(absl::StrCat("'", p, ".role' must be a string"), p + ".role");
    }
    ChatMessage msg;
    absl::StatusOr<std::string> chat_role = ChatRole(role->get<std::string>());
    if (!chat_role.ok()) return f.Fail(absl::StrCat("'", p, ".role': ", chat_role.status().message()), p + ".role");
    msg.role = *std::move(chat_role);
    auto content = m.find("content");
    if (content == m.end()) {
      return f.Fail(absl::StrCat("'", p, ".content' is required"), p + ".content");
    }
    if (!ParseContent(*content, p + ".content", &msg.content, f)) return false;
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      return f.Fail("tool calls are not supported", p + ".tool_calls");
    }
    out->messages.push_back(std::move(msg));
  }
  return true;
}

bool ParseTokenList(const json& list, const char* param, std::vector<int32_t>* out, Fields& f) {
  for (const json& t : list) {
    if (!t.is_number_integer()) {
      return f.Fail(absl::StrFormat("'%s' token ids must be integers", param), param);
    }
    const int64_t id = t.is_number_unsigned() && t.get<uint64_t>() > INT32_MAX
                           ? -1
                           : t.get<int64_t>();
    if (id < 0 || id > INT32_MAX) {
      return f.Fail(absl::StrFormat("'%s' holds an invalid token id", param), param);
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return true;
}

// "prompt": a string, a list of token ids, or a batch: a list of strings and/or token lists
// (each one prompt; the response holds n choices per prompt, prompt-major).
bool ParsePrompt(const json& body, GenerationRequest* out, Fields& f) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return f.Fail("'prompt' is required", "prompt");
  const json& p = *it;
  auto one = [&](const json& v) -> bool {
    CompletionPrompt prompt;
    if (v.is_string()) {
      prompt.text = v.get<std::string>();
    } else if (v.is_array() && (v.empty() || v[0].is_number_integer())) {
      prompt.is_tokens = true;
      if (!ParseTokenList(v, "prompt", &prompt.tokens, f)) return false;
    } else {
      return f.Fail("each prompt of a batch must be a string or a list of token ids", "prompt");
    }
    if (prompt.is_tokens ? prompt.tokens.empty() : prompt.text.empty()) {
      return f.Fail("'prompt' must not be empty", "prompt");
    }
    out->prompts.push_back(std::move(prompt));
    return true;
  };
  if (p.is_string()) return one(p);
  if (!p.is_array()) return f.WrongType("prompt", "a string or an array", p);
  if (p.empty()) return f.Fail("'prompt' must not be empty", "prompt");
  if (p[0].is_number_integer()) return one(p);
  if (!p[0].is_string() && !p[0].is_array()) {
    return f.Fail("'prompt' must be a string, a list of token ids, or a list of those", "prompt");
  }
  if (p.size() > static_cast<size_t>(kMaxPrompts)) {
    return f.Fail(absl::StrFormat("'prompt' may batch at most %d prompts", kMaxPrompts), "prompt");
  }
  for (const json& v : p) {
    if (!one(v)) return false;
  }
  return true;
}

bool ParseStop(const json& body, const ParseLimits& limits, GenerationRequest* out, Fields& f) {
  const json* stop = f.Find("stop");
  if (stop == nullptr) return true;
  std::vector<std::string> strings;
  if (stop->is_string()) {
    strings.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    if (stop->size() > static_cast<size_t>(limits.max_stop_strings)) {
      return f.Fail(absl::StrFormat("'stop' may hold at most %d strings", limits.max_stop_strings),
                    "stop");
    }
    for (const json& s : *stop) {
      if (!s.is_string()) return f.Fail("'stop' must hold only strings", "stop");
      strings.push_back(s.get<std::string>());
    }
  } else {
    return f.WrongType("stop", "a string or an array of strings", *stop);
  }
  for (const std::string& s : strings) {
    if (s.empty()) return f.Fail("'stop' strings must not be empty", "stop");
  }
  out->stop.stop = std::move(strings);
  return true;
}

bool ParseGate(const json& body, GenerationRequest* out, Fields& f) {
  const json* w = f.Find("witcert");
  if (w == nullptr) return true;
  if (!w->is_object()) return f.WrongType("witcert", "an object", *w);
  for (auto it = w->begin(); it != w->end(); ++it) {
    const std::string key = it.key();
    const std::string param = "witcert." + key;
    const json& v = it.value();
    if (key == "gate") {
      if (!v.is_string()) return f.Fail("'witcert.gate' must be a string", param);
      const std::string mode = v.get<std::string>();
      if (mode != "off" && mode != "observe" && mode != "repair") {
        return f.Fail("'witcert.gate' must be one of off, observe, repair", param);
      }
      out->gate.mode = mode;
    } else if (key == "tv_threshold" || key == "v_threshold" || key == "delta") {
      if (!v.is_number()) return f.Fail(absl::StrCat("'", param, "' must be a number"), param);
      const double d = v.get<double>();
      if (const absl::Status s = CheckGateOverride(key, param, d); !s.ok()) return f.Fail(std::string(s.message()), param);
      (key == "tv_threshold" ? out->gate.tv_threshold
                             : key == "v_threshold" ? out->gate.v_threshold : out->gate.delta) = d;
    } else if (key == "pagein_budget") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1 << 20) {
        return f.Fail("'witcert.pagein_budget' must be an integer in [0, 1048576]", param);
      }
      out->gate.pagein_budget = static_cast<int32_t>(v.get<int64_t>());
    } else if (key == "tier_b_form") {
      if (!v.is_string() || !ParseTierBForm(v.get<std::string>()).ok()) {
        return f.Fail("'witcert.tier_b_form' must be one of per-token, scale-only, split-max", param);
      }
      out->gate.tier_b_form = v.get<std::string>();
    } else {
      return f.Fail(absl::StrCat("unknown field '", param,
                                 "' (gate, tv_threshold, v_threshold, delta, pagein_budget, tier_b_form)"),
                    param);
    }
  }
  return true;
}

// Parameters WitCert does not implement: rejected when set to anything but their no-op.
bool RejectUnsupported(const json& body, Endpoint endpoint, Fields& f) {
  for (const char* key : {"tools", "functions", "tool_choice", "function_call", "suffix"}) {
    const json* v = f.Find(key);
    if (v != nullptr && !(v->is_array() && v->empty()) &&
        !(v->is_string() && v->get<std::string>() == "none")) {
      return f.Fail(absl::StrFormat("'%s' is not supported by this server", key), key);
    }
  }
  if (const json* v = f.Find("best_of");
      v != nullptr && !(v->is_number_integer() && v->get<int64_t>() == 1)) {
    return f.Fail("'best_of' must be 1 (only one completion per request is supported)",
                  "best_of");
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> RenderChatPrompt(const ChatTemplate& chat_template, const GenerationRequest& request) {
  if (request.continue_final_message) return chat_template.ApplyContinuing(request.messages);
  return chat_template.Apply(request.messages, request.add_generation_prompt);
}

bool ParseJsonObject(std::string_view body, nlohmann::json* out, ApiError* error) {
  try {
    *out = json::parse(body.begin(), body.end());
  } catch (const json::parse_error& e) {
    // e.byte locates the problem; the message itself may quote invalid bytes (DumpJson
    // replaces them).
    *error = InvalidRequest(
        absl::StrFormat("the request body is not valid JSON (at byte %d): %s", e.byte, e.what()));
    return false;
  } catch (const json::exception& e) {  // e.g. out_of_range.406: a number beyond double's range
    *error = InvalidRequest(absl::StrCat("the request body is not valid JSON: ", e.what()));
    return false;
  }
  if (!out->is_object()) {
    *error = InvalidRequest(absl::StrCat("the request body must be a JSON object, got ",
                                         TypeName(*out)));
    return false;
  }
  return true;
}

bool ParseGenerationRequest(std::string_view body, Endpoint endpoint, const ParseLimits& limits,
                            GenerationRequest* out, ApiError* error) {
  json j;
  if (!ParseJsonObject(body, &j, error)) return false;
  *out = GenerationRequest();
  out->endpoint = endpoint;
  Fields f(j, error);

  if (const json* model = f.Find("model"); model != nullptr) {
    if (!model->is_string()) return f.WrongType("model", "a string", *model);
    out->model = model->get<std::string>();
  }
  if (endpoint == Endpoint::kChat) {
    if (!ParseMessages(j, limits, out, f)) return false;
    f.Bool("add_generation_prompt", &out->add_generation_prompt);
    f.Bool("continue_final_message", &out->continue_final_message);
    if (f.failed()) return false;
    if (out->continue_final_message) {
      if (out->add_generation_prompt && f.Find("add_generation_prompt") != nullptr) {
        return f.Fail("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                      "continue_final_message");
      }
      out->add_generation_prompt = false;
      if (out->messages.back().role != "assistant" || out->messages.back().content.empty()) {
        return f.Fail("'continue_final_message' needs the last message to be a non-empty assistant message",
                      "continue_final_message");
      }
    }
  } else {
    if (!ParsePrompt(j, out, f)) return false;
  }
  if (!RejectUnsupported(j, endpoint, f)) return false;

  int64_t n = 1;
  f.Int("n", &n, INT64_MIN, INT64_MAX);
  if (!f.failed() && (n < 1 || n > kMaxChoices)) {
    return f.Fail(absl::StrFormat("'n' must be between 1 and %d", kMaxChoices), "n");
  }
  out->n = static_cast<int32_t>(n);
  if (const json* v = f.Find("echo"); v != nullptr && !v->is_null()) {
    if (!v->is_boolean()) return f.WrongType("echo", "a boolean", *v);
    if (endpoint == Endpoint::kChat && v->get<bool>()) return f.Fail("'echo' applies to completions only", "echo");
    out->echo = v->get<bool>();
  }
  const int64_t prompts = std::max<int64_t>(1, static_cast<int64_t>(out->prompts.size()));
  if (prompts * n > kMaxChoicesPerResponse) {
    return f.Fail(absl::StrFormat("%d prompts × n = %d is more than %d choices", prompts, n, kMaxChoicesPerResponse),
                  "n");
  }

  f.Bool("stream", &out->stream);
  if (const json* so = f.Find("stream_options"); so != nullptr) {
    if (!so->is_object()) return f.WrongType("stream_options", "an object", *so);
    auto iu = so->find("include_usage");
    if (iu != so->end() && !iu->is_null()) {
      if (!iu->is_boolean()) {
        return f.Fail("'stream_options.include_usage' must be a boolean",
                      "stream_options.include_usage");
      }
      out->include_usage = iu->get<bool>();
    }
  }

  // max_completion_tokens (the newer name) wins over max_tokens when both are given.
  int64_t max_tokens = limits.default_max_tokens;
  f.Int("max_tokens", &max_tokens, 1, limits.max_tokens_limit);
  f.Int("max_completion_tokens", &max_tokens, 1, limits.max_tokens_limit);
  out->stop.max_tokens = static_cast<int32_t>(max_tokens);

  SamplingParams& s = out->sampling;
  s = limits.sampling_defaults;
  f.Number("temperature", &s.temperature, 0.0, 2.0);
  f.Number("top_p", &s.top_p, 0.0, 1.0, /*lo_open=*/true);
  int64_t top_k = 0;
  f.Int("top_k", &top_k, -1, 1 << 20);
  s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);  // -1 (vLLM) and 0 mean off
  f.Number("min_p", &s.min_p, 0.0, 1.0);
  f.Number("presence_penalty", &s.presence_penalty, -2.0, 2.0);
  f.Number("frequency_penalty", &s.frequency_penalty, -2.0, 2.0);
  int64_t seed = 0;
  bool has_seed = false;
  f.Int("seed", &seed, INT64_MIN, INT64_MAX, &has_seed);
  if (has_seed) s.seed = static_cast<uint64_t>(seed);
  f.Bool("ignore_eos", &out->stop.ignore_eos);
  // vLLM's sampling extras.
  f.Number("repetition_penalty", &s.repetition_penalty, 0.0, 2.0, /*lo_open=*/true);
  int64_t min_tokens = 0;
  f.Int("min_tokens", &min_tokens, 0, out->stop.max_tokens);
  out->stop.min_tokens = static_cast<int32_t>(min_tokens);
  if (const json* v = f.Find("guided_choice"); v != nullptr && !v->is_null()) {
    if (!v->is_array() || v->empty() || v->size() > kMaxGuidedChoices) {
      return f.Fail(absl::StrFormat("'guided_choice' must be an array of 1 to %d strings", kMaxGuidedChoices),
                    "guided_choice");
    }
    for (const json& c : *v) {
      if (!c.is_string() || c.get<std::string>().empty() || c.get<std::string>().size() > kMaxGuidedChoiceBytes) {
        return f.Fail(absl::StrFormat("'guided_choice' must hold non-empty strings of at most %d bytes",
                                      kMaxGuidedChoiceBytes),
                      "guided_choice");
      }
      s.guided_choice.push_back(c.get<std::string>());
    }
  }
  if (const json* v = f.Find("stop_token_ids"); v != nullptr && !v->is_null()) {
    if (!v->is_array() || v->size() > kMaxStopTokenIds) {
      return f.Fail(absl::StrFormat("'stop_token_ids' must be an array of at most %d token ids", kMaxStopTokenIds),
                    "stop_token_ids");
    }
    for (const json& id : *v) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return f.Fail("'stop_token_ids' must hold token ids (non-negative integers)", "stop_token_ids");
      }
      out->stop.stop_token_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (f.failed()) return false;
  // logit_bias: {"<token id>": bias in [-100, 100]} (the ids are checked against the vocabulary
  // where the model is known).
  if (const json* v = f.Find("logit_bias"); v != nullptr && !v->is_null()) {
    if (!v->is_object()) return f.WrongType("logit_bias", "an object of token id → bias", *v);
    if (v->size() > kMaxLogitBias) {
      return f.Fail(absl::StrFormat("'logit_bias' may hold at most %d tokens", kMaxLogitBias), "logit_bias");
    }
    for (auto it = v->begin(); it != v->end(); ++it) {
      const std::string& key = it.key();
      int64_t id = 0;
      const bool digits = !key.empty() && key.size() <= 9 &&
                          key.find_first_not_of("0123456789") == std::string::npos;
      if (digits) id = std::stoll(key);
      if (!digits) {
        return f.Fail(absl::StrFormat("'logit_bias' key \"%s\" is not a token id", key), "logit_bias");
      }
      if (!it.value().is_number() || !(it.value().get<double>() >= -100.0 && it.value().get<double>() <= 100.0)) {
        return f.Fail(absl::StrFormat("'logit_bias' value for token %d must be a number in [-100, 100]", id),
                      "logit_bias");
      }
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(it.value().get<double>()));
    }
  }

  if (endpoint == Endpoint::kChat) {
    f.Bool("logprobs", &out->logprobs);
    int64_t top = 0;
    bool has_top = false;
    f.Int("top_logprobs", &top, 0, 20, &has_top);
    if (f.failed()) return false;
    if (has_top && top > 0 && !out->logprobs) {
      return f.Fail("'top_logprobs' requires 'logprobs': true", "top_logprobs");
    }
    out->top_logprobs = static_cast<int32_t>(top);
  } else {
    // Completions: logprobs is the number of alternatives (0 still returns the chosen
    // token's logprob). Echo with logprobs would need the prompt's own logprobs, which the
    // engine does not compute.
    int64_t lp = 0;
    bool has_lp = false;
    f.Int("logprobs", &lp, 0, 20, &has_lp);
    if (f.failed()) return false;
    out->logprobs = has_lp;
    out->top_logprobs = static_cast<int32_t>(lp);
    if (out->echo && out->logprobs) {
      return f.Fail("'echo' with 'logprobs' is not supported: the prompt's own logprobs are not computed",
                    "echo");
    }
  }
  if (const json* v = f.Find("response_format"); v != nullptr && !v->is_null()) {
    if (!v->is_object() || !v->contains("type") ||
        ((*v)["type"] != "text" && (*v)["type"] != "json_object")) {
      return f.Fail("response_format must be {\"type\": \"text\"} or {\"type\": \"json_object\"} "
                    "(json_schema is not supported)",
                    "response_format");
    }
    s.json_object = (*v)["type"] == "json_object";
  }
  if (s.json_object && !s.guided_choice.empty()) {
    return f.Fail("'guided_choice' cannot be combined with a json_object response_format", "guided_choice");
  }
  s.logprobs = out->logprobs;
  s.top_logprobs = out->top_logprobs;

  if (!ParseStop(j, limits, out, f)) return false;
  if (!ParseGate(j, out, f)) return false;
  return !f.failed();
}

}  // namespace witcert::http
