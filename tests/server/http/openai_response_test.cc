#include "server/http/openai_response.h"

#include "gtest/gtest.h"

namespace witcert::http {
namespace {

using nlohmann::json;

// Token i is the single byte 'a' + i; token 9 is half of a UTF-8 character.
class FakeTokenizer : public Tokenizer {
 public:
  std::vector<TokenId> Encode(std::string_view, bool, bool) const override { return {}; }
  std::string TokenBytes(TokenId id, bool) const override {
    return id == 9 ? std::string("\xc3") : std::string(1, static_cast<char>('a' + id));
  }
  std::string Decode(const std::vector<TokenId>&, bool) const override { return ""; }
  int32_t vocab_size() const override { return 10; }
  TokenId bos_id() const override { return -1; }
  TokenId eos_id() const override { return 0; }
  bool IsEndOfGeneration(TokenId) const override { return false; }
  bool IsSpecial(TokenId) const override { return false; }
  TokenId Find(std::string_view) const override { return -1; }
  std::string_view pre_tokenizer() const override { return "fake"; }
};

ResponseMeta Meta() { return {"chatcmpl-1", 1700000000, "m"}; }

TEST(OpenAiResponse, ChatWholeResponse) {
  Usage u{5, 3};
  json r = FullResponse(Endpoint::kChat, Meta(), {{"hey", "stop", nullptr, nullptr}}, u, json{{"cells", 1}});
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "hey");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["total_tokens"], 8);
  EXPECT_EQ(r["witcert"]["cells"], 1);
  EXPECT_EQ(r["choices"][0]["index"], 0);
  EXPECT_FALSE(r["choices"][0].contains("witcert"));  // n = 1: the response's report only
}

// n > 1: choices in order with their indices, each with its own report when given.
TEST(OpenAiResponse, SeveralChoices) {
  json r = FullResponse(Endpoint::kCompletion, Meta(),
                        {{"a", "stop", nullptr, json{{"cells", 2}}}, {"bc", "length", nullptr, json{{"cells", 3}}}},
                        Usage{4, 7}, json{{"cells", 5}});
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][1]["index"], 1);
  EXPECT_EQ(r["choices"][1]["text"], "bc");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(r["choices"][0]["witcert"]["cells"], 2);
  EXPECT_EQ(r["witcert"]["cells"], 5);
  EXPECT_EQ(r["usage"]["total_tokens"], 11);
  json c = StreamChunk(Endpoint::kChat, Meta(), 3, "x", false, nullptr, nullptr);
  EXPECT_EQ(c["choices"][0]["index"], 3);
  EXPECT_EQ(c["choices"][0]["delta"]["content"], "x");
}

TEST(OpenAiResponse, CompletionChunkAndUsageChunk) {
  json c = StreamChunk(Endpoint::kCompletion, Meta(), 0, "x", false, nullptr, nullptr);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "x");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  json u = UsageChunk(Endpoint::kChat, Meta(), Usage{2, 1});
  EXPECT_TRUE(u["choices"].is_array());
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["completion_tokens"], 1);
  json first = StreamChunk(Endpoint::kChat, Meta(), 0, "", true, nullptr, nullptr);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
}

TEST(OpenAiResponse, SseFraming) {
  EXPECT_EQ(SseEvent(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
}

TEST(OpenAiResponse, LogprobFormats) {
  FakeTokenizer tok;
  SampledToken t;
  t.token = 1;
  t.logprob = -0.5f;
  t.top = {{1, -0.5f}, {2, -1.5f}};
  SampledToken partial;
  partial.token = 9;
  partial.logprob = -2.0f;
  json chat = ChatLogprobs({t, partial}, tok);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], "b");
  EXPECT_FLOAT_EQ(chat["content"][0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(chat["content"][0]["bytes"], json::array({98}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], "c");
  EXPECT_EQ(chat["content"][1]["bytes"], json::array({0xc3}));
  // The partial UTF-8 token still serializes (as U+FFFD).
  EXPECT_NO_THROW(json::parse(DumpJson(chat)));

  json comp = CompletionLogprobs({t, t}, tok, 10);
  EXPECT_EQ(comp["tokens"], json::array({"b", "b"}));
  EXPECT_EQ(comp["text_offset"], json::array({10, 11}));
  EXPECT_FLOAT_EQ(comp["top_logprobs"][0]["c"].get<float>(), -1.5f);
}

TEST(OpenAiResponse, FinishReasons) {
  EXPECT_STREQ(OpenAiFinishReason(FinishReason::kLength), "length");
  EXPECT_STREQ(OpenAiFinishReason(FinishReason::kStop), "stop");
}

}  // namespace
}  // namespace witcert::http
