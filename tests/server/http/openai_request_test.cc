#include "server/http/openai_request.h"

#include <algorithm>

#include <string>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace witcert::http {
namespace {

GenerationRequest ParseOk(const std::string& body, Endpoint endpoint = Endpoint::kChat) {
  GenerationRequest out;
  ApiError error;
  EXPECT_TRUE(ParseGenerationRequest(body, endpoint, ParseLimits(), &out, &error))
      << body << " → " << error.message;
  return out;
}

// Rejected with 400 and the given param.
void ExpectRejected(const std::string& body, const std::string& param,
                    Endpoint endpoint = Endpoint::kChat) {
  GenerationRequest out;
  ApiError error;
  ASSERT_FALSE(ParseGenerationRequest(body, endpoint, ParseLimits(), &out, &error)) << body;
  EXPECT_EQ(error.http_status, 400) << body;
  EXPECT_EQ(error.type, "invalid_request_error");
  EXPECT_EQ(error.param, param) << body << " → " << error.message;
  EXPECT_FALSE(error.message.empty());
}

constexpr char kMsg[] = R"("messages": [{"role": "user", "content": "hi"}])";

std::string Chat(const std::string& extra) {
  return std::string("{") + kMsg + (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(OpenAiRequest, MinimalChatGetsDefaults) {
  GenerationRequest r = ParseOk(Chat(""));
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.stop.max_tokens, ParseLimits().default_max_tokens);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.sampling.seed.has_value());
}

TEST(OpenAiRequest, ReadsEverySamplingField) {
  GenerationRequest r = ParseOk(Chat(
      R"("model": "m", "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
         "seed": 42, "presence_penalty": 0.5, "frequency_penalty": -0.5, "max_tokens": 17,
         "stop": ["\n\n", "END"], "stream": true, "stream_options": {"include_usage": true},
         "logprobs": true, "top_logprobs": 3, "n": 1)"));
  EXPECT_EQ(r.model, "m");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(r.stop.max_tokens, 17);
  EXPECT_EQ(r.stop.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 3);
}

TEST(OpenAiRequest, MaxCompletionTokensWins) {
  EXPECT_EQ(ParseOk(Chat(R"("max_tokens": 5, "max_completion_tokens": 9)")).stop.max_tokens, 9);
  EXPECT_EQ(ParseOk(Chat(R"("max_completion_tokens": 3)")).stop.max_tokens, 3);
  EXPECT_EQ(ParseOk(Chat(R"("max_tokens": null)")).stop.max_tokens, 256);
}

TEST(OpenAiRequest, ContentPartsAndDeveloperRole) {
  GenerationRequest r = ParseOk(R"({"messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})");
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
}

TEST(OpenAiRequest, CompletionPrompts) {
  GenerationRequest r = ParseOk(R"({"prompt": "Once"})", Endpoint::kCompletion);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Once");
  EXPECT_FALSE(r.prompts[0].is_tokens);
  r = ParseOk(R"({"prompt": [1, 2, 3]})", Endpoint::kCompletion);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  r = ParseOk(R"({"prompt": ["solo"]})", Endpoint::kCompletion);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "solo");
  r = ParseOk(R"({"prompt": [[5, 6]], "logprobs": 2})", Endpoint::kCompletion);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
}

// A batch of prompts (strings and token lists, mixed): one entry each, in order; at most
// kMaxPrompts of them and kMaxChoicesPerResponse choices in all.
TEST(OpenAiRequest, BatchPrompts) {
  GenerationRequest r = ParseOk(R"({"prompt": ["a", [7, 8], "b"], "n": 2})", Endpoint::kCompletion);
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.prompts[0].text, "a");
  EXPECT_EQ(r.prompts[1].tokens, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(r.prompts[2].text, "b");
  EXPECT_EQ(r.n, 2);
  std::string many = R"({"prompt": [)";
  for (int i = 0; i <= kMaxPrompts; ++i) many += std::string(i ? "," : "") + R"("x")";
  ExpectRejected(many + "]}", "prompt", Endpoint::kCompletion);
  ExpectRejected(absl::StrFormat(R"({"prompt": ["a", "b", "c", "d", "e"], "n": %d})", kMaxChoices),
                 "n", Endpoint::kCompletion);
}

TEST(OpenAiRequest, RejectsBadPrompts) {
  ExpectRejected(R"({"prompt": ["a", ""]})", "prompt", Endpoint::kCompletion);
  ExpectRejected(R"({"prompt": [[1], []]})", "prompt", Endpoint::kCompletion);
  ExpectRejected(R"({"prompt": ""})", "prompt", Endpoint::kCompletion);
  ExpectRejected(R"({"prompt": []})", "prompt", Endpoint::kCompletion);
  ExpectRejected(R"({"prompt": [1, -2]})", "prompt", Endpoint::kCompletion);
  ExpectRejected(R"({"prompt": [1, "x"]})", "prompt", Endpoint::kCompletion);
  ExpectRejected(R"({"prompt": 12})", "prompt", Endpoint::kCompletion);
  ExpectRejected(R"({})", "prompt", Endpoint::kCompletion);
}

TEST(OpenAiRequest, RejectsBadMessages) {
  ExpectRejected(R"({})", "messages");
  ExpectRejected(R"({"messages": []})", "messages");
  ExpectRejected(R"({"messages": "hi"})", "messages");
  ExpectRejected(R"({"messages": [{"content": "x"}]})", "messages[0].role");
  ExpectRejected(R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role");
  ExpectRejected(R"({"messages": [{"role": "user"}]})", "messages[0].content");
  ExpectRejected(R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content");
  ExpectRejected(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
                 "messages[0].content[0].type");
}

TEST(OpenAiRequest, RejectsWrongTypesAndRanges) {
  ExpectRejected(Chat(R"("temperature": "hot")"), "temperature");
  ExpectRejected(Chat(R"("temperature": -0.1)"), "temperature");
  ExpectRejected(Chat(R"("temperature": 2.5)"), "temperature");
  ExpectRejected(Chat(R"("top_p": 0)"), "top_p");
  ExpectRejected(Chat(R"("top_p": 1.5)"), "top_p");
  ExpectRejected(Chat(R"("top_k": -2)"), "top_k");
  ExpectRejected(Chat(R"("min_p": 2)"), "min_p");
  ExpectRejected(Chat(R"("presence_penalty": 3)"), "presence_penalty");
  ExpectRejected(Chat(R"("frequency_penalty": -3)"), "frequency_penalty");
  ExpectRejected(Chat(R"("max_tokens": 0)"), "max_tokens");
  ExpectRejected(Chat(R"("max_tokens": -5)"), "max_tokens");
  ExpectRejected(Chat(R"("max_tokens": 1e12)"), "max_tokens");
  ExpectRejected(Chat(R"("max_tokens": 99999999)"), "max_tokens");
  ExpectRejected(Chat(R"("max_completion_tokens": "10")"), "max_completion_tokens");
  ExpectRejected(Chat(R"("seed": 1.5)"), "seed");
  ExpectRejected(Chat(R"("stream": "yes")"), "stream");
  ExpectRejected(Chat(R"("stream_options": {"include_usage": 1})"), "stream_options.include_usage");
  ExpectRejected(Chat(R"("model": 7)"), "model");
  ExpectRejected(Chat(R"("logprobs": 1)"), "logprobs");
  ExpectRejected(Chat(R"("top_logprobs": 2)"), "top_logprobs");  // needs logprobs: true
  ExpectRejected(Chat(R"("logprobs": true, "top_logprobs": 21)"), "top_logprobs");
}

TEST(OpenAiRequest, StopLimits) {
  EXPECT_EQ(ParseOk(Chat(R"("stop": "x")")).stop.stop, std::vector<std::string>{"x"});
  ExpectRejected(Chat(R"("stop": ["a", "b", "c", "d", "e"])"), "stop");
  ExpectRejected(Chat(R"("stop": [1])"), "stop");
  ExpectRejected(Chat(R"("stop": "")"), "stop");
  ExpectRejected(Chat(R"("stop": {"a": 1})"), "stop");
}

TEST(OpenAiRequest, NChoicesFromOneToTheLimit) {
  EXPECT_EQ(ParseOk(Chat("")).n, 1);
  EXPECT_EQ(ParseOk(Chat(R"("n": 1)")).n, 1);
  EXPECT_EQ(ParseOk(Chat(R"("n": 3)")).n, 3);
  EXPECT_EQ(ParseOk(Chat(absl::StrFormat(R"("n": %d)", kMaxChoices))).n, kMaxChoices);
  ExpectRejected(Chat(absl::StrFormat(R"("n": %d)", kMaxChoices + 1)), "n");
  ExpectRejected(Chat(R"("n": 0)"), "n");
  ExpectRejected(Chat(R"("n": "1")"), "n");
}

// logit_bias: token id keys, biases in [-100, 100]; anything else names the field.
TEST(OpenAiRequest, LogitBiasParsed) {
  const GenerationRequest r = ParseOk(Chat(R"("logit_bias": {"5": 10, "0": -100, "12": 0.5})"));
  std::vector<std::pair<int32_t, float>> got = r.sampling.logit_bias;
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::pair<int32_t, float>>{{0, -100.0f}, {5, 10.0f}, {12, 0.5f}}));
  EXPECT_TRUE(ParseOk(Chat(R"("logit_bias": null)")).sampling.logit_bias.empty());
  ExpectRejected(Chat(R"("logit_bias": {"5": 101})"), "logit_bias");
  ExpectRejected(Chat(R"("logit_bias": {"-1": 1})"), "logit_bias");
  ExpectRejected(Chat(R"("logit_bias": {"abc": 1})"), "logit_bias");
  ExpectRejected(Chat(R"("logit_bias": {"5": "1"})"), "logit_bias");
  ExpectRejected(Chat(R"("logit_bias": [5])"), "logit_bias");
}

// vLLM's sampling extras: repetition_penalty in (0, 2], min_tokens in [0, max_tokens],
// stop_token_ids (≤ 64 ids).
TEST(OpenAiRequest, VllmSamplingExtras) {
  const GenerationRequest r =
      ParseOk(Chat(R"("repetition_penalty": 1.3, "min_tokens": 4, "max_tokens": 8, "stop_token_ids": [2, 7])"));
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.3f);
  EXPECT_EQ(r.stop.min_tokens, 4);
  EXPECT_EQ(r.stop.stop_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(ParseOk(Chat("")).sampling.repetition_penalty, 1.0f);
  ExpectRejected(Chat(R"("repetition_penalty": 0)"), "repetition_penalty");
  ExpectRejected(Chat(R"("repetition_penalty": 2.5)"), "repetition_penalty");
  ExpectRejected(Chat(R"("min_tokens": 9, "max_tokens": 8)"), "min_tokens");
  ExpectRejected(Chat(R"("stop_token_ids": [-1])"), "stop_token_ids");
  ExpectRejected(Chat(R"("stop_token_ids": "2")"), "stop_token_ids");
}

// echo: completions only, and not with logprobs (the prompt's own logprobs are not computed).
TEST(OpenAiRequest, EchoForCompletions) {
  EXPECT_TRUE(ParseOk(R"({"prompt": "x", "echo": true})", Endpoint::kCompletion).echo);
  EXPECT_FALSE(ParseOk(R"({"prompt": "x", "echo": false})", Endpoint::kCompletion).echo);
  EXPECT_FALSE(ParseOk(Chat(R"("echo": false)")).echo);
  ExpectRejected(Chat(R"("echo": true)"), "echo");
  ExpectRejected(R"({"prompt": "x", "echo": "yes"})", "echo", Endpoint::kCompletion);
  ExpectRejected(R"({"prompt": "x", "echo": true, "logprobs": 1})", "echo", Endpoint::kCompletion);
}

// Unset sampling fields take the limits' defaults (the checkpoint's generation_config.json);
// fields the request sets override them.
TEST(OpenAiRequest, UnsetSamplingFieldsTakeTheModelsDefaults) {
  ParseLimits limits;
  limits.sampling_defaults.temperature = 0.7f;
  limits.sampling_defaults.top_k = 20;
  limits.sampling_defaults.repetition_penalty = 1.05f;
  GenerationRequest r;
  ApiError error;
  ASSERT_TRUE(ParseGenerationRequest(Chat(R"("top_k": 5)"), Endpoint::kChat, limits, &r, &error)) << error.message;
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.7f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.05f);
  ASSERT_TRUE(ParseGenerationRequest(Chat(R"("temperature": 0)"), Endpoint::kChat, limits, &r, &error));
  EXPECT_EQ(r.sampling.temperature, 0.0f);
}

// continue_final_message (vLLM): the last message must be a non-empty assistant one, and the
// generation prompt goes (saying it should stay is a 400).
TEST(OpenAiRequest, ContinueFinalMessage) {
  constexpr char kTwo[] = R"("messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Well"}])";
  GenerationRequest r = ParseOk(std::string("{") + kTwo + R"(, "continue_final_message": true})");
  EXPECT_TRUE(r.continue_final_message);
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_TRUE(ParseOk(Chat("")).add_generation_prompt);
  EXPECT_FALSE(ParseOk(Chat(R"("add_generation_prompt": false)")).add_generation_prompt);
  ExpectRejected(std::string("{") + kTwo + R"(, "continue_final_message": true, "add_generation_prompt": true})",
                 "continue_final_message");
  ExpectRejected(Chat(R"("continue_final_message": true)"), "continue_final_message");  // last is the user's
}

TEST(OpenAiRequest, UnsupportedFeaturesAreRejectedNotIgnored) {
  ExpectRejected(Chat(R"("tools": [{"type": "function"}])"), "tools");
  ExpectRejected(Chat(R"("response_format": {"type": "json_schema", "json_schema": {}})"), "response_format");
  EXPECT_TRUE(ParseOk(Chat(R"("response_format": {"type": "json_object"})")).sampling.json_object);
  EXPECT_FALSE(ParseOk(Chat(R"("response_format": {"type": "text"})")).sampling.json_object);
  ExpectRejected(R"({"prompt": "x", "best_of": 3})", "best_of", Endpoint::kCompletion);
  // No-op values of those parameters are fine, and unknown extras are ignored.
  ParseOk(Chat(R"("tools": [], "logit_bias": {}, "response_format": {"type": "text"},
                  "user": "u", "some_future_field": 1)"));
}

TEST(OpenAiRequest, WitcertGateOverride) {
  GenerationRequest r =
      ParseOk(Chat(R"("witcert": {"tv_threshold": 0.01, "delta": 0.001, "gate": "repair"})"));
  ASSERT_TRUE(r.gate.any());
  EXPECT_EQ(r.gate.mode, "repair");
  EXPECT_DOUBLE_EQ(*r.gate.tv_threshold, 0.01);
  EXPECT_DOUBLE_EQ(*r.gate.delta, 0.001);
  EXPECT_FALSE(ParseOk(Chat("")).gate.any());
  ExpectRejected(Chat(R"("witcert": {"gate": "strict"})"), "witcert.gate");
  ExpectRejected(Chat(R"("witcert": {"tv_threshold": 0})"), "witcert.tv_threshold");
  ExpectRejected(Chat(R"("witcert": {"tv_threshold": "low"})"), "witcert.tv_threshold");
  ExpectRejected(Chat(R"("witcert": {"bogus": 1})"), "witcert.bogus");
  ExpectRejected(Chat(R"("witcert": 1)"), "witcert");
  r = ParseOk(Chat(R"("witcert": {"tier_b_form": "scale-only"})"));
  ASSERT_TRUE(r.gate.any());
  EXPECT_EQ(r.gate.tier_b_form, "scale-only");
  ExpectRejected(Chat(R"("witcert": {"tier_b_form": "max"})"), "witcert.tier_b_form");
  ExpectRejected(Chat(R"("witcert": {"tier_b_form": 1})"), "witcert.tier_b_form");
}

TEST(OpenAiRequest, MalformedBodies) {
  const std::vector<std::string> bodies = {"", "{", "nul", "[1,2]", "\"str\"",
                                           "{\"messages\": [}",
                                           "{\"messages\": \"\xff\xfe\"}",
                                           "{\"a\": \"\xc3\"}",
                                           // numbers beyond double's range (nlohmann's out_of_range)
                                           "{\"max_tokens\": 1e400}", "3e333333"};
  for (const std::string& body : bodies) {
    GenerationRequest out;
    ApiError error;
    EXPECT_FALSE(ParseGenerationRequest(body, Endpoint::kChat, ParseLimits(), &out, &error))
        << body;
    EXPECT_EQ(error.http_status, 400);
    // The error body must itself be valid JSON even when the input bytes were not UTF-8.
    EXPECT_NO_THROW(nlohmann::json::parse(error.Body()));
  }
}

}  // namespace
}  // namespace witcert::http
